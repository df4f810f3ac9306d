"""Recurring jobs, the Python side: cron ticks computed with croniter (the
scripts cannot), and the definitions read back from Redis (lua/lib/recur.lua)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter

from runtime.errors import BadArgument

TICKS_AHEAD = 64  # cron ticks computed at a time
HORIZON_MS = 5 * 365 * 86400 * 1000  # and no further ahead than this
POLICIES = ("skip", "once", "all")


def zone(tz: str) -> ZoneInfo:
    try:
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError):
        raise BadArgument(f"unknown time zone {tz!r}") from None


def check_cron(expr: str) -> str:
    if not isinstance(expr, str) or not croniter.is_valid(expr):
        raise BadArgument(f"not a cron expression: {expr!r}")
    return expr


def cron_ticks(expr: str, tz: str, after_ms: int, count: int = TICKS_AHEAD) -> list[int]:
    """The next ticks of `expr` in `tz` strictly after after_ms (epoch ms): `count`
    of them, or fewer if they reach HORIZON_MS beyond after_ms (at least one)."""
    start = datetime.fromtimestamp(after_ms / 1000, zone(tz))
    cron = croniter(check_cron(expr), start)
    ticks: list[int] = []
    while len(ticks) < count:
        tick = round(cron.get_next(datetime).timestamp() * 1000)
        if ticks and tick > after_ms + HORIZON_MS:
            break
        ticks.append(tick)
    return ticks


@dataclass(frozen=True)
class Recurrence:
    id: str
    queue: str
    klass: str
    data: dict[str, Any]
    every: float | None
    cron: str | None
    tz: str
    policy: str
    grace: float
    next_ms: int | None
    last_ms: int | None
    count: int  # jobs spawned so far

    @classmethod
    def from_definition(cls, raw: str | bytes) -> Recurrence:
        d = json.loads(raw)
        return cls(
            id=d["id"],
            queue=d["q"],
            klass=d["spec"]["klass"],
            data=json.loads(d["data"]),
            every=d.get("every"),
            cron=d.get("cron"),
            tz=d.get("tz", "UTC"),
            policy=d["policy"],
            grace=d["grace"],
            next_ms=d.get("next"),
            last_ms=d.get("last"),
            count=d.get("count", 0),
        )
