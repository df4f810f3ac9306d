"""The asyncio link to Redis that both asyncio drivers use (the master's
MasterClient, runtime.queue.aio, and the application's AsyncConnection,
runtime.queue.adriver): making a client (connect, with TCP keepalive), taking a
connection from its pool (take), a round trip's write and read (send,
round_trip), and a pub/sub connection's messages kept alive by PINGs
(published). Plain functions of redis-py's objects: the plan driving them is
runtime.queue.aplan.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator
from typing import Any

import redis
import redis.asyncio
import redis.asyncio.sentinel
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from runtime.errors import ConfigError
from runtime.queue import scripts, urls
from runtime.queue.connection import driver_options, sentinel_options
from runtime.queue.faults import redact
from runtime.queue.ops import text

CANCELS_PING_S = 30.0  # a pub/sub connection (the master's cancels) is checked this often
# (a missed cancel is still found by the next lease renewal)
KEEPALIVE_IDLE_S = 5


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


async def take(pool: redis.asyncio.ConnectionPool) -> Any:
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


async def published(
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
