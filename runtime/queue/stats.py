"""Per queue and day statistics, as the scripts keep them (lua/lib/stats.lua)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime

UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


@dataclass(frozen=True)
class Times:
    """Wait or run times of one day, in seconds."""

    count: int
    mean: float
    variance: float
    histogram: tuple[tuple[int, int], ...]  # (bucket's lower bound in seconds, jobs), ascending

    @property
    def stddev(self) -> float:
        return math.sqrt(self.variance)


@dataclass(frozen=True)
class QueueStats:
    queue: str
    day: date
    wait: Times  # popped - became eligible (put, or due time for delayed jobs)
    run: Times  # completed - popped
    failures: int  # attempts that failed (retried or not)
    failed: int  # jobs that failed for good
    retries: int  # retries scheduled


def day_number(day: date) -> int:
    return (day - date(1970, 1, 1)).days


def today() -> date:
    return datetime.now(UTC).date()


def _times(what: str, fields: Mapping[str, str]) -> Times:
    count = int(fields.get(f"{what}:n", 0))
    m2 = float(fields.get(f"{what}:m2", 0))
    buckets = []
    prefix = f"{what}:hist:"
    for name, value in fields.items():
        label = name.removeprefix(prefix)
        if label != name and label[:1] in UNIT_S and label[1:].isdigit():
            buckets.append((int(label[1:]) * UNIT_S[label[0]], int(value)))
    return Times(
        count=count,
        mean=float(fields.get(f"{what}:mean", 0)),
        variance=m2 / (count - 1) if count > 1 else 0.0,
        histogram=tuple(sorted(buckets)),
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
    )
