"""The asyncio client of a master: the operations it runs, batched.

One `exchange` sends everything the master has to say in one round trip: the
completions, retries, failures and releases it collected, then a pop for its
free children, pipelined. Idle masters block on their queues' wake-up lists
(BLPOP on a connection of its own) instead of polling.

Arguments and replies are runtime.queue.ops, the round trips the plan of
runtime.queue.scripts: the same code as the synchronous `Client`. Every
failure arrives as a runtime.errors class (never a redis-py exception):
`RedisTransient` (with its `condition`) for what passes, so the master backs
off and resumes. Nothing here retries: the master decides.

Here: the master's clients (a second one for blocking reads), their spare
connections, and the operations. The plans are driven by runtime.queue.aplan
(shared with the application's AsyncConnection), on connections made by
runtime.queue.alink; an exchange's calls and reply are runtime.queue.exchanges.

Every command must answer within `command_timeout_s` (a blocking read: its wait
plus that), so a half-open connection is noticed within it; the master sets it
to a third of its shortest lease.
"""

from __future__ import annotations

import contextlib
import time
from collections import deque
from collections.abc import AsyncIterator, Sequence
from typing import Any, TypeVar

import redis
import redis.asyncio

from runtime import config
from runtime.errors import BadArgument, Error, RedisUnavailable
from runtime.queue import alink, exchanges, ops, recur, scripts
from runtime.queue.alink import closed_by_peer, connect
from runtime.queue.aplan import PlanDriver
from runtime.queue.faults import classify, from_redis
from runtime.queue.keys import Keys
from runtime.queue.leases import ExchangeReply, Outcomes, RenewReply
from runtime.queue.ops import Call

T = TypeVar("T")
COMMAND_TIMEOUT_S = 5.0
SPARE_MAX = 4  # connections kept out of the pool between calls (a master runs a few at once)
WARM_S = 0.001  # a PING on the blocking connection: it never waits (_warm_blocking)
ROUND_TRIPS_KEPT = 8  # the latest calls whose round trips say the link's (round_trip_s)


class MasterClient(PlanDriver):
    """A master's connection to its deployment: two clients (the blocking reads
    have their own), the spare connections of each, and the operations."""

    def __init__(
        self, url: str, keys: Keys, worker: str, *, command_timeout_s: float = COMMAND_TIMEOUT_S
    ) -> None:
        super().__init__(url, keys, command_timeout_s)
        self.worker = worker
        self.redis: redis.asyncio.Redis = connect(self.route.url, command_timeout_s)
        self.blocking: redis.asyncio.Redis = connect(self.route.url, command_timeout_s)
        self.retired: list[redis.asyncio.Redis] = []  # clients of nodes left (cluster)
        self.spares = _spares(self.redis, self.blocking)  # kept out of their pools (_take)
        self.round_trips: deque[float] = deque(maxlen=ROUND_TRIPS_KEPT)  # s, of calls (_run)

    @property
    def command_timeout_s(self) -> float:
        """How long a command may go unanswered (set_command_timeout)."""
        return self.timeout_s

    def round_trip_s(self) -> float:
        """The link's recent round trip: the longest of the latest calls' (0: none yet).
        A waiting master states it, so a job handed to it gets a first lease that
        fits its link (lua/lib/handoff.lua)."""
        return max(self.round_trips, default=0.0)

    def set_command_timeout(self, timeout_s: float) -> None:
        """From now on, a command not answered within `timeout_s` fails (RedisTransient
        timeout) and its connection is dropped."""
        self.timeout_s = timeout_s
        for client in (self.redis, self.blocking):
            pool = client.connection_pool
            pool.connection_kwargs["socket_timeout"] = timeout_s
            pool.connection_kwargs["socket_connect_timeout"] = timeout_s
            # connections the pool made already reconnect with their own settings
            made = [
                *getattr(pool, "_available_connections", ()),
                *getattr(pool, "_in_use_connections", ()),
            ]
            for conn in made:
                conn.socket_timeout = conn.socket_connect_timeout = timeout_s

    async def close(self) -> None:
        self.spares = ()  # still their pools' in use: closed with them
        await self.redis.aclose()
        await self.blocking.aclose()
        await self._close_retired()

    async def _close_retired(self) -> None:
        if not self.retired:
            return
        retired, self.retired = self.retired, []
        for client in retired:
            with contextlib.suppress(redis.RedisError, OSError):
                await client.aclose()

    def _reroute(self) -> None:
        """From now on, calls go to the node the route names (a cluster's slot owner);
        the clients of the node left are closed once no call uses them."""
        self.retired += [self.redis, self.blocking]
        self.redis = connect(self.route.url, self.command_timeout_s)
        self.blocking = connect(self.route.url, self.command_timeout_s)
        self.spares = _spares(self.redis, self.blocking)  # the old pools': closed with them

    # --- running calls: the plans' driver (aplan) with this client's pools ----------

    async def _drive(self, plan: scripts.Plan[T], *, blocks_s: float = 0.0) -> tuple[T, float]:
        """Carries out a plan's round trips on one pooled connection (the blocking
        one when replies may wait `blocks_s`); returns its result and
        time.monotonic() taken once the connection was up, just before the first
        request was written."""
        if self.retired:
            await self._close_retired()
        pool = (self.blocking if blocks_s > 0 else self.redis).connection_pool  # as _pool
        return await self._drive_on(pool, plan, blocks_s)

    def _pool(self, blocks_s: float) -> redis.asyncio.ConnectionPool:
        return (self.blocking if blocks_s > 0 else self.redis).connection_pool

    def _spares_of(self, pool: redis.asyncio.ConnectionPool) -> list[Any] | None:
        for of, spare in self.spares:  # twice a call: no generator for next()
            if of is pool:
                return spare
        return None

    async def _give(self, pool: redis.asyncio.ConnectionPool, conn: Any, ok: bool) -> None:
        """A connection after a call: kept aside (`_take`) if the call went well (all
        its replies read) on a pool of the current clients, else back to its pool."""
        spare = self._spares_of(pool) if ok else None
        if spare is not None and len(spare) < SPARE_MAX:
            spare.append(conn)
        else:
            await pool.release(conn)

    async def _take(self, pool: redis.asyncio.ConnectionPool) -> Any:
        """A connection of `pool` kept out of it since a call that went well (its
        spare): taken without the pool's lock, checks and bookkeeping (a good part
        of a master's Python per round trip). One not fit (closed by the peer, or
        disconnected: a stale primary's) is given back to the pool, which connects
        it again; with no spare left, the pool's (alink.take)."""
        spare = self._spares_of(pool) or []
        while spare:
            conn = spare.pop()
            if conn.is_connected and not conn.should_reconnect() and not closed_by_peer(conn):
                return conn
            await pool.release(conn)
        return await alink.take(pool)

    async def _run(self, calls: Sequence[Call[Any]]) -> tuple[list[Any], float]:
        """Each call's result (or the Error that refused it) and when they were sent."""
        results, sent_at = await self._drive(scripts.run(self.session, calls))
        self.round_trips.append(time.monotonic() - sent_at)
        return results, sent_at

    async def _one(self, call: Call[T]) -> T:
        [value], _ = await self._run([call])
        if isinstance(value, Error):
            raise value
        result: T = value
        return result

    # --- the master's operations ------------------------------------------------

    async def connect(self) -> None:
        """Reaches Redis and loads the function library (or the scripts); raises
        RedisUnavailable (RedisTransient when it may pass)."""
        await self.ping()
        await self._warm_blocking()
        await self.load_scripts()

    async def ping(self) -> None:
        await self._one(ops.ping())

    async def _warm_blocking(self) -> None:
        """Connects the blocking reads' connection before the first of them: made
        then, the connection's own round trips would come between a job handed to
        this master and its answer, and eat into the job's first lease."""
        [got], _ = await self._drive(scripts.run(self.session, [ops.ping()]), blocks_s=WARM_S)
        _raise_if_error(got)

    async def load_scripts(self) -> None:
        """Loads the function library (or, without FCALL, every script) once."""
        await self._drive(scripts.prepare(self.session))

    async def exchange(
        self,
        outcomes: Outcomes,
        pop_count: int | None,
        queues: list[str],
        order: str,
        ahead_s: float = 0.0,
        outage_ms: int = 0,
        apart: bool = False,
    ) -> ExchangeReply:
        """Sends the outcomes, then pops up to `pop_count` jobs (None: no pop; 0: only
        learn when something comes due; jobs whose turn comes within `ahead_s` too),
        in one round trip. With `outage_ms`, first says Redis was out of reach that
        long (resumed). Raises when the pop (or resumed) was refused, or every report
        was; reports refused by a transient condition while the pop went through come
        back in `unsent`. The reports and the pop go as one call (`exchange`) unless
        `apart`; one that Redis refuses for good (not a passing condition: a damaged
        key under a report, say) goes again apart, so a report that cannot be made
        never stops the pops (it is refused alone, as before `exchange`)."""
        first = exchanges.first_calls(self.worker, outcomes)
        pop = pop_count is not None and bool(queues)
        together = pop and not apart and exchanges.together(outcomes)  # reports and pop: one call
        reports = [] if together else ops.reports(self.worker, outcomes)
        calls: list[Call[Any]] = [call for _, call in first + reports]
        if outage_ms > 0:
            calls.insert(0, ops.resumed(self.worker, outage_ms))
        rtt_s = self.round_trip_s()  # stated by a pop that may register us as waiting
        if together:
            calls.append(
                ops.exchange(
                    self.worker, outcomes, pop_count or 0, queues, order, ahead_s, True, rtt_s
                )
            )
        elif pop:
            calls.append(ops.pop(self.worker, pop_count or 0, queues, order, ahead_s, True, rtt_s))
        if not calls:
            return ExchangeReply({}, None, time.monotonic())
        results, sent_at = await self._run(calls)
        if outage_ms > 0:
            _raise_if_error(results.pop(0))
        last = results.pop() if pop else None
        if together and isinstance(last, Error) and not isinstance(last, RedisUnavailable):
            # its reports were made up to the refused one and are made again alike
            return await self.exchange(outcomes, pop_count, queues, order, ahead_s, apart=True)
        _raise_if_error(last)
        if isinstance(last, ops.Exchange):
            done = exchanges.exchanged(outcomes, first, [], results, last.popped, sent_at)
            for states in last.states.values():
                done.states.update(states)
            return done
        return exchanges.exchanged(outcomes, first, reports, results, last, sent_at)

    async def heartbeat(self, leases: dict[str, str], outage_ms: int = 0) -> RenewReply:
        """Renews the leases {jid: token} in one call (after `resumed`, with
        `outage_ms`); says which are lost, and when the call was sent."""
        calls: list[Call[Any]] = [ops.heartbeat(self.worker, leases)] if leases else []
        if outage_ms > 0:
            calls.insert(0, ops.resumed(self.worker, outage_ms))
        if not calls:
            return RenewReply(set(), time.monotonic())
        results, sent_at = await self._run(calls)
        for value in results:
            _raise_if_error(value)
        beat = results[-1] if leases else ops.Heartbeat((), ())
        return RenewReply(set(beat.lost), sent_at, set(beat.renewed))

    async def extend_recurrence(self, id: str, cron: str, tz: str, after_ms: int) -> int:
        """Adds the next ticks of a cron recurrence (computed here: the scripts cannot)."""
        return await self._one(ops.recur_ticks(id, cron, recur.cron_ticks(cron, tz, after_ms)))

    async def trim_retention(self, batch: int) -> int:
        """Deletes up to `batch` completed jobs past retention; how many. It runs
        while Redis is full (allow-oom), where pops and completions are refused."""
        return await self._one(ops.retention(batch))

    async def counts(self, queues: list[str]) -> dict[str, dict[str, Any]]:
        return await self._one(ops.counts(queues))

    async def register(
        self, *, host: str, pid: int, queues: list[str], concurrency: int, started_ms: int
    ) -> None:
        """Tells who this master is (host, pid, what it serves) for `runtime workers`."""
        await self._one(
            ops.register_worker(
                self.worker,
                host=host,
                pid=pid,
                queues=queues,
                concurrency=concurrency,
                started_ms=started_ms,
            )
        )

    async def setting(self, name: str) -> str | None:
        """A shared setting as stored in Redis (None: unset, its default applies)."""
        config.shared_setting(name)
        return await self._one(ops.setting(self.keys, name))

    async def wait_for_work(self, queues: list[str], timeout_s: float) -> tuple[str, bytes] | None:
        """Blocks until something arrives for this master: a queue's wake-up token,
        or on its own list a job handed to it (handoff.lua) or a token. Its own list
        comes first: a job handed to it is taken before a queue's token (which is
        then left to the other waiting masters). Returns (the key, the value), None
        on timeout. Decode a handed job with `ops.handed`, a token with
        `ops.wake_at_us`."""
        if not timeout_s > 0:  # BLPOP 0 waits forever: never from a master
            raise BadArgument(f"timeout_s must be above 0, got {timeout_s!r}")
        keys = [self.keys.worker_wake(self.worker)] + [self.keys.wake(q) for q in queues]
        call = ops.wait_for_work(keys, timeout_s)
        [got], _ = await self._drive(scripts.run(self.session, [call]), blocks_s=timeout_s)
        _raise_if_error(got)
        woken: tuple[str, bytes] | None = got
        return woken

    async def cancellations(self) -> AsyncIterator[str]:
        """The jids of jobs this master holds that are cancelled (cancel.lua
        publishes them on keys.cancels(worker)), as they come: an async iterator
        on a pub/sub connection of its own. A connection lost, refused or silent
        (no answer to a PING within the command timeout) raises, typed
        (RedisTransient, RedisUnavailable), and ends it; each call connects and
        subscribes afresh. Cancels published while no one listened are missed:
        their holder learns at its next lease renewal instead."""
        listener = connect(self.route.url, self.command_timeout_s)
        pubsub = listener.pubsub()
        try:
            await pubsub.subscribe(self.keys.cancels(self.worker))
            async for jid in alink.published(pubsub, self.command_timeout_s):
                yield jid
        except Exception as err:
            if from_redis(err):
                raise classify(err, self.url) from err
            raise
        finally:
            with contextlib.suppress(redis.RedisError, OSError, RuntimeError):
                await pubsub.aclose()  # type: ignore[no-untyped-call]
                await listener.aclose()

    async def give_back(self, key: str) -> None:
        """Puts back a wake-up token this master cannot use (at most one per key)."""
        results, _ = await self._run(ops.give_back(key))
        for value in results:
            _raise_if_error(value)

    async def forget(self, queues: list[str]) -> int:
        """Says goodbye: stops waiting on `queues`, gives back jobs handed to this
        master but never taken; returns how many leases it still holds."""
        wake = self.keys.worker_wake(self.worker)
        [held, gone], _ = await self._run(
            [ops.forget_worker(self.worker, queues), ops.delete(wake)]
        )
        _raise_if_error(gone)
        _raise_if_error(held)
        return int(held)


def _spares(*clients: redis.asyncio.Redis) -> tuple[tuple[Any, list[Any]], ...]:
    """An empty list of spare connections for the pool of each client."""
    return tuple((client.connection_pool, []) for client in clients)


def _raise_if_error(value: Any) -> None:
    if isinstance(value, Error):
        raise value
