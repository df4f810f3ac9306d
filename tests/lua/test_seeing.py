"""What the scripts keep of a job's insides (under a frozen clock): an attempt's
usage on its record, its history event and the day's statistics (lib/report.lua,
lib/stats.lua); the traceparent of a put (lib/create.lua); live output (live.lua)."""

from __future__ import annotations

import pytest

from runtime import Client
from runtime.errors import LeaseLost
from runtime.queue import ops, wire
from runtime.queue.leases import CompleteRow, FailRow, LiveRow, Outcomes, RetryRow
from runtime.queue.usage import by_klass
from tests.support.clock import FrozenClock

W = "host-1"
TP = "00-" + "ab" * 16 + "-" + "cd" * 8 + "-01"


def test_a_completion_keeps_its_usage_on_the_job_its_event_and_the_stats(
    client: Client, clock: FrozenClock
) -> None:
    q = client.queue("q")
    q.put("app.jobs:heavy", {}, jid="j1")
    [job] = q.pop(1, worker=W)
    reply = client.conn.call(
        ops.complete(
            W, [CompleteRow("j1", job.token or "", "{}", "", "", wire.usage_text(0.612, 212.34))]
        )
    )
    assert reply == {"j1": "complete"}
    done = client.get_job("j1")
    assert done is not None and done.usage == {"cpu_s": 0.612, "max_rss_mb": 212.3}
    assert done.history[-1].event == "completed" and done.history[-1].usage == done.usage
    [key] = client.redis.keys(client.keys.key("stats", queue="q", day=0)[:-1] + "*")
    fields = client.redis.hgetall(key)
    plain = {ops.text(k): ops.text(v) for k, v in fields.items()}
    usage = by_klass(plain)["app.jobs:heavy"]
    assert usage.count == 1 and usage.cpu_s == 0.612 and usage.rss_mb == 212
    assert usage.cpu[6] == 1, "in the bucket up to 1 s"
    assert usage.rss[3] == 1, "in the bucket up to 256 MB"


def test_a_retry_without_usage_clears_the_last_attempts(client: Client, clock: FrozenClock) -> None:
    q = client.queue("q")
    q.put("app.jobs:f", {}, jid="j1", retries=2)
    [job] = q.pop(1, worker=W)
    row = RetryRow("j1", job.token or "", "g", "m", 0, "", wire.usage_text(0.5, 40, of_job=False))
    client.conn.call(ops.retry(W, [row]))
    first = client.get_job("j1")
    assert first is not None
    assert first.usage == {"cpu_s": 0.5, "max_rss_mb": 40.0, "max_rss_of": "child"}
    [job] = q.pop(1, worker=W)
    client.conn.call(ops.fail(W, [FailRow("j1", job.token or "", "runtime.ChildCrashed", "m", "")]))
    last = client.get_job("j1")
    assert last is not None and last.usage is None, "a crash reports none"
    assert [ev.usage for ev in last.history if ev.event in ("retried", "failed")] == [
        first.usage,
        None,
    ]


def test_a_put_keeps_its_traceparent_and_a_pop_hands_it_on(
    client: Client, clock: FrozenClock
) -> None:
    spec = wire.JobSpec.build("q", "app.jobs:f", {}, jid="j1")
    text, data = spec.to_wire()
    client.conn.run("put", text[:-1] + f',"traceparent":"{TP}"}}', data)
    popped = client.conn.call(ops.exchange(W, Outcomes(), 1, ["q"]))
    [leased] = popped.popped.jobs
    assert leased.traceparent == TP


def test_live_output_goes_to_the_jobs_stream_from_its_holder_only(
    client: Client, clock: FrozenClock
) -> None:
    q = client.queue("q")
    q.put("app.jobs:f", {}, jid="j1")
    [job] = q.pop(1, worker=W)
    token = job.token or ""
    assert client.conn.call(ops.live(W, [LiveRow("j1", token, "one\ntwo\n", 0)])) == {
        "j1": "running"
    }
    client.conn.call(ops.live(W, [LiveRow("j1", token, "three\n", 4)]))
    after, batches = client.admin.live_output("j1")
    assert batches == [("one\ntwo\n", 0), ("three\n", 4)]
    assert client.admin.live_output("j1", after) == (after, [])
    assert client.admin.live_tail("j1", 1) == "three\n"
    assert 0 < client.redis.ttl(client.keys.key("live", jid="j1")) <= 3600
    [refused] = client.conn.call(ops.live("other", [LiveRow("j1", token, "x\n", 0)])).values()
    assert isinstance(refused, LeaseLost)
    job.complete()
    [late] = client.conn.call(ops.live(W, [LiveRow("j1", token, "x\n", 0)])).values()
    assert isinstance(late, LeaseLost), "a job that ended takes no more lines"


@pytest.mark.parametrize("usage", ["fast 12", "-1 12", "1.5", "1 2 x"])
def test_a_malformed_usage_is_refused(client: Client, clock: FrozenClock, usage: str) -> None:
    q = client.queue("q")
    q.put("app.jobs:f", {}, jid="j1")
    [job] = q.pop(1, worker=W)
    row = CompleteRow("j1", job.token or "", "{}", "", "", usage)
    [error] = client.conn.call(ops.complete(W, [row])).values()
    assert "usage" in str(error)
