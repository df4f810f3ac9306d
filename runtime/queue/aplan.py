"""Driving a plan (runtime.queue.scripts) over asyncio: the one loop both
asyncio drivers run their calls through, the master's MasterClient
(runtime.queue.aio) and the application's AsyncConnection
(runtime.queue.adriver), as connection.py runs the synchronous Client's.

A plan's round trips go on one pooled connection: each request probed and
checked for the routing (runtime.queue.routing), a MOVED followed to the
node that owns the slot (its redirected commands sent again there, up to
routing.MAX_REDIRECTS), a stale Sentinel primary dropped so the next
connection asks the sentinels again. A connection whose replies may be unread
(a failure, a cancellation) is dropped before it goes back. Failures leave
classified (runtime.queue.faults); a link lost moves a Cluster's route on.

What differs between the drivers is theirs, as the hooks below: which pool a
call takes (`_pool`: the master's blocking reads have their own), how a
connection is taken and given back (`_take`, `_give`: each keeps its own spare
connections), and what a move to another node changes (`_reroute`).
"""

from __future__ import annotations

import abc
import time
from typing import Any, TypeVar

import redis
import redis.asyncio

from runtime.errors import Error
from runtime.queue import alink, routing, scripts
from runtime.queue.faults import classify, closed_transport, from_redis
from runtime.queue.keys import Keys

T = TypeVar("T")


class PlanDriver(abc.ABC):
    """A deployment's URL, keys, plan session and route, and the driving of plans
    on its connections; every command answers within `timeout_s` (a blocking
    read: its wait plus that)."""

    def __init__(self, url: str, keys: Keys, timeout_s: float) -> None:
        self.url = url
        self.keys = keys
        self.timeout_s = timeout_s
        self.session = scripts.Session(url, keys.root)
        self.route = routing.Route.of(url)

    @abc.abstractmethod
    def _pool(self, blocks_s: float) -> redis.asyncio.ConnectionPool:
        """The pool of the current node for a call whose replies may wait `blocks_s`."""

    @abc.abstractmethod
    async def _take(self, pool: redis.asyncio.ConnectionPool) -> Any:
        """A connected connection of `pool`."""

    @abc.abstractmethod
    async def _give(self, pool: redis.asyncio.ConnectionPool, conn: Any, ok: bool) -> None:
        """A connection after a call (`ok`: every reply read) back to where it is kept."""

    @abc.abstractmethod
    def _reroute(self) -> None:
        """From now on, calls go to the node the route names."""

    async def _drive_on(
        self, pool: redis.asyncio.ConnectionPool, plan: scripts.Plan[T], blocks_s: float
    ) -> tuple[T, float]:
        """Carries out a plan's round trips on one connection of `pool`; returns its
        result and time.monotonic() taken once the connection was up, just before
        the first request was written."""
        conn: Any = None
        ok = False
        try:
            conn = await self._take(pool)
            sent_at = time.monotonic()
            request = next(plan)
            plain = self.route.target.kind == "server"  # no probe, no MOVED, no stale primary
            while True:
                if plain:
                    request = plan.send(await self._trip(conn, request, blocks_s))
                    continue
                sent = routing.probed(self.route.target, request)
                replies = routing.checked(sent, request, await self._trip(conn, sent, blocks_s))
                for _ in range(routing.MAX_REDIRECTS):
                    if not routing.follows(self.route, replies):
                        break
                    await pool.release(conn)
                    conn = None
                    self._reroute()
                    pool = self._pool(blocks_s)
                    conn = await self._take(pool)
                    await self._redo(conn, request, replies, blocks_s)
                if routing.stale(self.route.target, replies):
                    await conn.disconnect(nowait=True)  # ask the sentinels again
                request = plan.send(replies)
        except StopIteration as done:
            ok = True
            value: T = done.value
            return value, sent_at
        except BaseException as err:  # cancelled too: replies may be unread
            if conn is not None and not isinstance(err, Error):
                await conn.disconnect(nowait=True)
            if from_redis(err):
                self._lost(err)
                raise classify(err, self.url) from err
            raise
        finally:
            if conn is not None:
                await self._give(pool, conn, ok)

    async def _redo(
        self, conn: Any, request: list[Any], replies: list[Any], blocks_s: float
    ) -> None:
        """After a MOVED the route followed: sends the redirected commands again on
        `conn` (the node the route names now); their replies replace the MOVED
        ones in `replies`. A slot still moving after MAX_REDIRECTS leaves its
        MOVED replies (RedisTransient moved)."""
        redo = routing.redirected(replies)
        again = await self._trip(conn, [request[i] for i in redo], blocks_s)
        for i, reply in zip(redo, again, strict=True):
            replies[i] = reply

    async def _trip(self, conn: Any, request: list[Any], blocks_s: float) -> list[Any]:
        return await alink.round_trip(conn, request, self.timeout_s, blocks_s)

    def _lost(self, err: BaseException) -> None:
        """A cluster node out of reach: the next call starts from the next seed."""
        link = redis.ConnectionError | redis.TimeoutError | OSError
        if (isinstance(err, link) or closed_transport(err)) and self.route.lost():
            self._reroute()
