"""Statistics per queue and day: wait and run times with their histograms, and
failure counts, under a frozen clock."""

from __future__ import annotations

import math
import statistics
from datetime import UTC, datetime

from runtime import Client
from tests.support.clock import FrozenClock


def day_of(clock: FrozenClock):  # type: ignore[no-untyped-def]
    return datetime.fromtimestamp(clock.now_us / 1e6, UTC).date()


def test_wait_and_run_times_with_mean_variance_and_histogram(
    client: Client, clock: FrozenClock
) -> None:
    client.admin.config_set("heartbeat", 86400)
    q = client.queue("q")
    waits, runs = [0.5, 2.0, 75.0, 4000.0], [1.0, 3.0, 61.0, 7300.0]
    for i, (wait, run) in enumerate(zip(waits, runs, strict=True)):
        q.put("a.b:c", {}, jid=f"j{i}")
        clock.advance(wait)
        [job] = q.pop(1, worker="w")
        clock.advance(run)
        job.complete()
    s = client.admin.stats("q", day_of(clock))
    assert s.wait.count == 4 and s.run.count == 4
    assert math.isclose(s.wait.mean, statistics.mean(waits))
    assert math.isclose(s.wait.variance, statistics.variance(waits))
    assert math.isclose(s.run.mean, statistics.mean(runs))
    assert math.isclose(s.run.variance, statistics.variance(runs))
    assert s.wait.histogram == ((0.5, 1), (2, 1), (60, 1), (3600, 1))
    assert s.run.histogram == ((1, 1), (3, 1), (60, 1), (7200, 1))


def test_batched_pops_and_completes_merge_into_the_same_moments(
    client: Client, clock: FrozenClock
) -> None:
    q = client.queue("q")
    for i in range(5):
        q.put("a.b:c", {}, jid=f"j{i}")
        clock.advance(1)
    jobs = q.pop(5, worker="w")
    client.leases.complete_many("w", {j.jid: j.token or "" for j in jobs[:3]})
    clock.advance(2)
    client.leases.complete_many("w", {j.jid: j.token or "" for j in jobs[3:]})
    s = client.admin.stats("q", day_of(clock))
    assert math.isclose(s.wait.mean, statistics.mean([5, 4, 3, 2, 1]))
    assert math.isclose(s.wait.variance, statistics.variance([5, 4, 3, 2, 1]))
    assert math.isclose(s.run.variance, statistics.variance([0, 0, 0, 2, 2]))


def test_delayed_jobs_wait_from_their_due_time(client: Client, clock: FrozenClock) -> None:
    client.queue("q").put("a.b:c", {}, jid="later", delay=100)
    clock.advance(103)
    client.queue("q").pop(1, worker="w")
    assert client.admin.stats("q", day_of(clock)).wait.mean == 3


def test_failures_failed_and_retries_are_counted(client: Client, clock: FrozenClock) -> None:
    q = client.queue("q")
    q.put("a.b:c", {}, jid="a", retries=1)
    q.pop(1, worker="w")[0].retry("g", "m", delay=0)
    q.pop(1, worker="w")[0].retry("g", "m", delay=0)
    q.put("a.b:c", {}, jid="b")
    q.pop(1, worker="w")[0].fail("g", "m")
    client.admin.config_set("q-heartbeat", 1)
    q.put("a.b:c", {}, jid="c")
    q.pop(1, worker="w")
    clock.advance(2)
    q.pop(1, worker="w")
    s = client.admin.stats("q", day_of(clock))
    assert (s.failures, s.failed, s.retries) == (4, 2, 2)


def test_a_day_long_wait_lands_in_the_day_buckets(client: Client, clock: FrozenClock) -> None:
    client.queue("q").put("a.b:c", {}, jid="slow")
    clock.advance(2 * 86400 + 5)
    client.queue("q").pop(1, worker="w")
    assert client.admin.stats("q", day_of(clock)).wait.histogram == ((2 * 86400, 1),)


def test_days_are_kept_apart(client: Client, clock: FrozenClock) -> None:
    q = client.queue("q")
    q.put("a.b:c", {}, jid="a")
    q.pop(1, worker="w")[0].complete()
    first = day_of(clock)
    clock.advance(86400)
    q.put("a.b:c", {}, jid="b")
    q.pop(1, worker="w")[0].complete()
    assert client.admin.stats("q", first).run.count == 1
    assert client.admin.stats("q", day_of(clock)).run.count == 1
    ttl = client.redis.ttl(
        client.keys.key("stats", queue="q", day=(clock.now_us // 86_400_000_000))
    )
    assert 29 * 86400 < ttl <= 30 * 86400


def test_a_job_handed_to_an_idle_master_counts_its_wait_like_a_popped_one(
    client: Client, clock: FrozenClock
) -> None:
    q = client.queue("q")
    client.conn.run_json("pop", "m1", 1, "seed", "ordered", 0, 1, "q")  # m1 waits for work
    handed = q.put("a.b:c", {}, jid="handed")  # straight to m1: waited 0 s
    q.put("a.b:c", {}, jid="popped")
    clock.advance(0.5)  # within the handed job's short first lease
    jobs = q.pop(2, worker="m1")
    assert sorted(j.jid for j in jobs) == [handed, "popped"]
    client.leases.complete_many("m1", {j.jid: j.token or "" for j in jobs})
    s = client.admin.stats("q", day_of(clock))
    assert (s.wait.count, s.run.count) == (2, 2), "every started job: one wait, one run"
    assert math.isclose(s.wait.mean, 0.25) and s.wait.histogram == ((0, 1), (0.5, 1))
