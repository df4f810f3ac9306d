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


def test_the_clock_key_is_read_only_with_the_config_flag(client: Client) -> None:
    """The scripts read the frozen clock only when the config hash says one is set
    (FrozenClock sets both): a call of a deployment without one pays no GET."""
    frozen_us = 1_800_000_000_000_000
    client.redis.set(client.keys.key("test_clock"), str(frozen_us))
    client.queue("q").put("a.b:c", {}, jid="real")
    job = client.get_job("real")
    assert job is not None and abs(job.put_at_ms - int(client.redis.time()[0]) * 1000) < 5000
    client.redis.hset(client.keys.key("config"), "test-clock", "1")
    client.queue("q").put("a.b:c", {}, jid="frozen")
    job = client.get_job("frozen")
    assert job is not None and job.put_at_ms == frozen_us // 1000
