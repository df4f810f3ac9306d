"""De-duplication: unique keys, unique_for after completion, requeue_if_running,
and message_status's seven answers."""

from __future__ import annotations

from runtime import Client
from tests.support.clock import FrozenClock
from tests.support.waiting import wait_for


def test_a_duplicate_is_not_created_while_the_original_is_queued_scheduled_or_running(
    client: Client, clock: FrozenClock
) -> None:
    q = client.queue("q")
    first = q.put("a.b:c", {"n": 1}, unique_key="report-42")
    assert q.put("a.b:c", {"n": 2}, unique_key="report-42") == first
    assert q.counts()["waiting"] == 1
    [job] = q.pop(1, worker="w")
    assert q.put("a.b:c", {}, unique_key="report-42") == first
    job.complete()
    second = q.put("a.b:c", {}, unique_key="report-42")
    assert second != first, "free again once complete"
    later = q.put("a.b:c", {}, unique_key="later", delay=60)
    assert q.put("a.b:c", {}, unique_key="later") == later


def test_duplicates_in_one_batch_collapse(client: Client, clock: FrozenClock) -> None:
    q = client.queue("q")
    jids = client.put_many([q.spec("a.b:c", {}, unique_key="k", jid=f"j{i}") for i in range(3)])
    assert jids == ["j0", "j0", "j0"]
    assert client.get_job("j1") is None


def test_unique_for_keeps_the_key_taken_after_completion(
    client: Client, clock: FrozenClock
) -> None:
    q = client.queue("q")
    first = q.put("a.b:c", {}, unique_key="k", unique_for=30)
    q.pop(1, worker="w")[0].complete()
    assert client.message_status(first) == "done-with-backoff"
    assert q.put("a.b:c", {}, unique_key="k") == first
    assert 29_000 < client.redis.pttl(client.keys.key("unique", key="k")) <= 30_000
    brief = q.put("a.b:c", {}, unique_key="brief", unique_for=0.05)
    q.pop(1, worker="w")[0].complete()
    assert q.put("a.b:c", {}, unique_key="brief") == brief
    # the key's TTL runs on Redis's own clock, not the frozen one
    wait_for(lambda: not client.redis.exists(client.keys.key("unique", key="brief")), 5)
    assert q.put("a.b:c", {}, unique_key="brief") != brief
    assert client.message_status(brief) == "done-awaiting-gc"


def test_requeue_if_running_runs_exactly_once_more(client: Client, clock: FrozenClock) -> None:
    q = client.queue("q")
    jid = q.put("a.b:c", {}, unique_key="sync")
    [job] = q.pop(1, worker="w")
    assert client.message_status(jid) == "locked"
    for _ in range(3):
        assert q.put("a.b:c", {}, unique_key="sync", requeue_if_running=True) == jid
    assert client.message_status(jid) == "locked-with-requeue"
    assert job.complete() == "waiting"
    assert client.message_status(jid) == "queued"
    [again] = q.pop(1, worker="w")
    assert again.jid == jid
    assert again.complete() == "complete"
    assert q.pop(1, worker="w") == []
    events = [e.event for e in client.get_job(jid).history]  # type: ignore[union-attr]
    assert events == ["put", "popped", "completed", "popped", "completed"]


def test_a_failed_job_frees_its_key(client: Client, clock: FrozenClock) -> None:
    q = client.queue("q")
    first = q.put("a.b:c", {}, unique_key="k", retries=0)
    q.pop(1, worker="w")[0].fail("g", "m")
    assert q.put("a.b:c", {}, unique_key="k") != first


def test_a_cancelled_job_frees_its_key(client: Client, clock: FrozenClock) -> None:
    q = client.queue("q")
    first = q.put("a.b:c", {}, unique_key="k")
    client.cancel(first)
    assert q.put("a.b:c", {}, unique_key="k") != first


def test_message_status_answers(client: Client, clock: FrozenClock) -> None:
    q = client.queue("q")
    assert client.message_status("nope") is None
    waiting = q.put("a.b:c", {})
    assert client.message_status(waiting) == "queued"
    delayed = q.put("a.b:c", {}, delay=5)
    assert client.message_status(delayed) == "queued-with-backoff"
    [job] = q.pop(1, worker="w")
    job.retry("g", "m", delay=5)
    assert client.message_status(job.jid) == "queued-with-backoff"
    clock.advance(10)
    for popped in q.pop(5, worker="w"):
        popped.complete()
    assert client.message_status(delayed) == "done-awaiting-gc"
