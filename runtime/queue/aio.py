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

Every command must answer within `command_timeout_s` (a blocking read: its wait
plus that), so a half-open connection is noticed within it; the master sets it
to a third of its shortest lease.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections import deque
from collections.abc import AsyncIterator, Sequence
from typing import Any, TypeVar

import redis
import redis.asyncio
import redis.asyncio.sentinel
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from runtime import config
from runtime.errors import BadArgument, ConfigError, Error, RedisTransient, RedisUnavailable
from runtime.queue import ops, recur, routing, scripts, urls
from runtime.queue.connection import driver_options, sentinel_options
from runtime.queue.faults import classify, closed_transport, from_redis, redact
from runtime.queue.keys import Keys
from runtime.queue.leases import ExchangeReply, Outcomes, Popped, RenewReply
from runtime.queue.ops import Call, text

T = TypeVar("T")
COMMAND_TIMEOUT_S = 5.0
CANCELS_PING_S = 30.0  # the cancels connection is checked this often (a missed cancel is
# still found by the next lease renewal)
KEEPALIVE_IDLE_S = 5
SPARE_MAX = 4  # connections kept out of the pool between calls (a master runs a few at once)
WARM_S = 0.001  # a PING on the blocking connection: it never waits (_warm_blocking)
ROUND_TRIPS_KEPT = 8  # the latest calls whose round trips say the link's (round_trip_s)


class MasterClient:
    """A master's connection to its deployment."""

    def __init__(
        self, url: str, keys: Keys, worker: str, *, command_timeout_s: float = COMMAND_TIMEOUT_S
    ) -> None:
        self.url = url
        self.keys = keys
        self.worker = worker
        self.command_timeout_s = command_timeout_s
        self.session = scripts.Session(url, keys.root)
        self.route = routing.Route.of(url)
        self.redis: redis.asyncio.Redis = connect(self.route.url, command_timeout_s)
        self.blocking: redis.asyncio.Redis = connect(self.route.url, command_timeout_s)
        self.retired: list[redis.asyncio.Redis] = []  # clients of nodes left (cluster)
        self.spares = _spares(self.redis, self.blocking)  # kept out of their pools (_spare)
        self.round_trips: deque[float] = deque(maxlen=ROUND_TRIPS_KEPT)  # s, of calls (_run)

    def round_trip_s(self) -> float:
        """The link's recent round trip: the longest of the latest calls' (0: none yet).
        A waiting master states it, so a job handed to it gets a first lease that
        fits its link (lua/lib/handoff.lua)."""
        return max(self.round_trips, default=0.0)

    def set_command_timeout(self, timeout_s: float) -> None:
        """From now on, a command not answered within `timeout_s` fails (RedisTransient
        timeout) and its connection is dropped."""
        self.command_timeout_s = timeout_s
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

    def _lost(self, err: BaseException) -> None:
        """A cluster node out of reach: the next call starts from the next seed."""
        link = redis.ConnectionError | redis.TimeoutError | OSError
        if (isinstance(err, link) or closed_transport(err)) and self.route.lost():
            self._reroute()

    # --- running calls ----------------------------------------------------------

    async def _drive(self, plan: scripts.Plan[T], *, blocks_s: float = 0.0) -> tuple[T, float]:
        """Carries out a plan's round trips on one pooled connection (the blocking
        one when replies may wait `blocks_s`); returns its result and
        time.monotonic() taken once the connection was up, just before the first
        request was written."""
        await self._close_retired()
        pool = (self.blocking if blocks_s > 0 else self.redis).connection_pool
        ok = False
        try:
            conn = await self._spare(pool) or await _take(pool)
        except Exception as err:
            if from_redis(err):
                self._lost(err)
                raise classify(err, self.url) from err
            raise
        sent_at = time.monotonic()
        try:
            request = next(plan)
            while True:
                sent = routing.probed(self.route.target, request)
                replies = await self._round_trip(conn, sent, blocks_s)
                replies = routing.checked(sent, request, replies)
                for _ in range(routing.MAX_REDIRECTS):
                    if not routing.follows(self.route, replies):
                        break
                    await pool.release(conn)
                    conn = None
                    pool, conn = await self._moved(request, replies, blocks_s)
                if routing.stale(self.route.target, replies):
                    await conn.disconnect(nowait=True)  # ask the sentinels again
                request = plan.send(replies)
        except StopIteration as done:
            ok = True
            return done.value, sent_at
        except BaseException as err:
            if conn is not None and not isinstance(err, Error):  # replies may be unread
                await conn.disconnect(nowait=True)
            if from_redis(err):
                self._lost(err)
                raise classify(err, self.url) from err
            raise
        finally:
            if conn is not None:
                await self._put_back(pool, conn, ok)

    def _spares_of(self, pool: redis.asyncio.ConnectionPool) -> list[Any] | None:
        for of, spare in self.spares:  # twice a call: no generator for next()
            if of is pool:
                return spare
        return None

    async def _put_back(self, pool: redis.asyncio.ConnectionPool, conn: Any, ok: bool) -> None:
        """A connection after a call: kept aside (`_spare`) if the call went well (all
        its replies read) on a pool of the current clients, else back to its pool."""
        spare = self._spares_of(pool) if ok else None
        if spare is not None and len(spare) < SPARE_MAX:
            spare.append(conn)
        else:
            await pool.release(conn)

    async def _spare(self, pool: redis.asyncio.ConnectionPool) -> Any:
        """A connection of `pool` kept out of it since a call that went well:
        taken without the pool's lock, checks and bookkeeping (a good part of a
        master's Python per round trip). None when there is none, or it is not fit
        (closed by the peer, or disconnected: a stale primary's), and then given
        back to the pool, which connects it again."""
        spare = self._spares_of(pool) or []
        while spare:
            conn = spare.pop()
            if conn.is_connected and not conn.should_reconnect() and not closed_by_peer(conn):
                return conn
            await pool.release(conn)
        return None

    async def _moved(
        self, request: list[Any], replies: list[Any], blocks_s: float
    ) -> tuple[Any, Any]:
        """After a MOVED the route followed: sends the redirected commands again to
        the node it names (their replies replace the MOVED ones in `replies`);
        returns the pool and connection used. A slot still moving after
        MAX_REDIRECTS leaves its MOVED replies (RedisTransient moved)."""
        self._reroute()
        pool = (self.blocking if blocks_s > 0 else self.redis).connection_pool
        conn = await _take(pool)
        redo = routing.redirected(replies)
        again = await self._round_trip(conn, [request[i] for i in redo], blocks_s)
        for i, reply in zip(redo, again, strict=True):
            replies[i] = reply
        return pool, conn

    async def _round_trip(self, conn: Any, request: list[Any], blocks_s: float) -> list[Any]:
        return await round_trip(conn, request, self.command_timeout_s, blocks_s)

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
        first = _first_calls(self.worker, outcomes)
        pop = pop_count is not None and bool(queues)
        together = pop and not apart and _together(outcomes)  # reports and pop: one call
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
            done = _exchanged(outcomes, first, [], results, last.popped, sent_at)
            for states in last.states.values():
                done.states.update(states)
            return done
        return _exchanged(outcomes, first, reports, results, last, sent_at)

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
            async for jid in _published(pubsub, self.command_timeout_s):
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


async def round_trip(conn: Any, request: list[Any], timeout_s: float, blocks_s: float) -> list[Any]:
    """Sends a round trip's commands on a connection; their replies (error replies
    as their exceptions: the stream stays in step). Each answers within
    `timeout_s`, a blocking one (`blocks_s`) within its wait plus that: the
    socket's timeout, not read_response's own, which answers None when it runs
    out (a poll) and leaves the reply unread on the connection."""
    conn.socket_timeout = timeout_s
    await send(conn, scripts.pack(request), timeout_s)
    conn.socket_timeout = timeout_s + blocks_s
    replies = []
    try:
        for _ in request:
            try:
                replies.append(await conn.read_response())
            except redis.ResponseError as err:
                replies.append(err)
    finally:
        conn.socket_timeout = timeout_s
    return replies


async def send(conn: Any, request: bytes, timeout_s: float) -> None:
    """Writes a request on a connection, as redis-py's send_packed_command does
    but without its asyncio.wait_for, which in Python 3.11 wraps the write in a
    task of its own: two more turns of the loop and a timer per round trip, the
    write itself one turn late. Here the bytes go at once; only a full send
    buffer is waited on, for `timeout_s` (then redis.TimeoutError). Failures
    end as send_packed_command's do: the connection dropped, OSError as
    redis.ConnectionError, anything else (uvloop's RuntimeError on a closed
    handle) raised as it came."""
    if not conn.is_connected:  # not from the pool's hands: connect as redis-py would
        await conn.send_packed_command([request], check_health=False)
        return
    writer = conn._writer  # redis-py's stream (see closed_by_peer)
    try:
        writer.write(request)
        if writer.transport.get_write_buffer_size():
            async with asyncio.timeout(timeout_s):
                await writer.drain()
    except TimeoutError:
        await conn.disconnect(nowait=True)
        raise redis.TimeoutError("Timeout writing to socket") from None
    except OSError as err:
        await conn.disconnect(nowait=True)
        raise redis.ConnectionError(f"Error while writing to socket: {err}") from err
    except BaseException:
        await conn.disconnect(nowait=True)
        raise


def _spares(*clients: redis.asyncio.Redis) -> tuple[tuple[Any, list[Any]], ...]:
    """An empty list of spare connections for the pool of each client."""
    return tuple((client.connection_pool, []) for client in clients)


async def _take(pool: redis.asyncio.ConnectionPool) -> Any:
    """A connection from `pool`, connected, never one the peer closed while it idled.
    The pool hands out a connection with unread bytes or at EOF only after
    reconnecting it, but not one whose peer reset it (RST): its reader holds the
    error and its transport is closed, so its next write would fail on a healthy
    link. Such a one is connected afresh here (no round trip: local state only)."""
    conn = await pool.get_connection()  # type: ignore[no-untyped-call]  # connected here
    try:
        if closed_by_peer(conn):
            await conn.disconnect(nowait=True)
            await conn.connect()
    except BaseException:
        await pool.release(conn)
        raise
    return conn


def closed_by_peer(conn: Any) -> bool:
    """Whether a connected connection was reset or closed by the peer (redis-py
    keeps its asyncio streams in `_reader` and `_writer`, None when not connected)."""
    reader, writer = getattr(conn, "_reader", None), getattr(conn, "_writer", None)
    if reader is None or writer is None:
        return False  # not connected: the first write connects it
    return bool(writer.is_closing() or reader.exception() is not None or reader.at_eof())


def connect(
    url: str, timeout_s: float, connect_timeout_s: float | None = None, **kwargs: Any
) -> redis.asyncio.Redis:
    """A redis-py asyncio client that never retries on its own and never waits
    longer than `timeout_s` for an answer (`connect_timeout_s`, default the
    same, to connect); over TCP with keepalive on (probes after KEEPALIVE_IDLE_S
    idle), which unix sockets do not take. For a Sentinel URL, a client of the
    service's primary (redis-py's Sentinel: asked again on every new
    connection); for a Cluster URL, of its first node (runtime.queue.routing).
    The asyncio twin of connection.connect: a master's clients and the
    application's AsyncClient (adriver) both."""
    options: dict[str, Any] = {
        "socket_timeout": timeout_s,
        "socket_connect_timeout": timeout_s if connect_timeout_s is None else connect_timeout_s,
        "retry": Retry(NoBackoff(), 0),
        **driver_options(),
    }
    if url.split("://", 1)[0].lower() in ("redis", "rediss", urls.SENTINEL_SCHEME):
        options |= {"socket_keepalive": True, "socket_keepalive_options": _keepalive()}
    options |= kwargs
    target = urls.parse(url)
    try:
        if target.kind == "sentinel":
            sentinels = redis.asyncio.sentinel.Sentinel(  # type: ignore[no-untyped-call]
                list(target.seeds), sentinel_kwargs=sentinel_options(target, options)
            )
            primary: redis.asyncio.Redis = sentinels.master_for(
                target.service,
                db=target.db,
                username=target.username,
                password=target.password,
                **options,
            )
            return primary
        if target.kind == "cluster":
            url = target.node_url(target.seeds[0])
        return redis.asyncio.Redis.from_url(url, **options)
    except ValueError as err:
        raise ConfigError(f"bad Redis URL {redact(url)}: {redact(str(err))}") from err


def _keepalive() -> dict[int, int]:
    """TCP keepalive options this platform has: a peer gone while a connection
    idles in the pool is noticed in about KEEPALIVE_IDLE_S + 3 probes of 1 s."""
    wanted = {"TCP_KEEPIDLE": KEEPALIVE_IDLE_S, "TCP_KEEPINTVL": 1, "TCP_KEEPCNT": 3}
    return {getattr(socket, n): v for n, v in wanted.items() if hasattr(socket, n)}


async def _published(
    pubsub: Any, timeout_s: float, ping_every_s: float = CANCELS_PING_S
) -> AsyncIterator[str]:
    """Messages of a subscribed pub/sub connection, as text. PINGs it every
    `ping_every_s` (an idle master stays all but silent); nothing heard for
    `timeout_s` after one is a dead link (redis.TimeoutError)."""
    heard = pinged = time.monotonic()
    while True:
        now = time.monotonic()
        if pinged > heard and now - pinged > timeout_s:
            raise redis.TimeoutError(f"no answer on the cancels connection for {now - heard:.1f} s")
        if now - pinged >= ping_every_s:
            await pubsub.ping()
            pinged = now
        reply = await pubsub.parse_response(block=False, timeout=min(ping_every_s, 1.0))
        if reply is None:
            continue
        heard = time.monotonic()
        if isinstance(reply, list | tuple) and len(reply) == 3 and text(reply[0]) == "message":
            yield text(reply[2])


def _raise_if_error(value: Any) -> None:
    if isinstance(value, Error):
        raise value


def _together(outcomes: Outcomes) -> bool:
    """Whether an exchange's reports go in its pop's call (lua/exchange.lua): when
    it has completions, retries or failures and no releases (those go in a call
    of their own, before the pop)."""
    return not outcomes.release and bool(outcomes.complete or outcomes.retry or outcomes.fail)


First = tuple[Outcomes, Call[Any]]  # progress or puts sent first, and their call


def _first_calls(worker: str, outcomes: Outcomes) -> list[First]:
    """What goes before the reports: the progress (one call), then the puts made at
    once (one call per job putting them), each with the outcomes it carries."""
    first: list[First] = []
    if outcomes.progress:
        first.append(
            (Outcomes(progress=outcomes.progress), ops.progress(worker, outcomes.progress.values()))
        )
    if outcomes.live:  # what running jobs printed: one call, in the same round trip
        first.append((Outcomes(live=outcomes.live), ops.live(worker, outcomes.live.values())))
    for rows in outcomes.puts_by_job().values():
        part = Outcomes(puts=rows)
        [(_, call)] = ops.puts_at_once(part)
        first.append((part, call))
    return first


def _exchanged(
    outcomes: Outcomes,
    first: list[First],
    reports: list[tuple[Any, Call[Any]]],
    results: list[Any],
    popped: Popped | None,
    sent_at: float,
) -> ExchangeReply:
    """States of the reports and the puts; those refused by a transient condition
    go to `unsent` when the pop went through (else, if none was taken, the refusal
    is raised). The progress reports' answers are dropped."""
    states: dict[str, str | Error] = {}
    put: dict[str, str | Error] = {}
    unsent = Outcomes()
    for (part, _), value in zip(first, results, strict=False):
        if isinstance(value, RedisTransient):
            unsent.merge(part)
        elif part.puts:
            jids = [row[0] for row in part.puts]
            got = [value] * len(jids) if isinstance(value, Error) else value
            put.update(zip(jids, got, strict=True))
    for (kind, _), value in zip(reports, results[len(first) :], strict=True):
        if isinstance(value, RedisTransient):
            unsent.merge(outcomes.only(kind))
        elif isinstance(value, Error):
            states.update((jid, value) for jid in outcomes.jids(kind))
        else:
            states.update(value)
    if popped is None and len(unsent) == len(outcomes) and len(unsent):
        raise next(v for v in results if isinstance(v, RedisTransient))
    return ExchangeReply(states, popped, sent_at, unsent, put)
