"""The master's side of Redis: a MasterClient for each shard (namespace) it
serves, and the work that carries out the book's Redis actions (exchange,
renew, the blocking read for work, register, extend a recurrence, trim), each
run as a task the loop owns (master.py) and ending in an event it posts. Also
the watches the loop keeps going while a shard's Redis answers (queue sizes,
cancels), and the command timeouts fitted to the shortest lease.

The loop lends it `Hooks`: `post` (an event, the loop woken), `events` and
`run_pass` (an answer a waiting job needs at once: put on the queue and a pass
run now, no loop turn between), `wake`, `own` (start an owned task) and the
owned tasks by name.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from runtime import config
from runtime.errors import Condition, CorruptReply, Error, RedisCondition, RedisTransient
from runtime.master import events, full
from runtime.master.held import AHEAD_S
from runtime.master.link import Link
from runtime.master.sizes import SizeWatch
from runtime.queue import ops
from runtime.queue.aio import MasterClient
from runtime.queue.keys import Keys
from runtime.queue.leases import Leased
from runtime.queue.shards import Shards

log = logging.getLogger(__name__)

IDLE_WAIT_S = 10.0  # an idle master pops at least this often (its idle registration too)
CANCELS_PAUSE_S = 1.0  # after listening for cancels failed, the wait to listen again


def condition_of(err: BaseException) -> Condition:
    """The one word a failure of Redis is logged under (see RedisTransient)."""
    if isinstance(err, RedisTransient):
        return err.condition
    if isinstance(err, TimeoutError):
        return RedisCondition.TIMEOUT
    return RedisCondition.CONNECTION if isinstance(err, OSError | EOFError) else "error"


class Own(Protocol):
    """How the loop starts a task it owns (Master._own)."""

    def __call__(
        self,
        name: str,
        work: Awaitable[None],
        on_error: Callable[[BaseException], events.Event | None] | None = None,
        *,
        reports: bool = False,
    ) -> None: ...


@dataclass(frozen=True)
class Hooks:
    """What the loop lends: its owned tasks and its queue of events, and how to
    post an event, wake it, run a pass now and start an owned task."""

    tasks: dict[str, asyncio.Task[None]]
    queue: deque[events.Event]
    post: Callable[[events.Event], None]
    wake: Callable[[], None]
    run_pass: Callable[[], None]
    own: Own


class Remote:
    def __init__(
        self,
        settings: config.Settings,
        worker: config.WorkerSettings,
        url: str,
        worker_id: str,
        shards: list[tuple[str, tuple[str, ...]]],
        links: list[Link],
        loop: Hooks,
    ) -> None:
        """`shards`: (namespace, its queues) for each namespace served; `links`: the
        book's view of each one's Redis (whether it answers)."""
        self.worker, self.worker_id = worker, worker_id
        self.shards, self.links = shards, links
        rule = Shards.of(settings)  # a namespace may live on a server of its own
        self.clients = [
            MasterClient(rule.url_of(ns) or url, Keys(ns), worker_id) for ns, _ in self.shards
        ]
        self.tasks, self.events, self.post = loop.tasks, loop.queue, loop.post
        self.wake, self.run_pass, self.own = loop.wake, loop.run_pass, loop.own
        self.running = False  # the loop runs: an answer a job waits for runs a pass at once
        self.started_ms = round(time.time() * 1000)  # for `runtime workers`, not for schedules
        self.wait_s = IDLE_WAIT_S  # how long one blocking read for work may last
        self.fitted_lease_s: float | None = None  # the lease _fit_timeout last fitted
        self.cancels_failed_at = [-CANCELS_PAUSE_S] * len(self.shards)  # by shard
        self.watch_names = {  # the watching tasks' names, by shard
            what: [(shard, self.named(what, shard)) for shard in range(len(self.shards))]
            for what in ("sizes", "cancels")
        }

    async def connect(self) -> None:
        """Reaches every namespace's Redis and fits the timeouts to the settings."""
        for client in self.clients:
            await client.connect()
        await self.fit_timeout_to_settings()

    async def say_goodbye(self) -> None:
        """Tells each namespace's Redis we are gone (a bounded wait), then closes."""
        for client, (namespace, queues) in zip(self.clients, self.shards, strict=True):
            where = "" if len(self.shards) == 1 else f" namespace={namespace}"
            try:
                held = await asyncio.wait_for(client.forget(list(queues)), 1.0)
                if held:
                    log.warning(
                        "exiting with %d jobs still leased worker=%s%s",
                        held,
                        self.worker_id,
                        where,
                    )
            except (TimeoutError, Error) as err:
                log.warning(
                    "could not say goodbye to Redis: %s worker=%s%s", err, self.worker_id, where
                )
            await client.close()

    def named(self, name: str, shard: int) -> str:
        """A task's name: of the first shard as for one namespace, else with the shard's."""
        return name if shard == 0 else f"{name}@{self.shards[shard][0]}"

    async def exchange(self, action: events.Exchange) -> None:
        done = await self.clients[action.shard].exchange(
            action.outcomes,
            action.pop,
            list(action.queues),
            self.worker.order,
            AHEAD_S,
            outage_ms=action.outage_ms,
        )
        self.post(
            events.Exchanged(
                action.outcomes,
                action.pop,
                done.states,
                done.popped,
                done.sent_at,
                time.monotonic(),
                done.unsent,
                action.shard,
            )
        )
        if done.popped is not None and done.popped.jobs:
            jobs = done.popped.jobs
            lease_s = jobs[0].lease_s if len(jobs) == 1 else min(j.lease_s for j in jobs)
            if lease_s != self.fitted_lease_s:  # the same lease fits the same timeouts
                self._fit_timeout(lease_s)

    def exchange_failed(self, action: events.Exchange) -> Callable[[BaseException], events.Event]:
        sent = time.monotonic()
        return lambda err: events.ExchangeFailed(
            action.outcomes, condition_of(err), str(err), sent, action.shard
        )

    async def renew(self, action: events.Renew) -> None:
        client = self.clients[action.shard]
        done = await client.heartbeat(action.leases, outage_ms=action.outage_ms)
        renewed = events.Renewed(action.leases, frozenset(done.lost), done.sent_at, action.shard)
        if action.confirms and self.running:
            self.events.append(renewed)
            self.run_pass()  # a handed job waited for this answer only: it starts now
        else:
            self.post(renewed)

    def renew_failed(self, action: events.Renew) -> Callable[[BaseException], events.Event]:
        sent = time.monotonic()
        return lambda err: events.RenewFailed(
            action.leases, condition_of(err), str(err), sent, action.shard
        )

    async def wait(self, shard: int) -> None:
        client = self.clients[shard]
        got = await client.wait_for_work(list(self.shards[shard][1]), self.wait_s)
        if got is None:
            self.post(events.WaitEnded(shard=shard))
            return
        key, value = got
        own = key == client.keys.worker_wake(self.worker_id)
        handed = None
        if own and value.startswith(b"{"):
            try:
                handed = ops.handed(value)
            except CorruptReply as err:
                log.error(
                    "a job handed to this master does not decode, left to its lease: %s worker=%s",
                    err,
                    self.worker_id,
                )
        at_us = None if own else ops.wake_at_us(value)
        confirmed = None
        if handed is not None:
            try:
                confirmed = await self._confirm(shard, handed)
            except BaseException:  # the book renews it as any handed job (and fails the wait)
                self.events.append(events.WaitEnded(handed, key, own, at_us, shard))
                self.wake()
                raise
        self.events.append(events.WaitEnded(handed, key, own, at_us, shard, confirmed))
        if handed is not None and self.running:
            self.run_pass()  # a job for an idle child: it goes now, not a loop turn later
        else:
            self.wake()

    async def _confirm(self, shard: int, handed: Leased) -> events.Renewed:
        """The confirming renewal of a job handed to us, made by the blocking read
        as it returns, before the book hears of the job: no pass, no task and no
        loop turn before it goes (a handed job starts on its answer, so they all
        stood between a put and its start). Only the handed job's lease: the
        others are renewed on their own plan, and one renewal of the book may be
        out meanwhile."""
        leases = {handed.jid: handed.token}
        done = await self.clients[shard].heartbeat(leases)
        return events.Renewed(leases, frozenset(done.lost), done.sent_at, shard)

    def wait_failed(self, shard: int) -> Callable[[BaseException], events.Event]:
        sent = time.monotonic()
        return lambda err: events.WaitFailed(condition_of(err), str(err), sent, shard)

    async def register(self, concurrency: int, shard: int = 0) -> None:
        try:
            await self.clients[shard].register(
                host=socket.gethostname(),
                pid=os.getpid(),
                queues=list(self.shards[shard][1]),
                concurrency=concurrency,
                started_ms=self.started_ms,
            )
        except Error as err:  # shown by `runtime workers` only: not worth more
            log.debug("could not register: %s worker=%s", err, self.worker_id)

    def extend_recurrence(self, low: dict[str, Any], shard: int = 0) -> None:
        """A cron recurrence runs low on ticks: compute more (one task per recurrence)."""
        name = self.named(f"extend:{low['id']}", shard)
        if name in self.tasks:
            return
        client = self.clients[shard]

        async def extend() -> None:
            try:
                await client.extend_recurrence(low["id"], low["cron"], low["tz"], low["after"])
            except Error as err:
                log.warning("could not extend recurrence id=%s: %s", low["id"], err)

        self.own(name, extend())

    def trim(self, shard: int) -> None:
        """Redis is full: retention trimmed (full.trim), one task a shard at a time."""
        name = self.named("trim", shard)
        if name not in self.tasks:
            self.own(name, full.trim(self.clients[shard], self.worker_id))

    def _fit_timeout(self, lease_s: float) -> None:
        """A half-open connection must be noticed within a third of a lease: commands
        time out then, and an idle master's blocking read (a connection that may die
        silently) is renewed at least that often, or every IDLE_WAIT_S."""
        self.fitted_lease_s = lease_s
        timeout_s = min(5.0, max(0.2, lease_s / 3))
        for client in self.clients:
            if timeout_s != client.command_timeout_s:
                client.set_command_timeout(timeout_s)
        self.wait_s = min(IDLE_WAIT_S, max(1.0, lease_s / 3))

    async def fit_timeout_to_settings(self) -> None:
        """The shortest lease of our queues, from the shared settings, before any pop."""
        setting = config.SHARED["heartbeat"]
        lengths = []
        for client, (_, queues) in zip(self.clients, self.shards, strict=True):
            for name in ["heartbeat", *(f"{q}-heartbeat" for q in queues)]:
                raw = await client.setting(name)
                if raw is not None:
                    lengths.append(setting.parse(raw))
        self._fit_timeout(min(lengths, default=setting.default))

    def watch_sizes(self) -> None:
        tasks, links = self.tasks, self.links
        for shard, name in self.watch_names["sizes"]:  # every pass: no call unless needed
            if name not in tasks and links[shard].up:
                queues = list(self.shards[shard][1])
                self.own(name, SizeWatch(self.clients[shard], queues, self.worker_id).run())

    def watch_cancels(self) -> None:
        """Listens for cancels of jobs we hold (while Redis answers; started again)."""
        tasks, links = self.tasks, self.links
        for shard, name in self.watch_names["cancels"]:
            if name not in tasks and links[shard].up and not self.cancels_failing(shard):
                self.own(name, self._cancels(shard), self._cancels_failed(shard))

    async def _cancels(self, shard: int) -> None:
        try:
            async for jid in self.clients[shard].cancellations():
                self.post(events.Cancelled(jid))
        finally:  # ended: listened again after a pause
            self.cancels_failed_at[shard] = time.monotonic()

    def _cancels_failed(self, shard: int) -> Callable[[BaseException], None]:
        def failed(err: BaseException) -> None:
            self.cancels_failed_at[shard] = time.monotonic()  # listened again after a pause
            log.debug("listening for cancels failed: %s worker=%s", err, self.worker_id)

        return failed

    def cancels_failing(self, shard: int = 0) -> bool:
        return time.monotonic() - self.cancels_failed_at[shard] < CANCELS_PAUSE_S
