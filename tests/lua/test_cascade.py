"""Dependencies that failed (issue 12): when a job fails for good, the jobs
waiting on it fail as runtime.DependencyFailed naming it, down the graph; when
it runs again (unfail, requeue), they return to depends. Whole records under a
frozen clock."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from runtime import Client
from tests.conftest import record
from tests.lua.test_corrupt import RECORD_KINDS, corrupt
from tests.support.clock import FrozenClock

W = "host-1"
DF = "runtime.DependencyFailed"


def graph(client: Client) -> None:
    """a <- b <- c, and d waits on a and x."""
    q = client.queue("q")
    q.put("app:a", {}, jid="a", retries=0)
    q.put("app:x", {}, jid="x", delay=3600)
    q.put("app:b", {}, jid="b", depends=["a"])
    q.put("app:c", {}, jid="c", depends=["b"])
    q.put("app:d", {}, jid="d", depends=["a", "x"])


def fail_a(client: Client, clock: FrozenClock, how: str) -> str:
    """Fails job a for good, `how`; returns its failure group."""
    if how == "corrupt":
        corrupt(client, "a", RECORD_KINDS["pickle"])
        client.queue("q").pop(1, worker=W)  # meets it: failed as runtime.CorruptJob
        return "runtime.CorruptJob"
    [job] = client.queue("q").pop(1, worker=W)
    assert job.jid == "a"
    if how == "fail":
        job.fail("app.Boom", "tb")
    elif how == "retry":
        job.retry("app.Boom", "tb", delay=0)  # none left: failed
    else:
        clock.advance(61)
        client.queue("q").pop(1, worker="host-2")  # reclaims it: none left
        return "runtime.LeaseExpired"
    return "app.Boom"


def states(client: Client, *jids: str) -> list[str | None]:
    return [None if j is None else j.state for j in client.get_jobs(list(jids))]


@pytest.mark.parametrize("how", ["fail", "retry", "lease-expired", "corrupt"])
def test_a_job_failed_for_good_fails_the_jobs_waiting_on_it_down_the_graph(
    client: Client, clock: FrozenClock, how: str
) -> None:
    graph(client)
    put_ms = clock.now_ms
    clock.advance(5)
    group = fail_a(client, clock, how)
    now_ms = clock.now_ms
    assert states(client, "a", "b", "c", "d", "x") == ["failed"] * 4 + ["scheduled"]
    b_meta, _ = record(client, "b")  # type: ignore[misc]
    assert b_meta == {
        "k": "app:b",
        "q": "q",
        "s": "failed",
        "r": 5,
        "m": 5,
        "f": {"g": DF, "m": f"job a, which it depends on, failed for good ({group})", "t": now_ms},
        "h": [{"e": "put", "t": put_ms}, {"e": "failed", "t": now_ms, "g": DF}],
    }
    c = client.get_job("c")
    assert c is not None and c.failure is not None
    assert c.failure.message == f"job b, which it depends on, failed for good ({DF})"
    assert c.depends == ("b",), "the edges stay, for the way back"
    assert client.failed() == {group: 1, DF: 3}
    assert client.queue("q").counts()["depends"] == 0


def test_jobs_that_failed_with_their_dependency_return_to_depends_when_it_is_unfailed(
    client: Client, clock: FrozenClock
) -> None:
    graph(client)
    put_ms = clock.now_ms
    fail_a(client, clock, "fail")
    fail_ms = clock.now_ms
    clock.advance(10)
    assert client.unfail("app.Boom", "q") == 1
    assert states(client, "a", "b", "c", "d") == ["waiting", "depends", "depends", "depends"]
    b_meta, _ = record(client, "b")  # type: ignore[misc]
    assert b_meta == {
        "k": "app:b",
        "q": "q",
        "s": "depends",
        "r": 5,
        "m": 5,
        "h": [
            {"e": "put", "t": put_ms},
            {"e": "failed", "t": fail_ms, "g": DF},
            {"e": "unfailed", "t": clock.now_ms, "n": "job a runs again"},
        ],
    }
    assert record(client, "c")[0]["h"][-1]["n"] == "job b runs again"  # type: ignore[index]
    assert client.failed() == {}
    assert client.queue("q").counts()["depends"] == 3
    [a] = client.queue("q").pop(1, worker=W)
    a.complete()
    assert states(client, "b", "c", "d") == ["waiting", "depends", "depends"]
    [b] = client.queue("q").pop(1, worker=W)
    b.complete()
    assert states(client, "c", "d") == ["waiting", "depends"], "d still waits on x"


def test_requeue_of_the_failed_job_brings_them_back_too(client: Client, clock: FrozenClock) -> None:
    graph(client)
    fail_a(client, clock, "lease-expired")
    assert client.scheduling.requeue("a") == "waiting"
    assert states(client, "b", "c", "d") == ["depends"] * 3
    assert client.failed() == {}


def test_a_job_waiting_on_another_failed_job_stays_failed(
    client: Client, clock: FrozenClock
) -> None:
    q = client.queue("q")
    q.put("app:a", {}, jid="a", retries=0)
    q.put("app:f", {}, jid="f", retries=0)
    q.put("app:e", {}, jid="e", depends=["a", "f"])
    for job in q.pop(2, worker=W):
        job.fail("app.Boom", "tb")
    e = client.get_job("e")
    assert e is not None and e.failure is not None
    assert e.failure.message.startswith("job a, which it depends on"), "the first to fail"
    client.scheduling.requeue("a")
    assert states(client, "e") == ["failed"], "f has still failed"
    client.scheduling.requeue("f")
    assert states(client, "e") == ["depends"]
    assert client.failed() == {}


def test_retrying_a_job_that_failed_with_its_dependency_runs_it_without_that_one(
    client: Client, clock: FrozenClock
) -> None:
    graph(client)
    fail_a(client, clock, "fail")
    assert client.scheduling.requeue("b") == "waiting"
    b = client.get_job("b")
    assert b is not None and b.depends == () and b.failure is None
    assert client.get_job("a").dependents == ("d",)  # type: ignore[union-attr]
    assert states(client, "c", "d") == ["depends", "failed"], "c came back with b"
    assert client.unfail(DF, "q", 10) == 1
    assert states(client, "d") == ["depends"]
    assert client.get_job("d").depends == ("x",), "it no longer waits on a"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "make",
    [
        lambda c: c.queue("q").put("app:n", {}, jid="n", depends=["a"]),
        lambda c: (c.queue("q").put("app:n", {}, jid="n", delay=5), c.scheduling.depend("n", "a")),
    ],
    ids=["put", "depends-on"],
)
def test_waiting_on_a_job_already_failed_fails_at_once(
    client: Client, clock: FrozenClock, make: Callable[[Client], object]
) -> None:
    client.queue("q").put("app:a", {}, jid="a", retries=0)
    [a] = client.queue("q").pop(1, worker=W)
    a.fail("app.Boom", "tb")
    make(client)
    n = client.get_job("n")
    assert n is not None and n.state == "failed" and n.failure is not None
    assert (n.failure.group, n.failure.message) == (
        DF,
        "job a, which it depends on, failed for good (app.Boom)",
    )
    assert client.queue("q").counts()["depends"] == 0
    client.scheduling.requeue("a")
    assert states(client, "n") == ["depends"]


def test_a_completion_moving_on_to_wait_on_a_failed_job_fails_it(
    client: Client, clock: FrozenClock
) -> None:
    client.queue("q").put("app:a", {}, jid="a", retries=0)
    client.queue("q").put("app:m", {}, jid="m")
    [a] = client.queue("q").pop(1, worker=W)
    a.fail("app.Boom", "tb")
    [m] = client.queue("q").pop(1, worker=W)
    assert m.complete(next="later", depends=["a"]) == "failed"
    assert client.get_job("m").failure.group == DF  # type: ignore[union-attr]


def test_a_cancelled_job_waiting_on_a_failed_one_leaves_no_trace(
    client: Client, clock: FrozenClock
) -> None:
    graph(client)
    fail_a(client, clock, "fail")
    assert client.cancel("c", "b", "d") == ["c", "b", "d"]
    assert client.get_job("a").dependents == ()  # type: ignore[union-attr]
    assert client.failed() == {"app.Boom": 1}
    assert client.scheduling.requeue("a") == "waiting"
