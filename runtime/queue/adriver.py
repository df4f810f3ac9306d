"""One asyncio connection to a deployment: the driver of the application's
`AsyncClient` (runtime.queue.api), as connection.py is the synchronous
`Client`'s.

It runs the same Calls (runtime.queue.ops) through the same plan
(scripts.run) and the same routing (runtime.queue.routing), with the same
retries: a call marked `repeatable` that meets a `RedisTransient` is sent
again after connection.backoff_s, for at most `retry_for_s` seconds in all.
Errors arrive classified (runtime.queue.faults), never as redis-py's.

One connection pool per connection; at most `max_connections` calls at
once, each holding one of its connections for its round trips (a call that
finds them all in use waits its turn, for as long as calls go on ending:
none for `timeout_s` is a RedisTransient); a call cancelled (asyncio) while
its replies are unread drops that connection before giving it back, so the
next call never reads a stale reply. Waits do not block a connection each:
their blocking reads are one BLPOP shared by all (runtime.queue.waiters), so
a thousand waiting coroutines cost one connection. Every command answers
within `timeout_s` (a blocking read: its wait plus that), so an outage is an
error, never a hang.
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import redis
import redis.asyncio
import redis.asyncio.sentinel

from runtime import config
from runtime.errors import Error, RedisTransient
from runtime.queue import alink, ops, scripts, waiting
from runtime.queue.aplan import PlanDriver
from runtime.queue.connection import (
    CONNECT_TIMEOUT_S,
    RETRY_FOR_S,
    SOCKET_TIMEOUT_S,
    resolve_url,
    retry_pause,
)
from runtime.queue.faults import classify
from runtime.queue.keys import Keys
from runtime.queue.ops import Call
from runtime.queue.shards import Shards
from runtime.queue.waiters import Waiter

T = TypeVar("T")
log = logging.getLogger(__name__)
MAX_CONNECTIONS = 8  # calls at once (so connections) of a client: one event loop keeps a
# handful busy; more only make the replies that arrive together longer to read (its
# waits share one more connection: waiters.py)
CONNECTING_MAX = 32  # connections taken (made, when none is idle) at once: a thousand
# coroutines starting together would overflow the server's accept backlog, and a
# unix socket's connect then waits out its whole timeout
SPARE_MAX = 64  # connections kept out of the pool between calls (still counted in use)
# the connection whose slot the running task holds (AsyncConnection.turn)
_turn_of: contextvars.ContextVar[AsyncConnection | None] = contextvars.ContextVar(
    "turn_of", default=None
)


class AsyncConnection(PlanDriver):
    """A connection to one deployment (a namespace in one Redis) for asyncio: its
    URL, settings and keys, and the running of calls (`call`, `calls`, `steps`):
    their plans driven by runtime.queue.aplan, each in one of the call slots."""

    def __init__(
        self,
        url: str | None = None,
        *,
        namespace: str | None = None,
        settings: config.Settings | None = None,
        retry_for_s: float = RETRY_FOR_S,
        timeout_s: float = SOCKET_TIMEOUT_S,
        max_connections: int = MAX_CONNECTIONS,
        **redis_kwargs: Any,
    ) -> None:
        if settings is None:
            settings = config.load_settings({"url": url, "namespace": namespace})
        super().__init__(resolve_url(settings), Keys(settings.namespace), timeout_s)
        self.settings = settings
        self.shards = Shards.of(settings)
        self.retry_for_s = retry_for_s
        # the pool never makes a call wait (the spare connections are its in use
        # too): calls wait for one of `max_connections` slots (_slot) instead
        self.redis_kwargs = {"max_connections": max_connections + SPARE_MAX, **redis_kwargs}
        self._slots = Slots(max_connections, timeout_s, self._stuck)
        self.redis = self._connect(self.route.url)
        self.nodes: dict[str, redis.asyncio.Redis] = {self.route.url: self.redis}
        self._taking = asyncio.Semaphore(CONNECTING_MAX)
        # connections of calls that went well, kept aside for the next calls: taken
        # without the pool's lock and bookkeeping (most of a call's Python)
        self._spare: list[Any] = []
        self.waiter = Waiter(self._unslotted, self.calls, self.keys.waiter_wake(uuid.uuid4().hex))

    async def aclose(self) -> None:
        await self.waiter.aclose()
        spare, self._spare = self._spare, []
        for conn in spare:
            await self.redis.connection_pool.release(conn)
        for node in {id(c): c for c in [self.redis, *self.nodes.values()]}.values():
            await node.aclose(close_connection_pool=True)

    # --- running calls ------------------------------------------------------------

    async def call(
        self, call: Call[T], landed: Callable[[Error], Awaitable[T | None]] | None = None
    ) -> T:
        """Runs one call (Connection.call; `landed` is awaited)."""
        value: T = (await self.calls([call], landed))[0]
        return value

    async def calls(
        self, calls: Sequence[Call[Any]], landed: Callable[[Error], Awaitable[Any]] | None = None
    ) -> list[Any]:
        """Runs calls in one round trip; their results in order, or the first error
        raised. Retried through transient failures when every call is repeatable
        (Connection.calls)."""
        deadline = time.monotonic() + self.retry_for_s
        blocks_s = waiting.blocks_s(list(calls))
        attempt = 0
        while True:
            try:
                return _values(await self._drive(scripts.run(self.session, calls), blocks_s))
            except RedisTransient as err:
                pause = retry_pause(err, calls, attempt, deadline)
            except Error as err:
                found = await landed(err) if attempt and landed is not None else None
                if found is None:
                    raise
                return [found]
            await asyncio.sleep(pause)
            attempt += 1

    async def steps(self, plan: waiting.Steps) -> Any:
        """Drives a plan of round trips (runtime.queue.waiting) to its end."""
        try:
            request = next(plan)
            while True:
                request = plan.send(await self._round(request))
        except StopIteration as done:
            return done.value

    async def _unslotted(self, calls: Sequence[Call[Any]]) -> list[Any]:
        """`calls` outside the slots, for the waiter's own tasks (their BLPOP holds a
        connection for seconds: one more than `max_connections`, never one less)."""
        _turn_of.set(self)  # for the rest of the calling task, which is the waiter's
        return await self.calls(calls)

    async def _round(self, request: list[Call[Any]]) -> list[Any]:
        """A plan's round trip; a wait's blocking read is served by the shared
        waiter (runtime.queue.waiters), the rest sent after it."""
        blocked = waiting.blocked_on(request)
        if blocked is None:
            return await self.calls(request)
        token = await self.waiter.pop(*blocked)
        return [token, *await self.calls(request[1:])] if len(request) > 1 else [token]

    async def _drive(self, plan: scripts.Plan[T], blocks_s: float) -> T:
        """Carries out a plan's round trips on one pooled connection (of the node
        that owns the namespace's slot, for a cluster: MOVED is followed)."""
        if _turn_of.get() is self:
            return (await self._drive_on(self.redis.connection_pool, plan, blocks_s))[0]
        await self._slots.take()
        try:  # the pool as _pool, once the slot is ours
            return (await self._drive_on(self.redis.connection_pool, plan, blocks_s))[0]
        finally:
            self._slots.give()

    def turn(self) -> Turn:
        """A call's slot, taken first and held by the task's calls on this
        connection until the block ends: the work before a call (building a put)
        waits its turn too, so a thousand coroutines started at once wait, at a
        few microseconds each, instead of all doing that work in one turn of
        the event loop."""
        return Turn(self)

    def _stuck(self) -> Error:
        """What a call waiting for a slot raises when none was freed for timeout_s."""
        busy = f"no call of {self.keys.root} ended for {self.timeout_s} s"
        return classify(redis.TimeoutError(busy), self.url)

    def _pool(self, blocks_s: float) -> redis.asyncio.ConnectionPool:
        return self.redis.connection_pool  # a blocking read holds a slot as any call

    async def _take(self, pool: redis.asyncio.ConnectionPool) -> Any:
        """A connected connection of `pool`: one kept aside, if one is fit (not closed
        by the peer), else the pool's (CONNECTING_MAX taken at once)."""
        while self._spare and pool is self.redis.connection_pool:
            conn = self._spare.pop()
            if conn.is_connected and not alink.closed_by_peer(conn):
                return conn
            await pool.release(conn)  # the pool connects it again when it is handed out
        async with self._taking:
            return await pool.get_connection()  # type: ignore[no-untyped-call]

    async def _give(self, pool: redis.asyncio.ConnectionPool, conn: Any, ok: bool) -> None:
        """A connection after a call: kept aside when the call went well (every reply
        read) on the current node's pool, else back to its pool."""
        if ok and pool is self.redis.connection_pool and len(self._spare) < SPARE_MAX:
            self._spare.append(conn)
        else:
            await pool.release(conn)

    def _connect(self, url: str) -> redis.asyncio.Redis:
        connect_timeout_s = min(self.timeout_s, CONNECT_TIMEOUT_S)
        return alink.connect(url, self.timeout_s, connect_timeout_s, **self.redis_kwargs)

    def _reroute(self) -> None:
        """Calls go to the node the route names, on a client kept per node."""
        if self.route.url not in self.nodes:
            self.nodes[self.route.url] = self._connect(self.route.url)
        self.redis = self.nodes[self.route.url]

    async def now_ms(self) -> int:
        return await self.call(ops.now())


def _values(results: list[Any]) -> list[Any]:
    for value in results:
        if isinstance(value, Error):
            raise value
    return results


class Turn:
    """AsyncConnection.turn: its slot for the block, for the calls of this task."""

    __slots__ = ("conn", "token")

    def __init__(self, conn: AsyncConnection) -> None:
        self.conn = conn
        self.token: contextvars.Token[AsyncConnection | None] | None = None

    async def __aenter__(self) -> None:
        if _turn_of.get() is not self.conn:
            await self.conn._slots.take()
            self.token = _turn_of.set(self.conn)

    async def __aexit__(self, *exc: object) -> None:
        if self.token is not None:
            _turn_of.reset(self.token)
            self.token = None
            self.conn._slots.give()


class Slots:
    """The call slots of a connection: `size` at once, the rest waiting in
    order. A waiting call waits for as long as calls go on ending: when none
    gave a slot back for `timeout_s`, every waiting call raises `stuck()`
    (an error, not a hang). One timer watches them all (a timer each, as
    asyncio.timeout would set, is most of the cost of a thousand coroutines
    queueing at once)."""

    def __init__(self, size: int, timeout_s: float, stuck: Callable[[], Error]) -> None:
        self.free = size
        self.timeout_s = timeout_s
        self.stuck = stuck
        self.waiting: collections.deque[asyncio.Future[None]] = collections.deque()
        self.moved_at = 0.0  # when a slot was last given back, or the first call queued
        self.watch: asyncio.TimerHandle | None = None

    async def take(self) -> None:
        if self.free and not self.waiting:
            self.free -= 1
            return
        loop = asyncio.get_running_loop()
        if not self.waiting:
            self.moved_at = max(self.moved_at, time.monotonic())
        turn: asyncio.Future[None] = loop.create_future()
        self.waiting.append(turn)
        if self.watch is None:
            self.watch = loop.call_later(self.timeout_s, self._check)
        try:
            await turn
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled() and turn.exception() is None:
                self.give()  # handed a slot in the same turn as cancelled: passed on
            raise

    def give(self) -> None:
        self.moved_at = time.monotonic()
        while self.waiting:
            turn = self.waiting.popleft()
            if not turn.done():
                turn.set_result(None)
                return
        self.free += 1

    def _check(self) -> None:
        self.watch = None
        while self.waiting and self.waiting[0].done():
            self.waiting.popleft()  # cancelled
        if not self.waiting:
            return
        idle_s = time.monotonic() - self.moved_at
        if idle_s < self.timeout_s:
            loop = asyncio.get_running_loop()
            self.watch = loop.call_later(self.timeout_s - idle_s, self._check)
            return
        waiting, self.waiting = self.waiting, collections.deque()
        for turn in waiting:
            if not turn.done():
                turn.set_exception(self.stuck())
