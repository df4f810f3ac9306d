"""Cancel, dependencies, completion that moves a job on, retention."""

from __future__ import annotations

import pytest

from runtime import BadArgument, Client, DependedOn, LeaseLost, WrongState
from tests.conftest import snapshot
from tests.support.clock import FrozenClock


def finish(client: Client, queue: str, n: int = 1, **kwargs) -> list[str]:  # type: ignore[no-untyped-def]
    jobs = client.queue(queue).pop(n, worker="w")
    for job in jobs:
        job.complete(**kwargs)
    return [j.jid for j in jobs]


@pytest.mark.parametrize(
    "state", ["waiting", "scheduled", "running", "failed", "complete", "depends"]
)
def test_cancel_removes_a_job_in_any_state(client: Client, clock: FrozenClock, state: str) -> None:
    q = client.queue("q")
    q.put("a.b:c", {}, jid="dep")
    q.put(
        "a.b:c",
        {},
        jid="j1",
        tags=["t"],
        tracked=True,
        delay=10 if state == "scheduled" else 0,
        depends=["dep"] if state == "depends" else [],
    )
    if state != "depends":
        client.cancel("dep")
    if state in ("running", "failed", "complete"):
        [job] = q.pop(1, worker="w")
        if state == "failed":
            job.fail("g", "m")
        elif state == "complete":
            job.complete()
    found = client.get_job("j1")
    assert found is not None and found.state == state
    cancelled = ["j1", "dep"] if state == "depends" else ["j1"]
    assert client.cancel(*cancelled) == cancelled
    ended = state in ("failed", "complete")  # the others leave a tombstone (test_tombstones.py)
    left = client.get_job("j1")
    assert left is None if ended else left is not None and left.state == "cancelled"
    client.admin.config_set("jobs-history-count", 0)
    client.admin.trim_retention()  # the tombstones go
    assert client.get_job("j1") is None
    counts = q.counts()
    assert all(v == 0 for k, v in counts.items() if k != "paused" and not k.endswith("_total")), (
        counts  # the totals (completed, failed, retried) are kept for good
    )
    assert client.failed() == {}
    keys = {k.decode() for k in snapshot(client)}
    leftovers = {
        k
        for k in keys
        if not k.endswith((":config", ":queues", ":names", ":record-forms"))
        and ":q:q" not in k
        and ":wake:" not in k
        and ":workers" not in k
        and ":stats:" not in k
        and ":throughput:" not in k
    }
    assert leftovers == set()


def test_cancel_refuses_while_others_depend_unless_cancelled_together(
    client: Client, clock: FrozenClock
) -> None:
    q = client.queue("q")
    q.put("a.b:c", {}, jid="a")
    q.put("a.b:c", {}, jid="b", depends=["a"])
    before = snapshot(client)
    with pytest.raises(DependedOn):
        client.cancel("a")
    assert snapshot(client) == before
    assert client.cancel("a", "b") == ["a", "b"]


def test_cancel_of_unknown_jobs_is_a_no_op(client: Client, clock: FrozenClock) -> None:
    assert client.cancel("nope") == []


def test_a_dependent_waits_for_every_dependency_then_becomes_waiting_once(
    client: Client, clock: FrozenClock
) -> None:
    q = client.queue("q")
    q.put("a.b:c", {}, jid="a")
    q.put("a.b:c", {}, jid="b")
    q.put("a.b:c", {}, jid="c", depends=["a", "b"])
    c = client.get_job("c")
    assert c is not None and c.state == "depends" and sorted(c.depends) == ["a", "b"]
    assert q.counts()["depends"] == 1
    assert finish(client, "q") == ["a"]
    assert client.get_job("c").state == "depends"  # type: ignore[union-attr]
    assert finish(client, "q") == ["b"]
    assert client.get_job("c").state == "waiting"  # type: ignore[union-attr]
    assert [j.jid for j in q.pop(10, worker="w")] == ["c"]


def test_depending_on_a_complete_job_does_not_wait(client: Client, clock: FrozenClock) -> None:
    q = client.queue("q")
    q.put("a.b:c", {}, jid="a")
    finish(client, "q")
    q.put("a.b:c", {}, jid="b", depends=["a"])
    assert client.get_job("b").state == "waiting"  # type: ignore[union-attr]


def test_a_dependent_with_a_delay_is_scheduled_once_free(
    client: Client, clock: FrozenClock
) -> None:
    q = client.queue("q")
    q.put("a.b:c", {}, jid="a")
    q.put("a.b:c", {}, jid="b", depends=["a"], delay=100)
    finish(client, "q")
    assert client.get_job("b").state == "scheduled"  # type: ignore[union-attr]


def test_depends_on_jobs_of_the_same_batch(client: Client, clock: FrozenClock) -> None:
    q = client.queue("q")
    client.put_many([q.spec("a.b:c", {}, jid="b", depends=["a"]), q.spec("a.b:c", {}, jid="a")])
    assert client.get_job("b").state == "depends"  # type: ignore[union-attr]
    finish(client, "q")
    assert client.get_job("b").state == "waiting"  # type: ignore[union-attr]


def test_complete_with_next_moves_the_job_on_with_retries_renewed(
    client: Client, clock: FrozenClock
) -> None:
    client.queue("first").put("a.b:c", {"k": 1}, jid="j1", retries=2)
    [job] = client.queue("first").pop(1, worker="w")
    job.retry("g", "m", delay=0)
    [job] = client.queue("first").pop(1, worker="w")
    assert job.complete(next="second") == "waiting"
    moved = client.get_job("j1")
    assert moved is not None
    assert (moved.queue, moved.remaining, moved.attempt, moved.failure) == ("second", 2, 0, None)
    assert moved.history[-1].event == "completed" and moved.history[-1].queue == "second"
    [again] = client.queue("second").pop(1, worker="w")
    assert again.job.data == {"k": 1}


def test_the_put_event_keeps_the_queue_the_job_was_put_on_through_moves(
    client: Client, clock: FrozenClock
) -> None:
    client.queue("first").put("a.b:c", {}, jid="j1")
    assert client.get_job("j1").history[0].queue == "first"  # type: ignore[union-attr]
    [job] = client.queue("first").pop(1, worker="w")
    job.complete(next="second")
    [job] = client.queue("second").pop(1, worker="w")
    job.complete(next="third")
    moved = client.get_job("j1")
    assert moved is not None and moved.queue == "third"
    assert [(e.event, e.queue) for e in moved.history if e.queue] == [
        ("put", "first"),
        ("completed", "second"),
        ("completed", "third"),
    ]


def test_complete_with_next_delay_and_depends(client: Client, clock: FrozenClock) -> None:
    q = client.queue("q")
    q.put("a.b:c", {}, jid="gate")
    q.put("a.b:c", {}, jid="j1")
    jobs = {j.jid: j for j in q.pop(2, worker="w")}
    assert jobs["j1"].complete(next="n", delay=5) == "scheduled"
    q.put("a.b:c", {}, jid="j2")
    [j2] = q.pop(1, worker="w")
    assert j2.complete(next="n", depends=["gate"]) == "depends"
    jobs["gate"].complete()
    assert client.get_job("j2").state == "waiting"  # type: ignore[union-attr]


def test_complete_rejects_delay_without_next_and_changes_nothing(
    client: Client, clock: FrozenClock
) -> None:
    client.queue("q").put("a.b:c", {}, jid="j1")
    [job] = client.queue("q").pop(1, worker="w")
    before = snapshot(client)
    with pytest.raises(BadArgument):
        job.complete(delay=3)
    with pytest.raises(BadArgument):
        job.complete(next="n", depends=["j1"])
    with pytest.raises(BadArgument):
        job.complete(next="n", depends=["unknown"])
    assert snapshot(client) == before


def test_retention_keeps_at_most_jobs_history_count(client: Client, clock: FrozenClock) -> None:
    client.admin.config_set("jobs-history-count", 2)
    q = client.queue("q")
    for i in range(4):
        q.put("a.b:c", {}, jid=f"j{i}", tags=["t"])
        finish(client, "q")
        clock.advance(1)
    assert [client.get_job(f"j{i}") is not None for i in range(4)] == [False, False, True, True]
    assert client.redis.zcard(client.keys.key("tag", tag="t")) == 2


def test_retention_removes_jobs_older_than_jobs_history(client: Client, clock: FrozenClock) -> None:
    client.admin.config_set("jobs-history", 3600)
    q = client.queue("q")
    q.put("a.b:c", {}, jid="old")
    finish(client, "q")
    clock.advance(3601)
    q.put("a.b:c", {}, jid="new")
    finish(client, "q")
    assert client.get_job("old") is None
    assert client.get_job("new") is not None


def test_depends_on_and_off_later(client: Client, clock: FrozenClock) -> None:
    q = client.queue("q")
    q.put("a.b:c", {}, jid="a")
    q.put("a.b:c", {}, jid="b")
    q.put("a.b:c", {}, jid="job", delay=30)
    assert client.scheduling.depend("job", "a", "b") == "depends"
    assert q.counts()["scheduled"] == 0 and q.counts()["depends"] == 1
    assert client.scheduling.undepend("job", "a") == "depends"
    assert client.scheduling.undepend("job", "b") == "scheduled", "its due time still lies ahead"
    clock.advance(31)
    assert "job" in [j.jid for j in q.pop(10, worker="w")]


def test_depending_on_complete_jobs_changes_nothing(client: Client, clock: FrozenClock) -> None:
    q = client.queue("q")
    q.put("a.b:c", {}, jid="a")
    finish(client, "q")
    q.put("a.b:c", {}, jid="job")
    assert client.scheduling.depend("job", "a") == "waiting"


def test_cycles_are_refused(client: Client, clock: FrozenClock) -> None:
    q = client.queue("q")
    q.put("a.b:c", {}, jid="a")
    q.put("a.b:c", {}, jid="b", depends=["a"])
    q.put("a.b:c", {}, jid="c", depends=["b"])
    before = snapshot(client)
    with pytest.raises(BadArgument, match="cycle"):
        client.scheduling.depend("a", "c")
    assert snapshot(client) == before
    [a] = q.pop(1, worker="w")
    with pytest.raises(BadArgument, match="cycle"):
        a.complete(next="again", depends=["c"])


def test_only_jobs_that_have_not_run_take_dependencies(client: Client, clock: FrozenClock) -> None:
    q = client.queue("q")
    q.put("a.b:c", {}, jid="a")
    q.put("a.b:c", {}, jid="b")
    q.pop(1, worker="w")
    with pytest.raises(WrongState):
        client.scheduling.depend("a", "b")


def test_a_dependent_moves_once_when_its_dependency_completes_after_a_redelivery(
    client: Client, clock: FrozenClock
) -> None:
    client.admin.config_set("q-heartbeat", 5)
    q = client.queue("q")
    q.put("a.b:c", {}, jid="dep")
    q.put("a.b:c", {}, jid="after", depends=["dep"])
    [first] = q.pop(1, worker="w1")
    clock.advance(6)
    [second] = q.pop(1, worker="w2")
    assert second.jid == "dep"
    second.complete()
    with pytest.raises(LeaseLost):
        first.complete()
    after = client.get_job("after")
    assert after is not None and after.state == "waiting"
    assert [e.event for e in after.history] == ["put"]
    assert [j.jid for j in q.pop(10, worker="w")] == ["after"]
