"""Post-outage grace, under a frozen clock: a master back from an outage says so
(resumed) before it renews; the leases that ran out during the outage stay its
own for one lease length of their queue (renewed, completed, failed, released
by their holder; never reclaimed), those that ran out before it are reclaimed
as usual, and after the grace everything is as before."""

from __future__ import annotations

from typing import Any

import pytest

from runtime import Client, Lease, LeaseLost
from tests.conftest import record
from tests.support.clock import FrozenClock

S = 1_000_000


def resumed(client: Client, worker: str, outage_s: float) -> dict[str, Any]:
    reply: dict[str, Any] = client.conn.run_json("resumed", worker, round(outage_s * 1000))
    return reply


def master_pop(client: Client, worker: str, *queues: str) -> dict[str, Any]:
    reply: dict[str, Any] = client.conn.run_json(
        "pop", worker, 5, "seed", "ordered", 0, 1, *(queues or ("q",))
    )
    return reply


def leased(client: Client, jid: str, worker: str, queue: str = "q") -> Lease:
    client.queue(queue).put("a.b:c", {"n": 1}, jid=jid)
    [job] = client.queue(queue).pop(1, worker=worker)
    assert job.jid == jid
    return job


@pytest.fixture
def short_leases(client: Client) -> None:
    client.admin.config_set("heartbeat", 10)


def test_a_lease_that_ran_out_during_the_outage_is_renewed_and_completed_by_its_holder(
    client: Client, clock: FrozenClock, short_leases: None
) -> None:
    job = leased(client, "j1", "m1")
    pop_ms = clock.now_ms
    clock.advance(5)  # m1 loses Redis here ...
    clock.advance(25)  # ... for 25 s; its lease ran out 5 s into the outage
    window = resumed(client, "m1", 25)
    assert window == {
        "from_us": clock.now_us - 25 * S,
        "until_us": clock.now_us + 10 * S,
        "now_us": clock.now_us,
    }
    other = master_pop(client, "m2")
    assert other["jobs"] == [], "not reclaimed while grace lasts"
    assert other["wake_in_ms"] == 10_000, "m2 looks again when the grace is over"
    assert client.leases.heartbeat("m1", {"j1": job.token or ""}).renewed == ("j1",)
    clock.advance(5)
    assert client.leases.heartbeat("m1", {"j1": job.token or ""}).renewed == ("j1",)
    clock.advance(7)  # past the grace: the renewed lease holds on its own
    assert job.complete() == "complete"
    meta, _ = record(client, "j1")  # type: ignore[misc]
    assert meta["h"] == [
        {"e": "put", "t": pop_ms},
        {"e": "popped", "t": pop_ms, "w": "m1"},
        {"e": "completed", "t": clock.now_ms, "w": "m1"},
    ]
    assert client.failed() == {}


@pytest.mark.parametrize(
    ("report", "state"),
    [
        (lambda j: j.complete(), "complete"),
        (lambda j: j.fail("app.Error", "m"), "failed"),
        (lambda j: j.retry("app.Error", "m", delay=0), "waiting"),
        (lambda j: j.release(), "waiting"),
    ],
    ids=["complete", "fail", "retry", "release"],
)
def test_its_holder_may_report_without_renewing_first(
    client: Client, clock: FrozenClock, short_leases: None, report: Any, state: str
) -> None:
    job = leased(client, "j1", "m1")
    clock.advance(40)
    resumed(client, "m1", 35)
    assert report(job) == state
    assert "lease-lost" not in [e.event for e in client.get_job("j1").history]  # type: ignore[union-attr]


def test_others_still_cannot_report_on_a_lease_grace_holds(
    client: Client, clock: FrozenClock, short_leases: None
) -> None:
    leased(client, "j1", "m1")
    clock.advance(40)
    resumed(client, "m1", 35)
    with pytest.raises(LeaseLost):
        client.leases.complete("j1", "m2", "0" * 24)
    assert client.leases.heartbeat("m2", {"j1": "0" * 24}).lost == ("j1",)


def test_a_lease_that_ran_out_before_the_outage_is_reclaimed_as_usual(
    client: Client, clock: FrozenClock, short_leases: None
) -> None:
    leased(client, "dead", "m0")  # expires at +10; m0 is gone
    clock.advance(8)
    live = leased(client, "live", "m1")  # expires at +18
    clock.advance(4)  # m1's outage begins at +12 and lasts 28 s
    clock.advance(28)
    resumed(client, "m1", 28)
    reply = master_pop(client, "m2")
    assert [j["jid"] for j in reply["jobs"]] == ["dead"]
    assert reply["jobs"][0]["meta"]["h"][-2] == {"e": "lease-lost", "t": clock.now_ms, "w": "m0"}
    assert client.leases.heartbeat("m1", {"live": live.token or ""}).renewed == ("live",)


def test_the_grace_ends_one_lease_length_after_the_report(
    client: Client, clock: FrozenClock, short_leases: None
) -> None:
    job = leased(client, "j1", "m1")
    clock.advance(40)
    resumed(client, "m1", 35)
    grace = client.keys.key("grace")
    assert 0 < client.redis.pttl(grace) <= 10_000, "the key goes by itself"
    clock.advance(10)
    reply = master_pop(client, "m2")
    assert [j["jid"] for j in reply["jobs"]] == ["j1"], "reclaimed: its holder never came"
    assert client.redis.exists(grace) == 0, "a pop that finds it over removes it"
    assert client.leases.heartbeat("m1", {"j1": job.token or ""}).lost == ("j1",)
    with pytest.raises(LeaseLost):
        job.complete()


def test_each_lease_gets_the_grace_of_its_own_queues_heartbeat(
    client: Client, clock: FrozenClock, short_leases: None
) -> None:
    client.admin.config_set("slow-heartbeat", 30)
    leased(client, "fast", "m1", "q")
    leased(client, "slow", "m1", "slow")
    clock.advance(60)
    assert resumed(client, "m1", 55)["until_us"] == clock.now_us + 30 * S
    clock.advance(15)
    reply = master_pop(client, "m2", "slow")
    assert (reply["jobs"], reply["wake_in_ms"]) == ([], 15_000), "slow's grace ends in 15 s"
    assert [j["jid"] for j in master_pop(client, "m2", "q")["jobs"]] == ["fast"]
    clock.advance(15)
    assert [j["jid"] for j in master_pop(client, "m2", "slow")["jobs"]] == ["slow"]


def test_masters_reporting_the_same_outage_widen_one_window(
    client: Client, clock: FrozenClock, short_leases: None
) -> None:
    clock.advance(30)
    first = resumed(client, "m1", 20)
    clock.advance(2)
    second = resumed(client, "m2", 30)  # it lost Redis 8 s before m1 did
    assert second["from_us"] == first["from_us"] - 8 * S
    clock.advance(1)
    third = resumed(client, "m3", 5)  # began before the last report: the same outage
    assert third["from_us"] == second["from_us"]
    assert third["until_us"] == clock.now_us + 10 * S


def test_a_new_outage_while_the_last_ones_grace_lasts_keeps_both(
    client: Client, clock: FrozenClock, short_leases: None
) -> None:
    early = leased(client, "early", "m1")  # expires at +10, in the first outage
    clock.advance(20)
    resumed(client, "m1", 15)  # out +5..+20: its grace lasts until +30
    clock.advance(2)
    late = leased(client, "late", "m2")  # expires at +32
    clock.advance(5)
    window = resumed(client, "m2", 4)  # out +23..+27, after the first report
    assert window["from_us"] == clock.now_us - 4 * S, "a window of its own"
    clock.advance(2)  # +29: the first grace still holds early
    assert master_pop(client, "m3")["jobs"] == []
    clock.advance(2)  # +31: over; the second window began after early ran out
    assert [j["jid"] for j in master_pop(client, "m3")["jobs"]] == ["early"]
    clock.advance(2)  # +33: late ran out at +32, after the second outage began
    assert master_pop(client, "m3")["jobs"] == []
    assert client.leases.heartbeat("m2", {"late": late.token or ""}).renewed == ("late",)
    assert client.leases.heartbeat("m1", {"early": early.token or ""}).lost == ("early",)


def test_without_an_outage_expired_leases_are_reclaimed_as_before(
    client: Client, clock: FrozenClock, short_leases: None
) -> None:
    leased(client, "j1", "m1")
    clock.advance(10.001)
    reply = master_pop(client, "m2")
    assert [j["jid"] for j in reply["jobs"]] == ["j1"]
    assert client.redis.exists(client.keys.key("grace")) == 0
