"""Retries with backoff, final failures by group, unfail, message caps."""

from __future__ import annotations

import pytest

from runtime import BadArgument, Client, Lease
from tests.conftest import record
from tests.support.clock import FrozenClock


def pop_one(client: Client, queue: str = "q") -> Lease:
    [job] = client.queue(queue).pop(1, worker="w")
    return job


def test_retry_with_an_explicit_delay_schedules_the_job(client: Client, clock: FrozenClock) -> None:
    client.queue("q").put("a.b:c", {}, jid="j1", retries=2)
    job = pop_one(client)
    assert job.retry("builtins.KeyError", "Traceback...\nKeyError: 'x'", delay=30) == "scheduled"
    meta, _ = record(client, "j1")  # type: ignore[misc]
    assert (meta["s"], meta["m"], meta["d"], meta["lr"]) == (
        "scheduled",
        1,
        clock.now_ms + 30_000,
        "retry",
    )
    assert meta["f"] == {
        "g": "builtins.KeyError",
        "m": "Traceback...\nKeyError: 'x'",
        "t": clock.now_ms,
        "w": "w",
    }
    assert meta["h"][-1] == {
        "e": "retried",
        "t": clock.now_ms,
        "w": "w",
        "g": "builtins.KeyError",
        "dl": 30_000,
    }
    clock.advance(30)
    again = pop_one(client)
    assert (again.jid, again.job.attempt, again.job.remaining) == ("j1", 2, 1)


def test_a_klass_not_importable_is_retried_and_its_history_names_the_host(
    client: Client, clock: FrozenClock
) -> None:
    client.queue("q").put("app.jobs:new", {}, jid="j1", retries=1)
    said = "not importable on host web-2: klass not found: app.jobs:new: app.jobs has no 'new'"
    message = f"Traceback (most recent call last):\n  ...\nKlassNotFound: ...\n{said}\n"
    assert pop_one(client).retry("runtime.KlassNotFound", message, delay=1) == "scheduled"
    clock.advance(1)
    pop_one(client).fail("runtime.KlassNotFound", message)
    meta, _ = record(client, "j1")  # type: ignore[misc]
    assert [(e["e"], e.get("n")) for e in meta["h"][-4:]] == [
        ("popped", None),
        ("retried", said),
        ("popped", None),
        ("failed", said),
    ]
    client.queue("q").put("a.b:c", {}, jid="j2", retries=1)
    pop_one(client).retry("builtins.KeyError", f"Traceback\n{said}", delay=1)
    [*_, retried] = record(client, "j2")[0]["h"]  # type: ignore[index]
    assert "n" not in retried, "other groups' messages stay out of the history"


def test_backoff_grows_exponentially_with_jitter_between_min_and_max(
    client: Client, clock: FrozenClock
) -> None:
    client.admin.config_set("q-backoff-min", 2)
    client.admin.config_set("q-backoff-max", 20)
    client.queue("q").put("a.b:c", {}, jid="j1", retries=6)
    delays = []
    for _ in range(6):
        job = pop_one(client)
        job.retry("g", "m")
        delays.append(record(client, "j1")[0]["h"][-1]["dl"])  # type: ignore[index]
        clock.advance(60)
    bases = [2, 4, 8, 16, 20, 20]
    for delay, base in zip(delays, bases, strict=True):
        assert max(2000, base * 500) <= delay <= base * 1000, (delays, bases)
    assert delays[3] > delays[0]


def test_a_job_out_of_retries_fails_with_group_and_message(
    client: Client, clock: FrozenClock
) -> None:
    client.queue("q").put("a.b:c", {}, jid="j1", retries=1)
    pop_one(client).retry("builtins.ValueError", "first", delay=0)
    assert (
        pop_one(client).retry("builtins.ValueError", "Traceback\nValueError: 2", delay=0)
        == "failed"
    )
    job = client.get_job("j1")
    assert job is not None and job.state == "failed" and job.remaining == 0
    assert job.failure is not None
    assert (job.failure.group, job.failure.message) == (
        "builtins.ValueError",
        "Traceback\nValueError: 2",
    )
    assert [e.event for e in job.history] == ["put", "popped", "retried", "popped", "failed"]
    assert client.failed() == {"builtins.ValueError": 1}


def test_fail_skips_the_retries(client: Client, clock: FrozenClock) -> None:
    client.queue("q").put("a.b:c", {}, jid="j1", retries=5)
    assert pop_one(client).fail("runtime.KlassNotAllowed", "klass not allowed") == "failed"
    assert client.get_job("j1").remaining == 5  # type: ignore[union-attr]
    total, jobs = client.admin.failed_jobs("runtime.KlassNotAllowed")
    assert total == 1 and [j.jid for j in jobs] == ["j1"]


def test_failure_messages_are_capped_keeping_the_tail(client: Client, clock: FrozenClock) -> None:
    client.queue("q").put("a.b:c", {}, jid="j1", retries=0)
    message = "é" * 40_000 + "TAIL"  # 80,004 bytes of UTF-8
    pop_one(client).fail("g", message)
    stored = client.get_job("j1").failure.message  # type: ignore[union-attr]
    assert len(stored.encode()) <= 64 * 1024
    assert stored.endswith("TAIL") and stored.startswith("[... cut")


def test_lua_caps_messages_too_without_splitting_characters(
    client: Client, clock: FrozenClock
) -> None:
    client.queue("q").put("a.b:c", {}, jid="j1", retries=0)
    job = pop_one(client)
    client.conn.run_json("fail", "w", "j1", job.token, "g", "é" * 40_000 + "TAIL", "", "")
    stored = client.get_job("j1").failure.message  # type: ignore[union-attr]
    assert len(stored.encode()) <= 64 * 1024 and stored.endswith("TAIL")


def test_unfail_moves_oldest_first_with_retries_renewed(client: Client, clock: FrozenClock) -> None:
    q = client.queue("q")
    for i in range(3):
        q.put("a.b:c", {}, jid=f"j{i}", retries=2)
        pop_one(client).fail("boom", f"m{i}")
        clock.advance(1)
    q.put("a.b:c", {}, jid="other", retries=0)
    pop_one(client).fail("other-group", "m")
    assert client.failed() == {"boom": 3, "other-group": 1}
    assert client.unfail("boom", "again", 2) == 2
    assert client.failed() == {"boom": 1, "other-group": 1}
    moved = [pop_one(client, "again") for _ in range(2)]
    assert [(j.jid, j.job.remaining, j.job.failure) for j in moved] == [
        ("j0", 2, None),
        ("j1", 2, None),
    ]
    assert client.unfail("boom", "again", 10) == 1
    assert client.failed() == {"other-group": 1}


def test_unfail_checks_its_arguments(client: Client, clock: FrozenClock) -> None:
    with pytest.raises(BadArgument):
        client.unfail("g", "bad queue", 1)
    with pytest.raises(BadArgument):
        client.unfail("g", "q", 0)


def test_requeue_runs_a_failed_complete_or_scheduled_job_again(
    client: Client, clock: FrozenClock
) -> None:
    q = client.queue("q")
    q.put("a.b:c", {}, jid="f", retries=1)
    pop_one(client).fail("g", "m")
    assert client.failed() == {"g": 1}
    assert client.scheduling.requeue("f") == "waiting"
    assert client.failed() == {}
    again = pop_one(client)
    assert (again.jid, again.job.remaining, again.job.failure) == ("f", 1, None)
    again.complete()
    assert client.scheduling.requeue("f", "elsewhere") == "waiting"
    assert pop_one(client, "elsewhere").jid == "f"
    q.put("a.b:c", {}, jid="later", delay=3600)
    assert client.scheduling.requeue("later") == "waiting"
    assert pop_one(client).jid == "later"
