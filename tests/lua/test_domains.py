"""Domain rate limits under a frozen clock: the default limit, bursts, GCRA
spacing, domains shared by queues and priorities, limits changed while jobs
wait, and throttled domains never holding anything else back."""

from __future__ import annotations

import itertools
from typing import Any

from runtime import Client
from runtime.config import LIMITS
from tests.support.clock import FrozenClock

S = 1_000_000  # microseconds in a second


def pop(client: Client, *queues: str, count: int = 1000) -> dict[str, Any]:
    """The pop script's whole reply (jobs, wake_in_ms, refill); the jobs it leased
    complete at once, so no lease expiry is due."""
    reply: dict[str, Any] = client.conn.run_json(
        "pop", "w", count, "seed", "ordered", 0, 0, *queues
    )
    for job in reply["jobs"]:
        client.leases.complete(job["jid"], "w", job["meta"]["l"])
    return reply


def jids(reply: dict[str, Any]) -> list[str]:
    return [j["jid"] for j in reply["jobs"]]


def counts(client: Client, queue: str) -> tuple[int, int]:
    c = client.queue(queue).counts()
    return int(c["waiting"]), int(c["throttled"])


def state(client: Client, jid: str) -> str:
    job = client.get_job(jid)
    assert job is not None
    return job.state


def namespace_keys(client: Client, pattern: str) -> list[bytes]:
    root = client.keys.root.replace("{", "[{]").replace("}", "[}]")
    return list(client.redis.scan_iter(match=f"{root}:{pattern}", count=10_000))  # see snapshot


def most_in_a_window(times_us: list[int], period_us: int) -> int:
    return max(sum(1 for u in times_us if t <= u < t + period_us) for t in times_us)


def test_the_default_limit_from_config_applies_to_domains_without_their_own(
    client: Client, clock: FrozenClock
) -> None:
    client.admin.config_set("domain-rate", 2)
    client.admin.config_set("domain-period", 10)
    q = client.queue("q")
    for i in range(4):
        q.put("a.b:c", {}, jid=f"d{i}", domain="default.com")
    for i in range(3):
        q.put("a.b:c", {}, jid=f"o{i}", domain="own.com")
    client.set_domain_limit("own.com", rate=100, period=1, burst=5)
    reply = pop(client, "q")
    assert jids(reply) == ["d0", "o0", "o1", "o2"]
    assert reply["wake_in_ms"] == 5000, "two per ten seconds: one every five"
    assert counts(client, "q") == (0, 3)
    clock.advance(5)
    assert jids(pop(client, "q")) == ["d1"]
    client.admin.config_set("domain-burst", 1)  # one extra start at once, from the next start on
    clock.advance(5)
    assert jids(pop(client, "q")) == ["d2", "d3"]
    assert namespace_keys(client, "domain-lanes:*") == [], "the domains' lane index is cleaned up"


def test_a_domain_starts_at_most_rate_plus_burst_jobs_in_any_window_of_one_period(
    client: Client, clock: FrozenClock
) -> None:
    client.set_domain_limit("burst.com", rate=4, period=1, burst=2)
    q = client.queue("q")
    for i in range(60):
        q.put("a.b:c", {}, jid=f"b{i:02d}", domain="burst.com")
    starts: list[int] = []
    for _ in range(200):  # ten seconds in steps of 50 ms
        starts += [clock.now_us] * len(jids(pop(client, "q")))
        clock.advance(0.05)
    assert starts[:3] == [starts[0]] * 3, "the burst starts at once: one plus two extra"
    assert most_in_a_window(starts, S) == 4 + 2
    assert len(starts) == 2 + 4 * 10, "after the burst, the rate"


def test_gcra_spaces_starts_one_emission_interval_apart(client: Client, clock: FrozenClock) -> None:
    client.set_domain_limit("even.com", rate=4, period=1)
    q = client.queue("q")
    for i in range(8):
        q.put("a.b:c", {}, jid=f"e{i}", domain="even.com")
    starts: list[int] = []
    while len(starts) < 8:
        reply = pop(client, "q")
        if reply["jobs"]:
            starts.append(clock.now_us)
        if len(starts) < 8:
            assert reply["wake_in_ms"] == 250, "the next start is due one interval later"
        clock.advance(0.25)
    gaps = {b - a for a, b in itertools.pairwise(starts)}
    assert gaps == {S // 4}


def test_a_domain_shared_by_two_queues_is_throttled_in_both_when_one_spends_it(
    client: Client, clock: FrozenClock
) -> None:
    client.set_domain_limit("shared.com", rate=1, period=10)
    for queue in ("a", "b"):
        for i in range(2):
            client.queue(queue).put("a.b:c", {}, jid=f"{queue}{i}", domain="shared.com")
    assert jids(pop(client, "a")) == ["a0"]
    assert counts(client, "b") == (0, 2), "b's jobs are throttled by a's start"
    assert state(client, "b0") == "throttled"
    reply = pop(client, "b")
    assert reply["jobs"] == [] and reply["wake_in_ms"] == 10_000
    clock.advance(10)
    assert jids(pop(client, "b")) == ["b0"]
    assert counts(client, "a") == (0, 1) and state(client, "a1") == "throttled"
    clock.advance(10)
    assert jids(pop(client, "b", "a")) == ["b1"]
    clock.advance(10)
    assert jids(pop(client, "b", "a")) == ["a1"]


def test_the_same_domain_at_two_priorities_shares_one_budget(
    client: Client, clock: FrozenClock
) -> None:
    client.set_domain_limit("two.com", rate=1, period=10)
    q = client.queue("q")
    q.put("a.b:c", {}, jid="late-low", domain="two.com", priority=5)
    q.put("a.b:c", {}, jid="urgent", domain="two.com", priority=-1)
    q.put("a.b:c", {}, jid="urgent-2", domain="two.com", priority=-1)
    assert jids(pop(client, "q")) == ["urgent"]
    assert counts(client, "q") == (0, 2)
    assert state(client, "late-low") == "throttled"
    clock.advance(10)
    assert jids(pop(client, "q")) == ["urgent-2"], "the lower priority first, once per period"
    clock.advance(10)
    assert jids(pop(client, "q")) == ["late-low"]
    assert counts(client, "q") == (0, 0)


def test_a_throttled_domain_never_holds_back_other_domains_or_jobs_without_one(
    client: Client, clock: FrozenClock
) -> None:
    # 1,100 domains limited to one start a minute, shared by queues a and b:
    # once a spent their budgets, b's jobs of those domains are throttled, and
    # b's younger jobs of other domains (and the one without a domain) go at once.
    client.admin.config_set("domain-rate", 1)
    client.admin.config_set("domain-period", 60)
    spent = [f"d{i}.com" for i in range(1100)]
    client.put_many(client.queue("a").spec("a.b:c", {}, domain=d) for d in spent)
    b = client.queue("b")
    client.put_many(b.spec("a.b:c", {}, jid=f"b-{d}", domain=d) for d in spent)
    client.put_many(b.spec("a.b:c", {}, jid=f"f{i}", domain=f"f{i}.org") for i in range(100))
    b.put("a.b:c", {}, jid="nodomain")
    assert len(jids(pop(client, "a"))) + len(jids(pop(client, "a"))) == 1100
    assert counts(client, "b") == (101, 1100)
    reply = pop(client, "b", count=1)
    assert jids(reply) == ["f0"]
    reply = pop(client, "b")
    assert jids(reply) == [*(f"f{i}" for i in range(1, 100)), "nodomain"]
    assert reply["wake_in_ms"] == 60_000
    assert counts(client, "b") == (0, 1100)


def test_a_pop_sets_aside_a_few_lanes_at_most_then_asks_to_be_called_again_at_once(
    client: Client, clock: FrozenClock
) -> None:
    # With burst 1, one start each leaves every domain free; the default burst
    # then drops to 0: every lane is ready but its domain is spent, which only
    # a pop finds out (lane by lane, at most pop_skips of them per call).
    client.admin.config_set("domain-rate", 1000)
    client.admin.config_set("domain-burst", 1)
    n = LIMITS["pop_skips"] + 8
    q = client.queue("q")
    for round_ in range(2):
        client.put_many(q.spec("a.b:c", {}, jid=f"d{i}-{round_}", domain=f"d{i}") for i in range(n))
    assert len(jids(pop(client, "q", count=n))) == n
    assert counts(client, "q") == (n, 0)
    client.admin.config_set("domain-burst", 0)
    q.put("a.b:c", {}, jid="free")
    reply = pop(client, "q", count=1)
    assert {k: reply[k] for k in ("jobs", "wake_in_ms", "refill")} == {
        "jobs": [],
        "wake_in_ms": 0,
        "refill": [],
    }
    waiting, throttled = counts(client, "q")
    # a skip throttles a spent domain's lane, or corrects the stale score of the
    # lane the last pop took from (it does not re-read that lane's new head)
    assert throttled in (n - 8, n - 9) and waiting + throttled == n + 1
    assert jids(pop(client, "q", count=1)) == ["free"]
    assert counts(client, "q") == (0, n)


def test_a_spent_domain_shows_its_waiting_jobs_as_throttled(
    client: Client, clock: FrozenClock
) -> None:
    client.set_domain_limit("slow.com", rate=1, period=60)
    q = client.queue("q")
    for i in range(3):
        q.put("a.b:c", {}, jid=f"s{i}", domain="slow.com")
    assert jids(pop(client, "q", count=1)) == ["s0"]
    assert counts(client, "q") == (0, 2)
    assert state(client, "s1") == "throttled"
    assert client.message_status("s1") == "queued"


def test_clearing_a_limit_frees_the_throttled_jobs_of_every_queue_at_once(
    client: Client, clock: FrozenClock
) -> None:
    client.set_domain_limit("slow.com", rate=1, period=3600)
    for queue in ("a", "b"):
        for i in range(2):
            client.queue(queue).put("a.b:c", {}, jid=f"{queue}{i}", domain="slow.com")
    assert jids(pop(client, "a")) == ["a0"]
    assert counts(client, "a") == (0, 1) and counts(client, "b") == (0, 2)
    client.redis.delete(client.keys.wake("a"), client.keys.wake("b"))
    client.scheduling.clear_domain_limit("slow.com")
    assert client.scheduling.domain_limits() == {}
    assert counts(client, "a") == (1, 0) and counts(client, "b") == (2, 0)
    assert state(client, "b0") == "waiting"
    assert client.redis.llen(client.keys.wake("a")) == 1, "idle masters of a are woken"
    assert client.redis.llen(client.keys.wake("b")) == 1
    assert jids(pop(client, "b", "a")) == ["b0", "b1", "a1"]
    assert namespace_keys(client, "domain-*") == []


def test_a_new_limit_reschedules_throttled_jobs_by_the_starts_they_owe(
    client: Client, clock: FrozenClock
) -> None:
    client.set_domain_limit("slow.com", rate=1, period=3600)
    q = client.queue("q")
    for i in range(3):
        q.put("a.b:c", {}, jid=f"s{i}", domain="slow.com")
    assert jids(pop(client, "q")) == ["s0"]
    assert pop(client, "q")["wake_in_ms"] == 3_600_000
    clock.advance(1800)  # half of the hour is owed: half an interval of the new limit
    client.set_domain_limit("slow.com", rate=10, period=1)
    reply = pop(client, "q")
    assert reply["jobs"] == [] and reply["wake_in_ms"] == 50
    clock.advance(0.05)
    assert jids(pop(client, "q")) == ["s1"]
    client.set_domain_limit("slow.com", rate=1, period=60)  # stricter: 0.1 s owed is 60 s
    assert counts(client, "q") == (0, 1)
    assert pop(client, "q")["wake_in_ms"] == 60_000


def test_a_stricter_limit_throttles_ready_jobs_of_a_spent_domain(
    client: Client, clock: FrozenClock
) -> None:
    client.set_domain_limit("x.com", rate=10, period=1, burst=1)
    q = client.queue("q")
    for i in range(3):
        q.put("a.b:c", {}, jid=f"x{i}", domain="x.com")
    assert jids(pop(client, "q", count=1)) == ["x0"]
    assert counts(client, "q") == (2, 0), "burst 1: the domain may start one more now"
    client.set_domain_limit("x.com", rate=1, period=60)
    assert counts(client, "q") == (0, 2)
    assert pop(client, "q")["wake_in_ms"] == 60_000


def test_pops_forget_spent_budgets_as_fast_as_they_grant_new_ones(
    client: Client, clock: FrozenClock
) -> None:
    client.admin.config_set("domain-rate", 1000)
    q = client.queue("q")
    for round_ in range(2):
        client.put_many(q.spec("a.b:c", {}, domain=f"r{round_}-{i}") for i in range(300))
        assert len(jids(pop(client, "q"))) == 300
        clock.advance(1)
    assert client.redis.zcard(client.keys.key("domain_tat")) == 300, "only the last round's"


def test_domains_freed_at_once_are_released_a_bounded_batch_per_pop_until_none_is_left(
    client: Client, clock: FrozenClock
) -> None:
    client.admin.config_set("domain-rate", 1)
    client.admin.config_set("domain-period", 10)
    q = client.queue("q")
    for round_ in range(2):
        client.put_many(
            q.spec("a.b:c", {}, jid=f"d{i:03d}-{round_}", domain=f"d{i:03d}") for i in range(200)
        )
    assert len(jids(pop(client, "q"))) == 200
    assert counts(client, "q") == (0, 200)
    clock.advance(10)  # all 200 domains free at once
    batch = LIMITS["pop_skips"] + 2  # a pop of one releases pop_skips + 2 lanes
    assert jids(pop(client, "q", count=1)) == ["d000-1"]
    assert counts(client, "q") == (batch - 1, 200 - batch)
    reply = pop(client, "q", count=0)  # a master's look: freed lanes are left, so at once
    assert reply == {"jobs": [], "now_us": clock.now_us, "wake_in_ms": 0, "refill": []}
    skips = LIMITS["pop_skips"]
    assert counts(client, "q") == (batch - 1 + skips, 200 - batch - skips)
    most = LIMITS["release_batch"]  # lanes any one pop releases
    reply = pop(client, "q")
    assert len(reply["jobs"]) == batch - 1 + skips + most and reply["wake_in_ms"] == 0
    assert len(jids(pop(client, "q"))) == 200 - batch - skips - most
    assert counts(client, "q") == (0, 0)
