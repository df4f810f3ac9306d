"""Expiring jobs (expires_in) and debounced puts under a frozen clock: a job
not started by its deadline fails as runtime.Expired without ever being
leased, wherever it waited (a paused queue, a throttled domain, its
dependencies, a delay), and its dependents fail; a debounced put replaces
the waiting job's data and moves its due time, or waits for the running one."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from runtime import Client
from tests.conftest import record
from tests.lua.test_caps import jids, pop
from tests.support.clock import FrozenClock


def job_of(client: Client, jid: str) -> Any:
    job = client.get_job(jid)
    assert job is not None
    return job


def expired(client: Client, jid: str) -> bool:
    job = job_of(client, jid)
    return bool(job.state == "failed" and job.failure and job.failure.group == "runtime.Expired")


def test_a_job_not_started_by_its_deadline_fails_as_expired_at_the_pop(
    client: Client, clock: FrozenClock
) -> None:
    q = client.queue("q")
    q.put("a.b:c", {"n": 1}, jid="late", expires_in=1)
    q.put("a.b:c", {}, jid="child", depends=["late"])
    q.put("a.b:c", {}, jid="fresh", expires_in=5)
    clock.advance(1.001)
    assert jids(pop(client, "q")) == ["fresh"]
    job = job_of(client, "late")
    assert (job.state, job.attempt, job.data, job.worker) == ("failed", 0, {"n": 1}, None)
    assert job.failure.group == "runtime.Expired"
    assert (
        job.failure.message == "not started by its deadline (expires_in): 1 ms late; it did not run"
    )
    assert [e.event for e in job.history] == ["put", "failed"]
    assert expired(client, "fresh") is False
    child = job_of(client, "child")
    assert child.state == "failed" and child.failure.group == "runtime.DependencyFailed"
    assert client.failed() == {"runtime.Expired": 1, "runtime.DependencyFailed": 1}
    assert client.queue("q").counts()["waiting"] == 0


def test_a_job_that_started_in_time_never_expires(client: Client, clock: FrozenClock) -> None:
    client.queue("q").put("a.b:c", {}, jid="j", expires_in=1, retries=2)
    [leased] = pop(client, "q")
    client.leases.retry("j", "w", leased["meta"]["l"], "G", "again", delay=0)
    clock.advance(10)
    assert jids(pop(client, "q")) == ["j"], "the deadline is for the first start"


def test_jobs_of_a_paused_queue_expire_when_it_resumes(client: Client, clock: FrozenClock) -> None:
    q = client.queue("q")
    q.pause()
    for i in range(20):
        q.put("a.b:c", {}, jid=f"p{i}", expires_in=1)
    q.put("a.b:c", {}, jid="after", depends=["p3"])
    clock.advance(2)
    q.resume()
    assert pop(client, "q") == []
    assert all(expired(client, f"p{i}") for i in range(20))
    assert job_of(client, "after").failure.group == "runtime.DependencyFailed"
    assert client.failed()["runtime.Expired"] == 20


def test_a_delayed_job_expires_counted_from_its_due_time(
    client: Client, clock: FrozenClock
) -> None:
    q = client.queue("q")
    q.put("a.b:c", {}, jid="ok", delay=2, expires_in=1)
    q.put("a.b:c", {}, jid="missed", delay=2, expires_in=1)
    clock.advance(2)
    assert jids(pop(client, "q", count=1)) == ["ok"], "due at 2 s, deadline at 3 s"
    job = job_of(client, "missed")
    assert job.expires_at_ms == clock.now_ms + 1000
    clock.advance(1.5)
    assert pop(client, "q") == []
    assert expired(client, "missed")


def test_a_scheduled_job_promoted_late_expires_at_promotion(
    client: Client, clock: FrozenClock
) -> None:
    client.queue("q").put("a.b:c", {}, jid="s", delay=1, expires_in=1)
    clock.advance(5)
    reply: dict[str, Any] = client.conn.run_json("pop", "w", 1, "seed", "ordered", 50_000, 0, "q")
    assert reply["jobs"] == [] and expired(client, "s")
    assert client.queue("q").counts()["scheduled"] == 0


def test_a_job_held_by_its_domain_past_its_deadline_expires(
    client: Client, clock: FrozenClock
) -> None:
    client.set_domain_limit("api.com", concurrency=1)
    q = client.queue("q")
    q.put("a.b:c", {}, jid="first", domain="api.com")
    q.put("a.b:c", {}, jid="held", domain="api.com", expires_in=1)
    [first] = pop(client, "q")
    assert job_of(client, "held").state == "throttled"
    clock.advance(3)
    client.leases.complete("first", "w", first["meta"]["l"])
    assert pop(client, "q") == [] and expired(client, "held")
    assert client.queue("q").counts()["throttled"] == 0


def test_a_job_waiting_on_dependencies_past_its_deadline_expires(
    client: Client, clock: FrozenClock
) -> None:
    q = client.queue("q")
    q.put("a.b:c", {}, jid="parent")
    q.put("a.b:c", {}, jid="kid", depends=["parent"], expires_in=1)
    [parent] = pop(client, "q")
    clock.advance(2)
    client.leases.complete("parent", "w", parent["meta"]["l"])
    assert pop(client, "q") == [] and expired(client, "kid")


def test_expiries_are_counted_in_the_queue_stats(client: Client, clock: FrozenClock) -> None:
    for i in range(3):
        client.queue("q").put("a.b:c", {}, jid=f"e{i}", expires_in=0.5)
    clock.advance(1)
    pop(client, "q")
    day = client.admin.stats("q", datetime.fromtimestamp(clock.now_us / 1e6, UTC).date())
    assert (day.expired, day.failed) == (3, 3)


# --- debounce -------------------------------------------------------------------


def test_debounced_puts_keep_one_job_with_the_last_data_due_after_the_last_put(
    client: Client, clock: FrozenClock
) -> None:
    q = client.queue("q")
    got = []
    for i in range(5):
        got.append(q.put("a.b:c", {"v": i}, unique_key="doc:7", debounce=1))
        clock.advance(0.2)
    assert len(set(got)) == 1
    job = job_of(client, got[0])
    last_put_ms = clock.now_ms - 200
    assert (job.state, job.data, job.due_at_ms) == ("scheduled", {"v": 4}, last_put_ms + 1000)
    assert [e.event for e in job.history] == ["put"] + ["debounced"] * 4
    clock.advance(0.7)
    assert pop(client, "q") == []
    clock.advance(0.1)
    [leased] = pop(client, "q")
    assert leased["jid"] == got[0] and leased["data"] == {"v": 4}


def test_a_debounced_put_while_the_job_runs_makes_a_new_job_that_waits_for_it(
    client: Client, clock: FrozenClock
) -> None:
    q = client.queue("q")
    first = q.put("a.b:c", {"v": 1}, unique_key="doc", debounce=1)
    clock.advance(1)
    [running] = pop(client, "q")
    second = q.put("a.b:c", {"v": 2}, unique_key="doc", debounce=1)
    assert second != first
    assert q.put("a.b:c", {"v": 3}, unique_key="doc", debounce=1) == second
    clock.advance(1)
    assert pop(client, "q") == [], "the first one still runs: the change waits for it"
    assert job_of(client, second).state == "scheduled"
    client.leases.complete(first, "w", running["meta"]["l"])
    clock.advance(1)
    [leased] = pop(client, "q")
    assert leased["jid"] == second and leased["data"] == {"v": 3}


def test_a_debounced_job_moves_its_deadline_along(client: Client, clock: FrozenClock) -> None:
    q = client.queue("q")
    jid = q.put("a.b:c", {"v": 1}, unique_key="k", debounce=1, expires_in=1)
    clock.advance(0.9)
    q.put("a.b:c", {"v": 2}, unique_key="k", debounce=1)
    assert job_of(client, jid).expires_at_ms == clock.now_ms + 2000
    clock.advance(1.5)
    [leased] = pop(client, "q")
    assert leased["jid"] == jid, "due at 1 s, its deadline at 2 s"
    assert leased["data"] == {"v": 2}


def test_a_plain_unique_put_while_running_still_returns_the_holder(
    client: Client, clock: FrozenClock
) -> None:
    q = client.queue("q")
    first = q.put("a.b:c", {}, unique_key="u")
    pop(client, "q")
    assert q.put("a.b:c", {}, unique_key="u") == first


def test_a_job_with_a_deadline_is_leased_ahead_of_its_due_time(
    client: Client, clock: FrozenClock
) -> None:
    client.queue("q").put("a.b:c", {}, jid="soon", delay=0.05, expires_in=1)
    reply: dict[str, Any] = client.conn.run_json("pop", "w", 5, "seed", "ordered", 100_000, 0, "q")
    assert [j["jid"] for j in reply["jobs"]] == ["soon"], "to start at its due time"
    assert reply["jobs"][0]["start_in_us"] == 50_000
    assert job_of(client, "soon").expires_at_ms is None, "it started in time"


def test_whole_records_of_an_expired_and_a_debounced_job(
    client: Client, clock: FrozenClock
) -> None:
    q = client.queue("q")
    t0 = clock.now_ms
    q.put("a.b:c", {"n": 1}, jid="x", expires_in=1)
    q.put("a.b:c", {"v": 1}, jid="d", unique_key="k", debounce=1)
    clock.advance(0.5)
    q.put("a.b:c", {"v": 2}, jid="d2", unique_key="k", debounce=1, expires_in=2)
    assert record(client, "d") == (
        {
            "k": "a.b:c", "q": "q", "s": "scheduled", "r": 5, "m": 5, "o": 2, "uk": "k",
            "d": t0 + 1500, "qt": t0 + 1500, "x": t0 + 3500, "xi": 2000,
            "h": [{"e": "put", "t": t0}, {"e": "debounced", "t": t0 + 500, "dl": 1000}],
        },
        '{"v":2}',
    )  # fmt: skip
    clock.advance(1)
    pop(client, "q")
    message = "not started by its deadline (expires_in): 500 ms late; it did not run"
    assert record(client, "x") == (
        {
            "k": "a.b:c", "q": "q", "s": "failed", "r": 5, "m": 5,
            "f": {"g": "runtime.Expired", "m": message, "t": t0 + 1500},
            "h": [{"e": "put", "t": t0}, {"e": "failed", "t": t0 + 1500, "g": "runtime.Expired"}],
        },
        '{"n":1}',
    )  # fmt: skip


def test_typed_jobs_and_put_many_take_expires_in_and_debounce(
    client: Client, clock: FrozenClock
) -> None:
    from tests.integration.typed_jobs import greet  # noqa: PLC0415 - a job module

    typed = greet.using(client).options(expires_in=2)
    jid = typed.put(name="a", path="/nowhere")
    [other] = typed.put_many([{"name": "b", "path": "/nowhere"}])
    [spec_jid] = client.put_many(
        [client.queue("q").spec("a.b:c", {}, expires_in=3, unique_key="u", debounce=1)]
    )
    assert job_of(client, jid).expires_at_ms == clock.now_ms + 2000
    assert job_of(client, other).expires_at_ms == clock.now_ms + 2000
    assert job_of(client, spec_jid).expires_at_ms == clock.now_ms + 4000
    assert job_of(client, spec_jid).due_at_ms == clock.now_ms + 1000
