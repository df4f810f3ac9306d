"""A cancelled job's tombstone (Place.cancel, lua/cancel.lua): whole timelines
of a cancel in each state a job that has not ended may be in, under a frozen
clock, asserting the whole tombstone and that everything else of the job is
gone; how tombstones are counted, listed, kept and removed by retention, and
what the other operations make of one."""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from typing import Any

import pytest

from runtime import (
    BadArgument,
    CancelledBy,
    Client,
    JobCancelled,
    NoSuchJob,
)
from runtime.queue.job import Cancellation, HistoryEvent
from tests.conftest import record, snapshot
from tests.support.clock import FrozenClock

W = "host-1"
# keys a queue's use leaves whatever becomes of its jobs
QUEUE_KEYS = (":config", ":queues", ":q:q", ":wake:", ":workers", ":stats:", ":throughput:")


def _put_in(client: Client, clock: FrozenClock, state: str) -> int:
    """Puts j1 (tagged, tracked, with data) so that it is in `state`, its put at
    the clock's time then; moves the clock on 5 s. Returns the put time (ms)."""
    q = client.queue("q")
    put_ms = clock.now_ms
    if state == "depends":
        q.put("a.b:c", {}, jid="dep")
    q.put(
        "a.b:c",
        {"payload": "x" * 1000},
        jid="j1",
        tags=["t"],
        tracked=True,
        retries=3,
        delay=60 if state == "scheduled" else 0,
        depends=["dep"] if state == "depends" else [],
    )
    if state == "running":
        [lease] = q.pop(1, worker=W)
        client.leases.progress("j1", W, lease.token, 1, 2, "half")
    clock.advance(5)
    return put_ms


# a put's compact record names its (queue, klass) pair; the record forms are cached
COMPACT_KEYS = (":names", ":record-forms")


def _left_over(client: Client) -> set[str]:
    keys = {k.decode().removeprefix(client.keys.root) for k in snapshot(client)}
    return {k for k in keys if not any(p in k for p in QUEUE_KEYS) and k not in COMPACT_KEYS}


@pytest.mark.parametrize("state", ["waiting", "scheduled", "running", "depends"])
def test_a_cancel_frees_the_job_and_leaves_a_tombstone_of_when_and_by_what(
    client: Client, clock: FrozenClock, state: str
) -> None:
    put_ms = _put_in(client, clock, state)
    before = client.get_job("j1")
    assert before is not None and before.state == state

    assert client.cancel("j1", by=CancelledBy.CLI) == ["j1"]

    cancelled: dict[str, Any] = {"e": "cancelled", "t": clock.now_ms, "b": "cli"}
    if state == "running":
        cancelled["w"] = W
    meta: dict[str, Any] = {
        "k": "a.b:c",
        "q": "q",
        "s": "cancelled",
        "r": 3,
        "m": 3,
        "cn": {"t": clock.now_ms, "b": "cli"},
        "h": [{"e": "put", "t": put_ms}, cancelled],
    }
    if state == "running":
        meta["a"] = 1
    assert record(client, "j1") == (meta, "{}")
    # its data, history, tags, tracking, lease, progress and edges are gone
    tomb = client.keys.key("cancelled")
    index = client.keys.key("cancelled_index", queue="q")
    assert client.redis.zrange(tomb, 0, -1, withscores=True) == [(b"j1", clock.now_us)]
    assert client.redis.zrange(index, 0, -1, withscores=True) == [(b"j1", clock.now_ms)]
    expected = {":jobs", ":cancelled"}
    if state == "depends":  # the job it waited on stays, without j1 waiting on it
        assert client.redis.smembers(client.keys.key("dependents", jid="dep")) == set()
    assert _left_over(client) == expected
    job = client.get_job("j1")
    assert job is not None
    assert job.state == "cancelled" and job.data == {} and job.tags == () and not job.tracked
    assert job.cancellation == Cancellation(clock.now_ms, "cli")
    assert job.history[-1] == HistoryEvent(
        "cancelled", clock.now_ms, worker=W if state == "running" else None, by="cli"
    )
    assert job.put_at_ms == put_ms and job.progress is None and job.worker is None
    counts = client.queue("q").counts()
    assert counts["cancelled"] == 1 and counts[state] == 0
    day = datetime.fromtimestamp(clock.now_us / 1e6, UTC).date()
    assert client.admin.stats("q", day).cancelled == 1, "the day's statistics count it"


@pytest.mark.parametrize("state", ["complete", "failed"])
def test_a_job_that_ended_is_deleted_without_a_tombstone(
    client: Client, clock: FrozenClock, state: str
) -> None:
    q = client.queue("q")
    q.put("a.b:c", {}, jid="j1")
    [lease] = q.pop(1, worker=W)
    if state == "complete":
        lease.complete()
    else:
        lease.fail("g", "m")
    assert client.cancel("j1") == ["j1"]
    assert client.get_job("j1") is None
    assert q.counts()["cancelled"] == 0
    day = datetime.fromtimestamp(clock.now_us / 1e6, UTC).date()
    assert client.admin.stats("q", day).cancelled == 0


def test_tombstones_are_counted_and_listed_newest_first(client: Client, clock: FrozenClock) -> None:
    q = client.queue("q")
    for i in range(3):
        q.put("a.b:c", {}, jid=f"j{i}")
    for i in range(3):
        client.cancel(f"j{i}", by=CancelledBy.DASHBOARD)
        clock.advance(1)
    assert q.counts()["cancelled"] == 3
    total, jobs = client.admin.jobs("q", "cancelled", 0, 2)
    assert total == 3 and [j.jid for j in jobs] == ["j2", "j1"]
    assert all(j.cancellation and j.cancellation.by == "dashboard" for j in jobs)
    assert client.status()["q"]["cancelled"] == 3


def test_retention_removes_tombstones_past_their_window_and_over_their_count(
    client: Client, clock: FrozenClock
) -> None:
    q = client.queue("q")
    client.admin.config_set("jobs-history", 3600)
    client.admin.config_set("jobs-history-count", 2)
    for i in range(4):
        q.put("a.b:c", {}, jid=f"j{i}")
        client.cancel(f"j{i}")  # each cancel trims the tombstones over the count
        clock.advance(1)
    assert [j.jid for j in client.admin.jobs("q", "cancelled", 0, 10)[1]] == ["j3", "j2"]
    assert client.get_job("j0") is None and client.get_job("j1") is None
    clock.advance(3600)
    q.put("a.b:c", {}, jid="other")
    q.pop(1, worker=W)  # a pop sweeps old tombstones too
    assert client.get_job("j2") is None and client.get_job("j3") is None
    assert q.counts()["cancelled"] == 0
    assert not client.redis.exists(client.keys.key("cancelled"))
    assert _left_over(client) == {":jobs", f":w:{W}:jobs"}


def test_the_retention_operation_removes_tombstones_at_once(
    client: Client, clock: FrozenClock
) -> None:
    client.admin.config_set("jobs-history", 60)
    client.queue("q").put("a.b:c", {}, jid="j1")
    client.cancel("j1")
    clock.advance(61)
    assert client.admin.trim_retention() == 1
    assert client.get_job("j1") is None


def test_a_tombstone_is_no_job_to_change_or_cancel_again(
    client: Client, clock: FrozenClock
) -> None:
    client.queue("q").put("a.b:c", {}, jid="j1")
    client.cancel("j1", by=CancelledBy.CLI)
    before = snapshot(client)
    assert client.cancel("j1") == []
    for change in (
        lambda: client.scheduling.requeue("j1"),
        lambda: client.scheduling.set_priority("j1", 3),
        lambda: client.scheduling.tag("j1", "x"),
        lambda: client.scheduling.track("j1"),
        lambda: client.scheduling.depend("j1", "x"),
    ):
        with pytest.raises(NoSuchJob, match="it was cancelled"):
            change()
    assert snapshot(client) == before
    assert client.message_status("j1") is None


def test_a_cancelled_jid_may_be_put_anew_but_not_depended_on(
    client: Client, clock: FrozenClock
) -> None:
    q = client.queue("q")
    q.put("a.b:c", {}, jid="j1")
    client.cancel("j1")
    with pytest.raises(BadArgument, match="dependency j1 was cancelled"):
        q.put("a.b:c", {}, depends=["j1"])
    q.put("a.b:c", {"n": 2}, jid="j1")
    job = client.get_job("j1")
    assert job is not None and job.state == "waiting" and job.data == {"n": 2}
    assert job.cancellation is None and [e.event for e in job.history] == ["put"]
    assert q.counts()["cancelled"] == 0
    assert not client.redis.exists(client.keys.key("cancelled"))


def test_wait_raises_job_cancelled_a_no_such_job_for_a_tombstone(
    client: Client, clock: FrozenClock
) -> None:
    client.queue("q").put("a.b:c", {}, jid="j1")
    client.cancel("j1", by=CancelledBy.DEPENDENCY)
    with pytest.raises(JobCancelled) as caught:
        client.wait("j1", timeout=1)
    assert isinstance(caught.value, NoSuchJob)
    assert (caught.value.jid, caught.value.at_ms, caught.value.by) == (
        "j1",
        clock.now_ms,
        "dependency",
    )


def test_a_waiter_blocked_on_a_job_wakes_with_job_cancelled(
    client: Client, clock: FrozenClock
) -> None:
    client.queue("q").put("a.b:c", {}, jid="j1")
    raised: list[BaseException] = []

    def wait() -> None:
        try:
            client.wait("j1", timeout=30)
        except BaseException as err:  # noqa: BLE001 - handed to the test
            raised.append(err)

    waiter = threading.Thread(target=wait)
    waiter.start()
    deadline = threading.Event()
    for _ in range(300):  # the waiter registered (meta.wt), at most 3 s
        found = record(client, "j1")
        if found is not None and "wt" in found[0]:
            break
        deadline.wait(0.01)
    client.cancel("j1")
    waiter.join(10)
    assert not waiter.is_alive()
    assert [type(e) for e in raised] == [JobCancelled]


def test_an_unknown_by_is_refused_before_anything_is_sent(
    client: Client, clock: FrozenClock
) -> None:
    client.queue("q").put("a.b:c", {}, jid="j1")
    with pytest.raises(BadArgument, match="by must be one of"):
        client.cancel("j1", by="someone")
    assert client.get_job("j1") is not None
