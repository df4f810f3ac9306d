"""The frozen clock: the one test seam of the scripts' time (lua/lib/clock.lua).

The scripts read the clock key only when the config hash says one is set
(its field test-clock), so setting the clock sets that too."""

from __future__ import annotations

import redis

from runtime.queue.keys import Keys

START_US = 1_800_000_000_000_000  # 2027-01-15T08:00:00Z


class FrozenClock:
    def __init__(self, conn: redis.Redis, keys: Keys, start_us: int = START_US) -> None:
        self.conn = conn
        self.key = keys.key("test_clock")
        self.config = keys.key("config")
        self.now_us = start_us
        self.set(start_us)

    def set(self, now_us: int) -> None:
        self.now_us = now_us
        self.conn.set(self.key, str(now_us))
        self.conn.hset(self.config, "test-clock", "1")

    def advance(self, seconds: float) -> int:
        self.set(self.now_us + round(seconds * 1_000_000))
        return self.now_ms

    @property
    def now_ms(self) -> int:
        return self.now_us // 1000
