"""Statistics per queue and day: wait and run times with their histograms, and
failure counts, under a frozen clock."""

from __future__ import annotations

import math
import statistics
from datetime import UTC, datetime
from typing import Any

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


def stats_key(client: Client, clock: FrozenClock, queue: str = "q") -> str:
    return client.keys.key("stats", queue=queue, day=clock.now_us // 86_400_000_000)


def fields_of(client: Client, key: str) -> dict[str, str]:
    return {
        (k.decode() if isinstance(k, bytes) else k): (v.decode() if isinstance(v, bytes) else v)
        for k, v in client.redis.hgetall(key).items()
    }


def welford(times: list[float]) -> dict[Any, Any]:
    """The moments fields an earlier version wrote for `times` (s), as it wrote them."""
    n, mean, m2 = 0, 0.0, 0.0
    for t in times:
        n += 1
        delta = t - mean
        mean += delta / n
        m2 += delta * (t - mean)
    return {"wait:n": str(n), "wait:mean": f"{mean:.17g}", "wait:m2": f"{m2:.17g}"}


def test_a_flush_adds_sums_and_buckets_and_writes_no_moments(
    client: Client, clock: FrozenClock
) -> None:
    q = client.queue("q")
    for i, wait in enumerate([0.25, 1.5, 0.0]):
        q.put("a.b:c", {}, jid=f"j{i}")
        clock.advance(wait)
        q.pop(1, worker="w")
    fields = fields_of(client, stats_key(client, clock))
    waits = {k: v for k, v in fields.items() if k.startswith("wait:")}
    assert waits == {
        "wait:ms": "1750",
        "wait:ms2": str(250**2 + 1500**2),
        "wait:hist:ms0": "1",
        "wait:hist:ms200": "1",
        "wait:hist:s1": "1",
    }
    s = client.admin.stats("q", day_of(clock))
    assert s.wait.count == 3 and math.isclose(s.wait.mean, statistics.mean([0.25, 1.5, 0.0]))
    assert math.isclose(s.wait.variance, statistics.variance([0.25, 1.5, 0.0]))


def test_a_wait_of_years_sums_its_square_as_a_float(client: Client, clock: FrozenClock) -> None:
    q = client.queue("q")
    waits = [400 * 86400.0, 3.0]  # 400 days: its square in ms2 is beyond 2**63
    for i, wait in enumerate(waits):
        q.put("a.b:c", {}, jid=f"j{i}")
        clock.advance(wait)
        q.pop(1, worker="w")
    s = client.admin.stats("q", day_of(clock))
    assert s.wait.count == 2 and math.isclose(s.wait.mean, statistics.mean(waits))
    assert math.isclose(s.wait.variance, statistics.variance(waits), rel_tol=1e-9)


def test_a_day_written_in_the_old_format_reads_the_same_figures(
    client: Client, clock: FrozenClock
) -> None:
    waits = [0.5, 2.0, 75.0, 4000.0]
    old = welford(waits)
    key = stats_key(client, clock)
    client.redis.hset(
        key,
        mapping={
            **old,
            "wait:hist:ms500": 1,
            "wait:hist:s2": 1,
            "wait:hist:m1": 1,
            "wait:hist:h1": 1,
        },
    )
    s = client.admin.stats("q", day_of(clock))
    assert s.wait.count == 4
    assert s.wait.mean == float(old["wait:mean"]), "exactly the stored mean"
    assert s.wait.variance == float(old["wait:m2"]) / 3, "exactly M2 / (n - 1)"
    assert s.wait.histogram == ((0.5, 1), (2, 1), (60, 1), (3600, 1))
    assert math.isclose(s.wait.variance, statistics.variance(waits))


def test_a_day_written_by_both_formats_merges_the_two(client: Client, clock: FrozenClock) -> None:
    """An upgrade mid-day: jobs of the old scripts (moments, buckets) and of the new
    ones (sums, buckets) in one hash read as one sample of all of them."""
    old_waits = [0.5, 2.0, 75.0]
    client.redis.hset(
        stats_key(client, clock),
        mapping={**welford(old_waits), "wait:hist:ms500": 1, "wait:hist:s2": 1, "wait:hist:m1": 1},
    )
    q = client.queue("q")
    new_waits = [0.25, 2.5, 0.0]
    for i, wait in enumerate(new_waits):
        q.put("a.b:c", {}, jid=f"j{i}")
        clock.advance(wait)
        q.pop(1, worker="w")
    s = client.admin.stats("q", day_of(clock))
    everything = old_waits + new_waits
    assert s.wait.count == 6
    assert math.isclose(s.wait.mean, statistics.mean(everything))
    assert math.isclose(s.wait.variance, statistics.variance(everything))
    assert s.wait.histogram == ((0, 1), (0.2, 1), (0.5, 1), (2, 2), (60, 1))


def test_a_sum_of_squares_past_64_bits_goes_on_as_a_float(
    client: Client, clock: FrozenClock
) -> None:
    near = 2**63 - 10
    client.redis.hset(stats_key(client, clock), mapping={"wait:ms2": near})
    q = client.queue("q")
    q.put("a.b:c", {}, jid="j")
    clock.advance(2.0)
    q.pop(1, worker="w")
    stored = fields_of(client, stats_key(client, clock))
    assert float(stored["wait:ms2"]) == float(near + 2000**2)
    assert stored["wait:ms"] == "2000" and stored["wait:hist:s2"] == "1"
