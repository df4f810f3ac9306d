"""Pop order: priority, then eligible time, then insertion order (even within
one microsecond), and scheduled jobs coming due."""

from __future__ import annotations

import pytest

from runtime import Client
from runtime.config import LIMITS
from tests.support.clock import FrozenClock


def pop_all(client: Client, queue: str, n: int = 1000) -> list[str]:
    return [j.jid for j in client.queue(queue).pop(n, worker="w")]


def test_same_instant_puts_pop_in_insertion_order(client: Client, clock: FrozenClock) -> None:
    q = client.queue("q")
    jids = [q.put("a.b:c", {}, jid=f"j{i:03d}") for i in range(200)]
    shuffled = sorted(jids, key=hash)  # jid order is not insertion order
    assert shuffled != jids
    assert pop_all(client, "q") == jids


def test_batched_put_keeps_its_order_within_one_call(client: Client, clock: FrozenClock) -> None:
    q = client.queue("q")
    names = [f"z{i}" for i in range(50)][::-1]
    client.put_many(q.spec("a.b:c", {}, jid=j) for j in names)
    assert pop_all(client, "q") == names


def test_lower_priority_first_then_insertion(client: Client, clock: FrozenClock) -> None:
    q = client.queue("q")
    q.put("a.b:c", {}, jid="p0-a")
    q.put("a.b:c", {}, jid="p5", priority=5)
    q.put("a.b:c", {}, jid="pm2", priority=-2)
    q.put("a.b:c", {}, jid="p0-b")
    q.put("a.b:c", {}, jid="pm2-b", priority=-2)
    assert pop_all(client, "q") == ["pm2", "pm2-b", "p0-a", "p0-b", "p5"]


def test_earlier_eligible_time_goes_first(client: Client, clock: FrozenClock) -> None:
    q = client.queue("q")
    q.put("a.b:c", {}, jid="due-at-10", delay=10)
    clock.advance(20)
    q.put("a.b:c", {}, jid="put-at-20")
    clock.advance(10)
    assert pop_all(client, "q") == ["due-at-10", "put-at-20"]


def test_scheduled_jobs_wait_until_due(client: Client, clock: FrozenClock) -> None:
    q = client.queue("q")
    q.put("a.b:c", {}, jid="later", delay=5)
    assert client.get_job("later").state == "scheduled"  # type: ignore[union-attr]
    assert q.counts()["scheduled"] == 1
    clock.advance(4.999)
    assert pop_all(client, "q") == []
    clock.advance(0.001)
    assert pop_all(client, "q") == ["later"]


def test_jobs_due_in_the_same_millisecond_keep_put_order(
    client: Client, clock: FrozenClock
) -> None:
    q = client.queue("q")
    at = (clock.now_us // 1000 + 5000) / 1000
    names = ["s3", "s1", "s2", "s0"]
    for name in names:
        q.put("a.b:c", {}, jid=name, at=at)
        clock.advance(0.0002)
    clock.advance(10)
    assert pop_all(client, "q") == names


def test_pop_wakes_in_ms_reports_the_next_due_time(client: Client, clock: FrozenClock) -> None:
    q = client.queue("q")
    q.put("a.b:c", {}, jid="later", delay=2.5)
    reply = client.conn.run_json("pop", "w", 1, "seed", "ordered", 0, 0, "q")
    assert reply == {"jobs": [], "now_us": clock.now_us, "wake_in_ms": 2500, "refill": []}
    reply = client.conn.run_json("pop", "w", 1, "seed", "ordered", 0, 0, "empty")
    assert reply["wake_in_ms"] == -1


def test_ordered_pop_drains_the_first_queue_first(client: Client, clock: FrozenClock) -> None:
    for queue in ("a", "b"):
        for i in range(3):
            client.queue(queue).put("a.b:c", {}, jid=f"{queue}{i}")
    reply = client.conn.run_json("pop", "w", 4, "seed", "ordered", 0, 0, "a", "b")
    assert [j["jid"] for j in reply["jobs"]] == ["a0", "a1", "a2", "b0"]


def test_round_robin_pop_alternates_queues_in_one_call(client: Client, clock: FrozenClock) -> None:
    for queue, n in (("a", 3), ("b", 1), ("c", 2)):
        for i in range(n):
            client.queue(queue).put("a.b:c", {}, jid=f"{queue}{i}")
    reply = client.conn.run_json("pop", "w", 10, "seed", "round-robin", 0, 0, "a", "b", "c")
    assert [j["jid"] for j in reply["jobs"]] == ["a0", "b0", "c0", "a1", "c1", "a2"]


def test_paused_queue_is_skipped_until_resumed(client: Client, clock: FrozenClock) -> None:
    q = client.queue("q")
    q.put("a.b:c", {}, jid="j1")
    q.pause()
    assert q.counts()["paused"] is True
    assert pop_all(client, "q") == []
    q.resume()
    assert pop_all(client, "q") == ["j1"]


def test_priority_change_moves_a_waiting_job_keeping_its_age(
    client: Client, clock: FrozenClock
) -> None:
    q = client.queue("q")
    for name in ("a", "b", "c", "d"):
        q.put("a.b:c", {}, jid=name, priority=1)
    q.put("a.b:c", {}, jid="e")
    assert client.scheduling.set_priority("c", 0) == "waiting"
    assert client.scheduling.set_priority("a", 0) == "waiting"
    assert [j.jid for j in q.peek(10)] == ["a", "c", "e", "b", "d"]
    assert pop_all(client, "q") == ["a", "c", "e", "b", "d"]


def test_peek_shows_pop_order_without_taking(client: Client, clock: FrozenClock) -> None:
    q = client.queue("q")
    for i in range(5):
        q.put("a.b:c", {"i": i}, jid=f"j{i}", priority=-i % 2)
    peeked = [j.jid for j in q.peek(3)]
    assert peeked == ["j0", "j2", "j4"]
    assert q.counts()["waiting"] == 5
    assert pop_all(client, "q")[:3] == peeked


def test_jobs_of_several_domains_pop_in_put_order(client: Client, clock: FrozenClock) -> None:
    q = client.queue("q")
    names = []
    for i in range(9):
        name = f"j{i}"
        q.put("a.b:c", {}, jid=name, domain=("a.com", "b.com", None)[i % 3])
        names.append(name)
    assert [j.jid for j in q.peek(9)] == names
    assert [pop_all(client, "q", 1)[0] for _ in range(9)] == names


def test_a_throttled_domain_does_not_hold_back_other_jobs(
    client: Client, clock: FrozenClock
) -> None:
    client.set_domain_limit("slow.com", rate=1, period=10)
    q = client.queue("q")
    for name, domain in (("s1", "slow.com"), ("n1", None), ("s2", "slow.com"), ("n2", "x.org")):
        q.put("a.b:c", {}, jid=name, domain=domain)
    assert pop_all(client, "q") == ["s1", "n1", "n2"]
    assert client.get_job("s2").state == "throttled"  # type: ignore[union-attr]
    assert q.counts()["throttled"] == 1 and q.counts()["waiting"] == 0
    reply = client.conn.run_json("pop", "w", 1, "seed", "ordered", 0, 0, "q")
    assert reply == {"jobs": [], "now_us": clock.now_us, "wake_in_ms": 10_000, "refill": []}
    clock.advance(10)
    q.put("a.b:c", {}, jid="n3")
    assert pop_all(client, "q") == ["s2", "n3"], "the freed lane's older head goes first"


@pytest.mark.parametrize("fillers", [998, 1998])
def test_jobs_due_in_one_millisecond_keep_put_order_across_a_thousand_puts(
    client: Client, clock: FrozenClock, fillers: int
) -> None:
    q = client.queue("q")
    client.put_many(q.spec("a.b:c", {}, jid=f"f{i}", delay=3600) for i in range(fillers))
    at = (clock.now_ms + 5000) / 1000
    q.put("a.b:c", {}, jid="first", at=at)
    q.put("a.b:c", {}, jid="second", at=at)
    clock.advance(10)
    assert pop_all(client, "q") == ["first", "second"]


def test_more_jobs_due_in_one_millisecond_than_one_promotion_takes_keep_put_order(
    client: Client, clock: FrozenClock
) -> None:
    q = client.queue("q")
    n = LIMITS["promote_batch"] + 200
    names = [f"j{n - i:05d}" for i in range(n)]  # jid order is the reverse of put order
    at = (clock.now_ms + 5000) / 1000
    client.put_many(q.spec("a.b:c", {}, jid=name, at=at) for name in names)
    clock.advance(10)
    popped = pop_all(client, "q", LIMITS["pop_max"])
    popped += pop_all(client, "q", LIMITS["pop_max"])
    assert popped == names


def test_scheduled_jobs_due_at_different_times_pop_by_due_time_then_put_order(
    client: Client, clock: FrozenClock
) -> None:
    q = client.queue("q")
    base = clock.now_ms + 5000
    for name, due_ms in (("late-1", base + 2), ("early-1", base), ("late-2", base + 2)):
        q.put("a.b:c", {}, jid=name, at=due_ms / 1000)
    q.put("a.b:c", {}, jid="early-2", at=base / 1000)
    client.cancel("late-1")
    clock.advance(10)
    assert pop_all(client, "q") == ["early-1", "early-2", "late-2"]
    assert q.counts()["scheduled"] == 0
