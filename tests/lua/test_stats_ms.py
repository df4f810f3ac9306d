"""Millisecond resolution below a second in the wait and run time histograms
(lua/lib/stats.lua), and the percentiles read from them (runtime/queue/stats.py)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from runtime import Client
from runtime.queue import stats
from tests.support.clock import FrozenClock


def run_times(client: Client, clock: FrozenClock, seconds: list[float]) -> stats.QueueStats:
    client.admin.config_set("heartbeat", 86400)
    q = client.queue("q")
    for i, run_s in enumerate(seconds):
        q.put("a.b:c", {}, jid=f"j{i}")
        [job] = q.pop(1, worker="w")
        clock.advance(run_s)
        job.complete()
    return client.admin.stats("q", datetime.fromtimestamp(clock.now_us / 1e6, UTC).date())


def test_times_below_a_second_land_in_millisecond_buckets(
    client: Client, clock: FrozenClock
) -> None:
    found = run_times(
        client,
        clock,
        [0, 0.001, 0.007, 0.0099, 0.01, 0.057, 0.099, 0.1, 0.25, 0.999, 1.0, 59.5, 61],
    )
    assert found.run.histogram == (
        (0.0, 1),
        (0.001, 1),
        (0.007, 1),
        (0.009, 1),
        (0.01, 1),
        (0.05, 1),
        (0.09, 1),
        (0.1, 1),
        (0.2, 1),
        (0.9, 1),
        (1.0, 1),
        (59.0, 1),
        (60.0, 1),
    )
    key = client.keys.key("stats", queue="q", day=stats.day_number(found.day))
    fields = [f.decode() if isinstance(f, bytes) else f for f in client.redis.hkeys(key)]
    assert {f for f in fields if f.startswith("run:hist:")} == {
        "run:hist:ms0",
        "run:hist:ms1",
        "run:hist:ms7",
        "run:hist:ms9",
        "run:hist:ms10",
        "run:hist:ms50",
        "run:hist:ms90",
        "run:hist:ms100",
        "run:hist:ms200",
        "run:hist:ms900",
        "run:hist:s1",
        "run:hist:s59",
        "run:hist:m1",
    }


def test_percentiles_come_from_the_histogram(client: Client, clock: FrozenClock) -> None:
    found = run_times(client, clock, [0.012] * 90 + [0.150] * 8 + [2.5] * 2)
    assert found.run.count == 100
    assert found.run.p50 == pytest.approx(0.01 + 0.01 * 50 / 90)
    assert found.run.p95 == pytest.approx(0.1 + 0.1 * 5 / 8)
    assert found.run.p99 == pytest.approx(2 + 1 * 1 / 2)
    assert found.run.percentile(0.0) == pytest.approx(0.01)
    assert found.wait.p50 is not None and found.wait.p50 < 0.001


def test_a_day_without_jobs_has_no_percentiles(client: Client, clock: FrozenClock) -> None:
    found = client.admin.stats("never")
    assert (found.run.count, found.run.p50, found.run.p95, found.run.p99) == (0, None, None, None)


@pytest.mark.parametrize(
    ("histogram", "fraction", "expected"),
    [
        (((0.005, 4),), 0.5, 0.0055),
        (((0.0, 1), (0.3, 1)), 1.0, 0.4),
        (((120.0, 2),), 0.5, 150.0),
        (((365 * 86400.0, 3),), 0.99, 365 * 86400.0),
        (((0.0, 0), (1.0, 2)), 0.5, 1.5),
    ],
)
def test_percentile_is_linear_within_its_bucket(
    histogram: tuple[tuple[float, int], ...], fraction: float, expected: float
) -> None:
    assert stats.percentile(histogram, fraction) == pytest.approx(expected)


def test_days_written_before_millisecond_buckets_still_read(
    client: Client, clock: FrozenClock
) -> None:
    key = client.keys.key("stats", queue="old", day=stats.day_number(stats.today()))
    client.redis.hset(key, mapping={"run:n": 3, "run:mean": 2, "run:hist:s0": 2, "run:hist:s5": 1})
    found = client.admin.stats("old")
    assert found.run.histogram == ((0.0, 2), (5.0, 1))
    assert found.run.p99 is not None and 5 <= found.run.p99 < 6
