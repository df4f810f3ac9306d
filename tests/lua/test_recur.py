"""Recurring jobs spawned by pops under a frozen clock: every and cron, one job
per tick, the missed-tick policies, updates and removal."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from runtime import BadArgument, Client
from tests.support.clock import FrozenClock


def pop_jids(client: Client, queue: str = "q") -> list[str]:
    """Pops and completes what is there."""
    jobs = client.queue(queue).pop(100, worker="w")
    client.leases.complete_many("w", {j.jid: j.token or "" for j in jobs})
    return [j.jid for j in jobs]


def test_every_spawns_one_job_per_tick(client: Client, clock: FrozenClock) -> None:
    r = client.scheduling.recur("q", "a.b:c", {"x": 1}, every=60, id="tick")
    assert r.next_ms == clock.now_ms + 60_000
    assert pop_jids(client) == []
    clock.advance(60)
    assert pop_jids(client) == [f"tick-{clock.now_ms}"]
    assert pop_jids(client) == [], "a tick spawns once, however often pops run"
    clock.advance(59.999)
    assert pop_jids(client) == []
    clock.advance(0.001)
    [job] = client.queue("q").pop(1, worker="w")
    assert job.job.data == {"x": 1} and job.job.klass == "a.b:c"
    job.complete()
    assert client.scheduling.recurrences()[0].count == 2


def test_first_at_sets_the_first_tick(client: Client, clock: FrozenClock) -> None:
    client.scheduling.recur("q", "a.b:c", every=3600, id="r", first_at=clock.now_us / 1e6 + 5)
    clock.advance(5)
    assert len(pop_jids(client)) == 1


@pytest.mark.parametrize(("policy", "spawned"), [("all", 5), ("once", 1), ("skip", 0)])
def test_missed_ticks_follow_the_policy(
    client: Client, clock: FrozenClock, policy: str, spawned: int
) -> None:
    client.scheduling.recur("q", "a.b:c", every=10, id="r", policy=policy, grace=5)
    clock.advance(57)  # ticks at 10, 20, 30, 40, 50 are due; the newest is 7 s late
    assert len(pop_jids(client)) == spawned
    clock.advance(3)  # the tick at 60 is on time
    assert len(pop_jids(client)) == 1


def test_skip_runs_a_tick_within_its_grace(client: Client, clock: FrozenClock) -> None:
    client.scheduling.recur("q", "a.b:c", every=10, id="r", policy="skip", grace=5)
    clock.advance(14)
    assert len(pop_jids(client)) == 1


def test_cron_ticks_in_a_time_zone(client: Client, clock: FrozenClock) -> None:
    # the frozen clock starts 2027-01-15 08:00 UTC
    r = client.scheduling.recur("q", "a.b:c", cron="30 9 * * *", tz="Europe/Paris", id="daily")
    assert r.next_ms is not None
    assert datetime.fromtimestamp(r.next_ms / 1000, UTC) == datetime(2027, 1, 15, 8, 30, tzinfo=UTC)
    clock.advance(1800)
    assert pop_jids(client) == [f"daily-{clock.now_ms}"]
    clock.advance(86400)
    assert len(pop_jids(client)) == 1


def test_cron_ticks_running_low_are_asked_for_and_extended(
    client: Client, clock: FrozenClock
) -> None:
    r = client.scheduling.recur("q", "a.b:c", cron="* * * * *", id="minutely")
    clock.advance(60 * 50)
    reply = client.conn.run_json("pop", "w", 100, "seed", "ordered", 0, 0, "q")
    assert len(reply["jobs"]) == 1  # policy once
    client.leases.complete_many("w", {j["jid"]: j["meta"]["l"] for j in reply["jobs"]})
    [low] = reply["refill"]
    assert (low["id"], low["cron"], low["tz"]) == ("minutely", "* * * * *", "UTC")
    added = client.leases.extend_recurrence(low["id"], low["cron"], low["tz"], low["after"])
    assert added == 64
    assert client.leases.extend_recurrence(low["id"], low["cron"], low["tz"], low["after"]) == 0
    clock.advance(60)
    assert len(pop_jids(client)) == 1
    assert r.next_ms is not None


def test_a_cron_recurrence_out_of_ticks_keeps_asking(client: Client, clock: FrozenClock) -> None:
    client.scheduling.recur("q", "a.b:c", cron="0 0 1 1 *", id="yearly")  # ticks for five years
    clock.advance(86400 * 365 * 6)  # all of them passed and nobody extended them
    first = client.conn.run_json("pop", "w", 10, "seed", "ordered", 0, 0, "q")
    assert len(first["jobs"]) == 1 and first["refill"][0]["id"] == "yearly"
    again = client.conn.run_json("pop", "w", 10, "seed", "ordered", 0, 0, "q")
    assert again["jobs"] == [] and again["refill"][0]["id"] == "yearly"


def test_recurring_again_replaces_and_unrecur_removes(client: Client, clock: FrozenClock) -> None:
    client.scheduling.recur("q", "a.b:c", every=10, id="r")
    client.scheduling.recur("other", "a.b:d", every=20, id="r")
    [r] = client.scheduling.recurrences()
    assert (r.queue, r.klass, r.every) == ("other", "a.b:d", 20)
    clock.advance(20)
    assert pop_jids(client, "q") == [] and len(pop_jids(client, "other")) == 1
    assert client.scheduling.unrecur("r") is True
    assert client.scheduling.unrecur("r") is False
    clock.advance(20)
    assert pop_jids(client, "other") == []


def test_the_default_id_makes_recurring_idempotent(client: Client, clock: FrozenClock) -> None:
    client.scheduling.recur("q", "a.b:c", every=10)
    client.scheduling.recur("q", "a.b:c", every=10)
    assert [r.id for r in client.scheduling.recurrences()] == ["q/a.b:c"]


def test_a_pop_reports_when_the_next_tick_is_due(client: Client, clock: FrozenClock) -> None:
    client.scheduling.recur("q", "a.b:c", every=2.5, id="r")
    reply = client.conn.run_json("pop", "w", 1, "seed", "ordered", 0, 0, "q")
    assert reply["wake_in_ms"] == 2500


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"every": 10, "cron": "* * * * *"}, "one of them"),
        ({}, "one of them"),
        ({"cron": "not a cron"}, "cron"),
        ({"cron": "* * * * *", "tz": "Mars/Base"}, "time zone"),
        ({"every": 10, "policy": "sometimes"}, "policy"),
        ({"every": -1}, "every"),
    ],
)
def test_bad_recurrences_are_refused(
    client: Client, clock: FrozenClock, kwargs: dict[str, object], fragment: str
) -> None:
    with pytest.raises(BadArgument, match=fragment):
        client.scheduling.recur("q", "a.b:c", **kwargs)  # type: ignore[arg-type]
    assert client.scheduling.recurrences() == []
