"""A fault-injecting TCP proxy between masters and a test Redis.

The proxy runs its own asyncio loop in a background thread of the test process,
listens on 127.0.0.1:<free port> and forwards every connection to the target
Redis (a unix socket path or "host:port"). Masters connect to `proxy.url`; the
test thread switches the mode at run time, and each switch has taken effect
when the call returns:

    passthrough()        forward everything (the start mode)
    reset()              close every open connection with RST (SO_LINGER 0);
                         new connections are served as usual
    reset_for(s)         the same, and every connection made in the next `s`
                         seconds is reset at once (a flapping or dead link)
    blackhole()          half-open: sockets stay open, all bytes are dropped
                         both ways, for new connections too; a connection that
                         was black-holed never carries bytes again (its stream
                         lost some): `passthrough()` resets it, or leaves it
                         silently dead with stale="dead"
    delay(up_ms, down_ms) hold each chunk that long per direction (order kept)
    drop_reply(pattern)  forward the next request containing `pattern`, and
                         drop its reply; nothing is closed (the client waits)

Counters (`stats`) tell how many connections were accepted, are open, were
reset, how many bytes went each way, how many replies were dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Self, TypeVar

T = TypeVar("T")
CHUNK_BYTES = 65536
_LINGER_RST = struct.pack("ii", 1, 0)


class FrameSplitter:
    """Splits a RESP stream (requests or replies) into whole frames. A stream it
    cannot parse makes it pass bytes through untouched from then on."""

    def __init__(self) -> None:
        self.buffer = b""
        self.usable = True

    def feed(self, data: bytes) -> list[bytes]:
        if not self.usable:
            return [data]
        self.buffer += data
        frames, pos = [], 0
        while pos < len(self.buffer):
            try:
                end = frame_end(self.buffer, pos)
            except ValueError:
                self.usable = False
                frames.append(self.buffer[pos:])
                pos = len(self.buffer)
                break
            if end is None:
                break
            frames.append(self.buffer[pos:end])
            pos = end
        self.buffer = self.buffer[pos:]
        return frames


_SIMPLE = frozenset(b"+-:,#(_")
_BULK = frozenset(b"$=!")
_AGGREGATE = frozenset(b"*~>")
_PAIRS = frozenset(b"%|")


def frame_end(buf: bytes, pos: int) -> int | None:
    """Where the RESP2/RESP3 value starting at `pos` ends; None if incomplete.
    A line of any other kind is an inline command (one line)."""
    line_end = buf.find(b"\r\n", pos)
    if line_end < 0:
        return None
    kind, after = buf[pos], line_end + 2
    if kind in _SIMPLE or kind not in _BULK | _AGGREGATE | _PAIRS:
        return after
    count = int(buf[pos + 1 : line_end])  # ValueError: not RESP
    if count < 0:
        return after
    if kind in _BULK:
        end = after + count + 2
        return end if len(buf) >= end else None
    for _ in range(count * 2 if kind in _PAIRS else count):
        next_end = frame_end(buf, after)
        if next_end is None:
            return None
        after = next_end
    return after


def command_of(frame: bytes) -> bytes:
    """The command name of a request frame, upper case (b"" if none)."""
    parts = frame.split(b"\r\n")
    if frame.startswith(b"*") and len(parts) > 2:
        return parts[2].upper()
    return parts[0].split(b" ", 1)[0].upper()


@dataclass
class Stats:
    """What the proxy saw; read them from the test thread (plain ints)."""

    accepted: int = 0
    open: int = 0
    resets: int = 0
    bytes_up: int = 0  # client -> Redis
    bytes_down: int = 0  # Redis -> client
    dropped_replies: int = 0
    blackholed_bytes: int = 0
    dropped_requests: list[bytes] = field(default_factory=list)  # whose reply was dropped
    accepted_at: list[float] = field(default_factory=list)  # time.monotonic() of each


@dataclass
class _Rules:
    blackhole: bool = False
    reset_until: float = 0.0  # monotonic: connections made before then are reset
    up_delay_s: float = 0.0
    down_delay_s: float = 0.0
    drop_patterns: list[tuple[bytes, frozenset[bytes]]] = field(default_factory=list)


class _Link:
    """One proxied connection: client side, Redis side, two pumps."""

    def __init__(self, proxy: Proxy, client: asyncio.StreamWriter) -> None:
        self.proxy = proxy
        self.client = client
        self.upstream: asyncio.StreamWriter | None = None
        self.dead = proxy.rules.blackhole  # black-holed for good
        self.requests = FrameSplitter()
        self.replies = FrameSplitter()
        self.requests_seen = 0
        self.replies_seen = 0
        self.drop_indices: set[int] = set()
        self.tasks: list[asyncio.Task[None]] = []

    def abort(self) -> None:
        """Closes both sides; the client's with RST."""
        sock = self.client.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RST)
        self.client.transport.abort()
        if self.upstream is not None:
            self.upstream.transport.abort()
        for task in self.tasks:
            task.cancel()

    def on_requests(self, data: bytes) -> None:
        """Counts requests; marks the reply of a matching one to be dropped."""
        for frame in self.requests.feed(data):
            for rule in list(self.proxy.rules.drop_patterns):
                pattern, commands = rule
                if pattern in frame and (not commands or command_of(frame) in commands):
                    self.proxy.rules.drop_patterns.remove(rule)
                    self.drop_indices.add(self.requests_seen)
                    self.proxy.stats.dropped_requests.append(frame)
                    break
            self.requests_seen += 1

    def filter_replies(self, data: bytes) -> bytes:
        """The reply bytes to forward: whole frames, less the dropped ones."""
        out = []
        for frame in self.replies.feed(data):
            if self.replies_seen in self.drop_indices:
                self.drop_indices.discard(self.replies_seen)
                self.proxy.stats.dropped_replies += 1
            else:
                out.append(frame)
            self.replies_seen += 1
        return b"".join(out)


class Proxy:
    """See the module docstring. Use as a context manager, or start()/stop()."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.rules = _Rules()
        self.stats = Stats()
        self.port = 0
        self._links: set[_Link] = set()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None

    # --- life -------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    def start(self) -> Self:
        self._thread.start()
        self._call(self._listen)
        return self

    def stop(self) -> None:
        if not self._thread.is_alive():
            return
        self._call(self._close_all)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- modes (from the test thread) ---------------------------------------------

    def passthrough(self, stale: Literal["reset", "dead"] = "reset") -> None:
        """Forward everything again. Connections black-holed before are reset (as
        when the peer lost their state), or with stale="dead" stay silently dead
        (a firewall that forgot the flow): only new connections work."""

        async def apply() -> None:
            self.rules.blackhole = False
            self.rules.reset_until = 0.0
            self.rules.up_delay_s = self.rules.down_delay_s = 0.0
            self.rules.drop_patterns.clear()
            for link in [link for link in self._links if link.dead and stale == "reset"]:
                self._reset(link)

        self._call(apply)

    def reset(self) -> None:
        """RST on every open connection now."""
        self.reset_for(0.0)

    def reset_for(self, seconds: float) -> None:
        """RST on every open connection, and on every new one for `seconds`."""

        async def apply() -> None:
            self.rules.reset_until = time.monotonic() + seconds
            for link in list(self._links):
                self._reset(link)

        self._call(apply)

    def blackhole(self) -> None:
        """Half-open: every connection, old and new, silently loses all bytes."""

        async def apply() -> None:
            self.rules.blackhole = True
            for link in self._links:
                link.dead = True

        self._call(apply)

    def delay(self, up_ms: float = 0.0, down_ms: float = 0.0) -> None:
        """Each chunk is held `up_ms` toward Redis and `down_ms` back."""

        async def apply() -> None:
            self.rules.up_delay_s, self.rules.down_delay_s = up_ms / 1000, down_ms / 1000

        self._call(apply)

    def drop_reply(self, pattern: bytes, commands: tuple[bytes, ...] = ()) -> None:
        """The next request (on any connection) containing `pattern`, of one of
        `commands` if given (b"FCALL", b"EVALSHA"), reaches Redis; its reply is
        dropped. Call again to drop one more."""

        async def apply() -> None:
            self.rules.drop_patterns.append((pattern, frozenset(c.upper() for c in commands)))

        self._call(apply)

    # --- the loop's side ------------------------------------------------------------

    def _call(self, make: Callable[[], Awaitable[T]]) -> T:
        async def run() -> T:
            return await make()

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(timeout=10)

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _close_all(self) -> None:
        if self._server is not None:
            self._server.close()
        for link in list(self._links):
            link.abort()
        self._links.clear()

    def _reset(self, link: _Link) -> None:
        link.abort()
        if link in self._links:
            self._links.discard(link)
            self.stats.open -= 1
            self.stats.resets += 1

    async def _open_upstream(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if ":" in self.target and not self.target.startswith("/"):
            host, _, port = self.target.rpartition(":")
            return await asyncio.open_connection(host, int(port))
        return await asyncio.open_unix_connection(self.target)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        link = _Link(self, writer)
        self.stats.accepted += 1
        self.stats.accepted_at.append(time.monotonic())
        self.stats.open += 1
        self._links.add(link)
        if time.monotonic() < self.rules.reset_until:
            self._reset(link)
            return
        try:
            up_reader, link.upstream = await self._open_upstream()
        except OSError:
            self._reset(link)
            return
        loop = asyncio.get_running_loop()
        link.tasks = [
            loop.create_task(self._pump(link, reader, link.upstream, up=True)),
            loop.create_task(self._pump(link, up_reader, writer, up=False)),
        ]
        await asyncio.gather(*link.tasks, return_exceptions=True)
        if link in self._links:
            self._links.discard(link)
            self.stats.open -= 1
            link.abort()

    async def _pump(
        self, link: _Link, source: asyncio.StreamReader, sink: asyncio.StreamWriter, *, up: bool
    ) -> None:
        """Copies one direction until EOF, applying the rules chunk by chunk."""
        outbox: asyncio.Queue[tuple[float, bytes] | None] = asyncio.Queue()
        writer = asyncio.get_running_loop().create_task(self._drain(outbox, sink))
        try:
            while data := await source.read(CHUNK_BYTES):
                if link.dead:
                    self.stats.blackholed_bytes += len(data)
                    continue
                if up:
                    link.on_requests(data)
                    self.stats.bytes_up += len(data)
                else:
                    data = link.filter_replies(data)
                    self.stats.bytes_down += len(data)
                delay_s = self.rules.up_delay_s if up else self.rules.down_delay_s
                if data:
                    outbox.put_nowait((time.monotonic() + delay_s, data))
        except OSError:
            pass
        finally:
            outbox.put_nowait(None)
            with contextlib.suppress(asyncio.CancelledError, OSError):
                await writer
            if not link.dead:
                with contextlib.suppress(OSError, RuntimeError):
                    sink.write_eof()

    @staticmethod
    async def _drain(outbox: asyncio.Queue[tuple[float, bytes] | None], sink: Any) -> None:
        while (item := await outbox.get()) is not None:
            due, data = item
            wait_s = due - time.monotonic()
            if wait_s > 0:
                await asyncio.sleep(wait_s)
            sink.write(data)
            await sink.drain()
