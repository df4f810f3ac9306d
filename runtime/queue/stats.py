"""Per queue and day statistics, as the scripts keep them (lua/lib/stats.lua):
wait and run times with their histograms and percentiles, and failure counts;
and the jobs completed and failed per minute, all queues together (`Throughput`).

A histogram bucket is named by its lower bound: ms0..ms9 (1 ms wide), ms10..ms90
(10 ms), ms100..ms900 (100 ms), s1..s59 (1 s), m1..m59 (1 min), h1..h23 (1 h),
d1..d365 (1 day; d365 holds everything longer). Days written before the
millisecond buckets have one s0 bucket (0-1 s). Percentiles are read from the
histogram: linear within the bucket that holds them.

The moments: the histogram's total is the count; `<what>:ms` and `<what>:ms2`
hold the sum of the times in ms and of their squares (only ever added to, no
field when all were 0 ms). Days written by earlier versions hold count, mean
(s) and M2 (s squared) instead: `<what>:n`, `<what>:mean`, `<what>:m2`. A day
written by both (scripts of two versions during an upgrade) has both parts, and
its histogram counts the jobs of both: the sums cover the jobs the histogram
counts beyond `<what>:n`, and the two parts are merged as two samples (Chan).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime

from runtime.queue import usage
from runtime.queue.usage import KlassUsage
from runtime.vocabulary import JobState

UNIT_S = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}
PERCENTILES = (0.5, 0.95, 0.99)
LAST_DAY_BUCKET_S = 365 * 86400


def bucket_width_s(lower_s: float) -> float:
    """How wide the bucket starting at `lower_s` is (inf for the last one)."""
    for below_s, width_s in (
        (0.01, 0.001),
        (0.1, 0.01),
        (1, 0.1),
        (60, 1),
        (3600, 60),
        (86400, 3600),
    ):
        if lower_s < below_s - 1e-9:
            return width_s
    return math.inf if lower_s >= LAST_DAY_BUCKET_S else 86400


def bucket_of(label: str) -> float | None:
    """A bucket's lower bound in seconds from its field label (ms250 -> 0.25); None
    for a label that is not a bucket."""
    unit = "ms" if label.startswith("ms") else label[:1]
    number = label[len(unit) :]
    if unit not in UNIT_S or not number.isdigit():
        return None
    return round(int(number) * UNIT_S[unit], 3)


@dataclass(frozen=True)
class Times:
    """Wait or run times of one day, in seconds."""

    count: int
    mean: float
    variance: float
    histogram: tuple[tuple[float, int], ...]  # (bucket's lower bound in s, jobs), ascending
    p50: float | None  # None: no jobs
    p95: float | None
    p99: float | None

    @property
    def stddev(self) -> float:
        return math.sqrt(self.variance)

    def percentile(self, fraction: float) -> float | None:
        """The time below which `fraction` (0..1) of the jobs fall, from the histogram."""
        return percentile(self.histogram, fraction)


def percentile(histogram: tuple[tuple[float, int], ...], fraction: float) -> float | None:
    """Linear within the bucket holding the rank; the last bucket (no upper bound)
    answers its lower bound. None for an empty histogram."""
    total = sum(n for _, n in histogram)
    if total == 0:
        return None
    rank = min(max(fraction, 0.0), 1.0) * total
    seen = 0
    for lower_s, n in histogram:
        if n and seen + n >= rank:
            width = bucket_width_s(lower_s)
            if math.isinf(width):
                return lower_s
            return lower_s + width * max(0.0, rank - seen) / n
        seen += n
    return histogram[-1][0]


@dataclass(frozen=True)
class QueueStats:
    queue: str
    day: date
    wait: Times  # popped - became eligible (put, or due time for delayed jobs)
    run: Times  # completed - popped
    failures: int  # attempts that failed (retried or not)
    failed: int  # jobs that failed for good
    retries: int  # retries scheduled
    usage: tuple[KlassUsage, ...] = ()  # by klass: what its attempts cost (queue/usage.py)
    cancelled: int = 0  # jobs cancelled before they ended that left a tombstone
    expired: int = 0  # jobs failed as runtime.Expired (not started by their deadline)


@dataclass(frozen=True)
class Throughput:
    """Jobs completed and failed for good in each of the last minutes, all queues
    together (lua/throughput.lua); the last minute is the current one, still counting."""

    now_ms: int  # Redis time of the read
    from_ms: int  # when the oldest minute began
    completed: tuple[int, ...]  # one per minute, oldest first
    failed: tuple[int, ...]

    def minutes(self) -> list[tuple[int, int, int]]:
        """(start ms, completed, failed) of each minute, oldest first."""
        return [
            (self.from_ms + 60_000 * i, done, failed)
            for i, (done, failed) in enumerate(zip(self.completed, self.failed, strict=True))
        ]


def throughput(reply: Mapping[str, object]) -> Throughput:
    completed, failed = reply["completed"], reply["failed"]
    if not isinstance(completed, list) or not isinstance(failed, list):
        raise TypeError("completed and failed must be lists")
    if len(completed) != len(failed):
        raise ValueError("completed and failed must be as long")
    return Throughput(
        now_ms=int(str(reply["now_ms"])),
        from_ms=int(str(reply["from_ms"])),
        completed=tuple(int(n) for n in completed),
        failed=tuple(int(n) for n in failed),
    )


def day_number(day: date) -> int:
    return (day - date(1970, 1, 1)).days


def today() -> date:
    return datetime.now(UTC).date()


def histogram_of(what: str, fields: Mapping[str, str]) -> tuple[tuple[float, int], ...]:
    """The buckets of `what` (wait, run) among a stats hash's fields, ascending."""
    buckets: dict[float, int] = {}
    prefix = f"{what}:hist:"
    for name, value in fields.items():
        if name.startswith(prefix):
            lower_s = bucket_of(name[len(prefix) :])
            if lower_s is not None:
                buckets[lower_s] = buckets.get(lower_s, 0) + int(value)
    return tuple(sorted(buckets.items()))


def moments(what: str, fields: Mapping[str, object], count: int) -> tuple[int, float, float]:
    """(count, mean s, M2 in s squared) of `what` in a stats hash whose histogram
    holds `count` jobs: the old part (n, mean, m2) merged with the sums, which
    hold the jobs beyond it. A day of one part alone reads exactly that part."""
    n_old = int(float(str(fields.get(f"{what}:n", 0))))
    mean_old = float(str(fields.get(f"{what}:mean", 0)))
    m2_old = float(str(fields.get(f"{what}:m2", 0)))
    n_new = count - n_old
    if n_new <= 0:
        return n_old, mean_old, m2_old
    sum_ms = float(str(fields.get(f"{what}:ms", 0)))
    squares_ms = float(str(fields.get(f"{what}:ms2", 0)))
    mean_new = sum_ms / n_new / 1000
    m2_new = max(0.0, squares_ms - sum_ms * sum_ms / n_new) / 1e6  # rounding: never below 0
    if n_old <= 0:
        return n_new, mean_new, m2_new
    delta = mean_new - mean_old
    return (
        count,
        mean_old + delta * n_new / count,
        m2_old + m2_new + delta * delta * n_old * n_new / count,
    )


def _times(what: str, fields: Mapping[str, str]) -> Times:
    histogram = histogram_of(what, fields)
    count, mean, m2 = moments(what, fields, sum(n for _, n in histogram))
    p50, p95, p99 = (percentile(histogram, p) for p in PERCENTILES)
    return Times(
        count=count,
        mean=mean,
        variance=m2 / (count - 1) if count > 1 else 0.0,
        histogram=histogram,
        p50=p50,
        p95=p95,
        p99=p99,
    )


def parse(queue: str, day: date, fields: Mapping[str, str]) -> QueueStats:
    return QueueStats(
        queue=queue,
        day=day,
        wait=_times("wait", fields),
        run=_times("run", fields),
        failures=int(fields.get("failures", 0)),
        failed=int(fields.get("failed", 0)),
        retries=int(fields.get("retries", 0)),
        usage=tuple(u for _, u in sorted(usage.by_klass(fields).items()) if u.count),
        cancelled=int(fields.get(JobState.CANCELLED, 0)),
        expired=int(fields.get("expired", 0)),
    )
