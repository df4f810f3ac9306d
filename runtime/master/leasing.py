"""The master's traffic with Redis: reports and pops in one round trip, lease
renewals in one batched call, and waiting for work without polling.

`Leasing` holds what is in flight: outcomes not yet sent, jobs leased but not
yet handed to a child. Its owner (the master) decides how many jobs it can
take; `Leasing` decides when to ask and remembers when to ask again.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis

from runtime.errors import Error, LeaseLost, NoSuchJob
from runtime.queue.aio import AsyncClient, Leased, Outcomes

log = logging.getLogger(__name__)

IDLE_WAIT_S = 10.0  # an idle master pops at least this often (its idle registration too)
FLUSH_AFTER_S = 0.002  # how long a finished job's report may wait for company
FLUSH_BATCH = 32  # reports that go at once, however young
AHEAD_S = 0.005  # pops also lease jobs whose turn comes within this: they start on time
BACKOFF_S = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0)


def safety_margin(lease_s: float) -> float:
    """How long before its lease runs out a job must be stopped if not renewed."""
    return min(2.0, lease_s * 0.2)


@dataclass
class Pending:
    """A job leased by a pop, not yet handed to a child."""

    leased: Leased
    lease_until: float  # monotonic
    start_at: float | None = None  # monotonic: leased before its turn, starts then
    renewed: bool = False  # its lease was renewed at least once


class Leasing:
    def __init__(
        self,
        client: AsyncClient,
        queues: list[str],
        order: str,
        room: Callable[[], int],
        on_change: Callable[[], None],
        on_leased: Callable[[], None] = lambda: None,
        accepting: Callable[[], bool] = lambda: True,
    ) -> None:
        self.client = client
        self.on_leased = on_leased  # jobs arrived outside an exchange: renew soon
        self.accepting = accepting  # not when paused or stopping
        self.room = room
        self.queues = list(queues)
        self.order = order
        self.on_change = on_change
        self.outcomes = Outcomes()
        self.buffer: deque[Pending] = deque()
        self.timed: list[Pending] = []  # leased before their turn, by start_at
        self.want_work = True  # the last pop was full, or something woke us since
        self.waiter: asyncio.Task[None] | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.failures = 0
        self.extending: set[str] = set()
        self.registered = False  # idle on our queues in Redis: jobs may be handed to us
        self.offset: float | None = None  # local monotonic - Redis time (s), conservative

    # --- one round trip ---------------------------------------------------------

    def next_exchange(self, room: int, accepting: bool, urgent: bool) -> float | None:
        """Seconds until the next round trip should go (0: now), None: nothing to send.
        Outcomes wait up to FLUSH_AFTER_S to travel together, unless a child needs work."""
        if accepting and self.want_work and room > 0 and urgent:
            return 0.0
        if not accepting and self.registered:  # paused or stopping: no more handoffs
            return 0.0
        if not self.outcomes:
            return None
        if len(self.outcomes) >= FLUSH_BATCH or not accepting or self.outcomes.since is None:
            return 0.0
        return max(0.0, self.outcomes.since + FLUSH_AFTER_S - time.monotonic())

    def _rotated(self) -> list[str]:
        if self.order == "round-robin" and len(self.queues) > 1:
            self.queues.append(self.queues.pop(0))
        return self.queues

    async def exchange(self, room: int, accepting: bool) -> None:
        """Sends the collected outcomes and, when accepting work, pops up to `room` jobs
        into the buffer (a pop of 0 still tells when to look again)."""
        outcomes = self.outcomes.take()
        count = room if accepting else (0 if self.registered else None)
        sent_at = time.monotonic()
        try:
            states, popped = await self.client.exchange(
                outcomes, count, self._rotated(), self.order, AHEAD_S
            )
        except (redis.exceptions.RedisError, OSError) as err:
            self.outcomes.merge(outcomes)
            await self._back_off(f"Redis exchange failed: {err}")
            return
        self.failures = 0
        worker = self.client.worker
        for jid, state in states.items():
            if isinstance(state, LeaseLost | NoSuchJob):  # not ours any more: nothing to do
                log.warning("report refused with %s, nothing changed jid=%s worker=%s",
                            type(state).__name__, jid, worker)  # fmt: skip
            elif isinstance(state, Error):
                log.error("report refused: %s jid=%s worker=%s", state, jid, worker)
        if popped is None:
            return
        if popped.now_us is not None:  # before the call, so lease ends come out early
            self.offset = sent_at - popped.now_us / 1e6
        self.registered = bool(count) and len(popped.jobs) < (count or 0)
        for low in popped.refill:
            self._extend(low)
        received = time.monotonic()
        for leased in popped.jobs:
            if leased.handed:  # handed to us while we waited: its first lease is short
                self._take_handed(leased)
            elif leased.start_in_s is None:
                self.buffer.append(Pending(leased, sent_at + leased.lease_s))
            else:  # Redis's clock read in the call: start no earlier than received + wait
                start_at = received + leased.start_in_s
                self.timed.append(Pending(leased, sent_at + leased.lease_s, start_at))
        self.timed.sort(key=lambda p: p.start_at or 0.0)
        if count is not None and len(popped.jobs) < max(count, 1):
            self.want_work = False
            self._schedule(popped.wake_in_s)

    async def _back_off(self, message: str) -> None:
        delay = BACKOFF_S[min(self.failures, len(BACKOFF_S) - 1)]
        if self.failures in (0, 5) or self.failures % 50 == 0:
            log.warning("%s; retrying every %.2f s", message, delay)
        self.failures += 1
        await asyncio.sleep(delay)

    def _extend(self, low: dict[str, Any]) -> None:
        """A cron recurrence runs low on ticks: compute more (one task per recurrence)."""
        if low["id"] in self.extending:
            return
        self.extending.add(low["id"])

        async def extend() -> None:
            try:
                await self.client.extend_recurrence(low["id"], low["cron"], low["tz"], low["after"])
            except (redis.exceptions.RedisError, OSError, Error) as err:
                log.warning("could not extend recurrence id=%s: %s", low["id"], err)
            finally:
                self.extending.discard(low["id"])

        asyncio.get_running_loop().create_task(extend())

    # --- waking up --------------------------------------------------------------

    def _schedule(self, wake_in_s: float | None) -> None:
        """Look again when the next scheduled job, throttled domain or lease is due."""
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if wake_in_s is not None:  # a little early: that pop leases what comes due soon
            wake_in_s = max(0.0, wake_in_s - AHEAD_S * 0.6)
            self.timer = asyncio.get_running_loop().call_later(wake_in_s, self.wake)

    def wake(self) -> None:
        self.want_work = True
        self.on_change()

    def wait_for_work(self, active: bool) -> None:
        """Keeps one BLPOP on the queues' wake-up lists while there is room and no work."""
        if not active:
            self.stop_waiting()
        elif self.waiter is None and not self.want_work and self.room() > 0:
            self.waiter = asyncio.get_running_loop().create_task(self._wait())

    def _take_handed(self, leased: Leased) -> None:
        """A job handed to this master: its lease runs out at expires_us on Redis's
        clock, converted with the offset of our last pop (so a job that waited in
        the socket of a frozen master is stale, and never started)."""
        if leased.expires_us is None or self.offset is None or not self.accepting():
            self.outcomes.add_release(leased.jid, leased.token)  # e.g. paused meanwhile
            self.on_change()
            return
        self.buffer.append(Pending(leased, leased.expires_us / 1e6 + self.offset))
        self.on_leased()

    async def _wait(self) -> None:
        try:
            got = await self.client.wait_for_work(self.queues, IDLE_WAIT_S)
            own = self.client.keys.worker_wake(self.client.worker)
            if got is not None and got[0] == own and got[1].startswith(b"{"):
                self._take_handed(Leased.from_reply(json.loads(got[1])))
            elif got is not None and self.room() == 0 and got[0] != own:
                await self.client.give_back(got[0])  # filled up meanwhile: leave it to others
        except (redis.exceptions.RedisError, OSError) as err:
            await self._back_off(f"waiting for work failed: {err}")
        finally:
            self.waiter = None
        self.wake()

    def stop_waiting(self) -> None:
        if self.waiter is not None:
            self.waiter.cancel()
            self.waiter = None
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    # --- leases -----------------------------------------------------------------

    async def renew(self, leases: dict[str, str]) -> tuple[float, set[str]] | None:
        """Renews every lease in one call: (when it was sent, the lost jids), None on error."""
        sent_at = time.monotonic()
        try:
            lost = await self.client.heartbeat(leases)
        except (redis.exceptions.RedisError, OSError) as err:
            log.warning("lease renewal failed: %s", err)
            return None
        return sent_at, lost

    async def close(self) -> None:
        self.stop_waiting()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(0)
