"""Queue size warnings. A master compares the sizes of the queues it serves with
their `size-warning` and logs, at most once per `size-warning-every` seconds per
queue, each queue that holds more jobs. Both are shared settings (in Redis,
`runtime config`); the interval is read again before every check."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from typing import Any

from runtime import config
from runtime.errors import Error
from runtime.queue.aio import MasterClient
from runtime.vocabulary import Count

log = logging.getLogger(__name__)

CHECK_EVERY_S = 10.0  # sizes are compared this often (or once per interval, if shorter)
INTERVAL = "size-warning-every"
COUNTED = (Count.WAITING, Count.THROTTLED, Count.SCHEDULED, Count.DEPENDS, Count.RUNNING)


class SizeWatch:
    def __init__(self, client: MasterClient, queues: list[str], worker_id: str) -> None:
        self.client = client
        self.queues = list(queues)
        self.worker_id = worker_id
        self.warned: dict[str, float] = {}  # queue -> when it was last warned about

    async def run(self) -> None:
        while True:
            every_s = await self.interval_s()
            await asyncio.sleep(min(CHECK_EVERY_S, every_s))
            try:
                counts = await self.client.counts(self.queues)
            except Error:
                continue
            self.check(counts, every_s, time.monotonic())

    async def interval_s(self) -> float:
        """The `size-warning-every` setting (its default if unset or unreadable)."""
        setting = config.SHARED[INTERVAL]
        try:
            raw = await self.client.setting(INTERVAL)
            return setting.default if raw is None else setting.parse(raw)
        except Error:
            return setting.default

    def check(self, counts: Mapping[str, Mapping[str, Any]], every_s: float, now: float) -> None:
        """Logs the queues over their size-warning not warned about for `every_s`."""
        for queue, c in counts.items():
            limit = c.get("size_warning") or 0
            size = sum(c[k] for k in COUNTED)
            if limit and size > limit and now - self.warned.get(queue, -1e18) >= every_s:
                self.warned[queue] = now
                log.warning(
                    "queue is over its size warning: %d jobs > %g queue=%s worker=%s",
                    size,
                    limit,
                    queue,
                    self.worker_id,
                )
