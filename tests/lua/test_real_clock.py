"""Without the frozen clock the scripts read Redis TIME, and never set the seam."""

from __future__ import annotations

from runtime import Client


def test_a_whole_run_on_the_real_clock_never_sets_the_test_clock(client: Client) -> None:
    server_now_ms = int(client.redis.time()[0]) * 1000
    q = client.queue("q")
    q.put("a.b:c", {}, jid="j1")
    q.put("a.b:c", {}, jid="j2", delay=0.001)
    [job] = q.pop(1, worker="w")
    client.leases.heartbeat("w", {job.jid: job.token or ""})
    job.retry("g", "m", delay=0)
    for job in q.pop(5, worker="w"):
        job.complete()
    assert client.redis.exists(client.keys.key("test_clock")) == 0
    done = client.get_job("j1")
    assert done is not None and done.state == "complete"
    assert abs(done.put_at_ms - server_now_ms) < 5000
