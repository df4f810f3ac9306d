"""The master's processes: its fork servers and the children they fork, with our
ends of each child's message socket and output pipe.

This is I/O only. It carries out the book's Spawn, Post and Kill actions and
puts what happens on the master's event queue: a child forked, a message from
a child, a broken or incomplete frame, a child's exit (with the tail of its
output, to explain a crash). It decides nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import shutil
import signal
import socket
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from runtime import config
from runtime.children import control, protocol, tracing
from runtime.errors import Error, ProtocolError
from runtime.master import events
from runtime.master.output import Output
from runtime.master.spawner import Spawner
from runtime.sandbox import sandbox

log = logging.getLogger(__name__)

READ_MAX_BYTES = 1 << 20  # read of a child's output per callback
DRAIN_MAX_BYTES = 4 << 20  # read at once when a job's outcome comes
READ_CHUNK = 1 << 16  # one read of the pipe (its default capacity)
FRAME_TIMEOUT_S = 2.0  # a frame whose bytes do not all arrive within this is a protocol error
PAGE = os.sysconf("SC_PAGE_SIZE")

LIVE_EVERY_S = 0.25  # a running job's printed lines go live in batches this far apart
PASS_WITHIN_S = 0.0005  # a pass may wait this long for company after a child's outcome


class Post(Protocol):
    """The master's `post`: an event for the loop, to be applied within `within_s`."""

    def __call__(self, event: events.Event, within_s: float = 0.0) -> None: ...


@dataclass
class ChildHandle:
    """Our ends of one child's socket (framed JSON) and output pipe."""

    index: int
    pid: int
    sock: socket.socket
    out_fd: int
    post: Post
    server: Spawner
    output: Output
    frames: protocol.FrameBuffer = field(default_factory=protocol.FrameBuffer)
    outbox: bytearray = field(default_factory=bytearray)
    partial_since: float | None = None  # monotonic: an incomplete frame began arriving
    broken: bool = False
    measure_rss: bool = False  # --max-memory-per-child: memory read as each job ends
    writing: bool = False  # a writer waits for the socket (the outbox did not fit)
    live_timer: asyncio.TimerHandle | None = None  # the running job's next live batch
    loop: asyncio.AbstractEventLoop = field(init=False)  # the master's, from attach()

    def attach(self) -> None:
        self.loop = loop = asyncio.get_running_loop()
        self.sock.setblocking(False)
        os.set_blocking(self.out_fd, False)
        loop.add_reader(self.sock.fileno(), self._on_socket)
        loop.add_reader(self.out_fd, self._on_output)

    def detach(self) -> None:
        loop = asyncio.get_running_loop()
        if self.live_timer is not None:
            self.live_timer.cancel()
            self.live_timer = None
        if self.sock.fileno() >= 0:
            loop.remove_reader(self.sock.fileno())
            loop.remove_writer(self.sock.fileno())
            self.sock.close()
        if self.out_fd >= 0:
            self._on_output()
            loop.remove_reader(self.out_fd)
            os.close(self.out_fd)
            self.out_fd = -1

    def _on_socket(self) -> None:
        try:
            data = self.sock.recv(1 << 16)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:  # the child is gone; its exit status comes from the fork server
            self.loop.remove_reader(self.sock.fileno())
            return
        try:
            messages = self.frames.feed(data)
        except ProtocolError as err:
            self._broke(str(err))
            return
        self.partial_since = (
            (self.partial_since or self.loop.time()) if self.frames.buffer else None
        )
        for message in messages:
            if isinstance(message, protocol.Done | protocol.Failed):
                # the job's end marker went on the pipe before this: read up to it
                if message.jid not in self.output.ended:
                    self._on_output(DRAIN_MAX_BYTES)
                rss = self.rss_bytes() if self.measure_rss else None
                tail = self.output.ended_tail(message.jid)
                # a child with a job queued behind its next one is not waiting for us:
                # its outcome may wait a little for others' and go in the same pass
                within_s = PASS_WITHIN_S if len(self.output.jobs) >= 2 else 0.0
                self.post(events.ChildSaid(self.index, self.pid, message, tail, rss), within_s)
            else:
                self.post(events.ChildSaid(self.index, self.pid, message))

    def _broke(self, error: str) -> None:
        if not self.broken:
            self.broken = True
            asyncio.get_running_loop().remove_reader(self.sock.fileno())
            self.post(events.ChildBroke(self.index, self.pid, error))

    def check_frame(self, now: float) -> None:
        """An incomplete frame that stalls is a protocol error (the child is killed)."""
        if self.partial_since is not None and now - self.partial_since > FRAME_TIMEOUT_S:
            missing = len(self.frames.buffer)
            self._broke(
                f"incomplete frame: {missing} bytes came, the rest not in {FRAME_TIMEOUT_S:g} s"
            )

    def _on_output(self, most: int = READ_MAX_BYTES) -> None:
        """Reads what the child printed (at most `most` bytes a call: a chatty job
        must not hold up the loop)."""
        loop = self.loop
        taken = 0
        while taken < most:
            try:
                chunk = os.read(self.out_fd, READ_CHUNK)
            except BlockingIOError:
                return
            except OSError:
                chunk = b""
            if not chunk:
                loop.remove_reader(self.out_fd)
                return
            taken += len(chunk)
            self.output.feed(chunk, loop.time())
            if (self.output.live or self.output.live_dropped) and self.live_timer is None:
                # on a grid shared by every child: their batches go in one pass,
                # so in one exchange (at most 1 / LIVE_EVERY_S more a second)
                tick = (math.floor(loop.time() / LIVE_EVERY_S) + 1) * LIVE_EVERY_S
                self.live_timer = loop.call_at(tick, self._send_live)
            if len(chunk) < READ_CHUNK:  # the pipe is empty now: no read to learn it
                return

    def _send_live(self) -> None:
        """The running job's lines since the last batch go to the book (then with
        the next exchange to Redis): a few batches a second, never one per line."""
        self.live_timer = None
        taken = self.output.take_live(self.loop.time())
        if taken is not None:
            self.post(events.ChildPrinted(self.index, self.pid, *taken))

    def tail(self, limit: int = 4096) -> str:
        return self.output.tail_text(limit)

    def queue(self, message: protocol.Message) -> None:
        if isinstance(message, protocol.Run):
            self.output.sent(message.jid, message.klass)
        self.outbox += protocol.encode(message)

    def flush(self) -> None:
        if not self.outbox or self.sock.fileno() < 0:
            return
        loop = self.loop
        try:
            sent = self.sock.send(self.outbox)
        except BlockingIOError:
            sent = 0
        except OSError:
            self.outbox.clear()
            return
        del self.outbox[:sent]
        if self.outbox:
            loop.add_writer(self.sock.fileno(), self.flush)
            self.writing = True
        elif self.writing:  # nearly always sent whole: no writer to take off
            loop.remove_writer(self.sock.fileno())
            self.writing = False

    def rss_bytes(self) -> int:
        try:
            with open(f"/proc/{self.pid}/statm", "rb") as fh:
                return int(fh.read().split()[1]) * PAGE
        except (OSError, ValueError, IndexError):
            return 0


class Processes:
    def __init__(
        self, settings: config.Settings, worker: config.WorkerSettings, worker_id: str, post: Post
    ) -> None:
        self.settings = settings
        self.worker = worker
        self.worker_id = worker_id
        self.post = post
        self.handles: dict[int, ChildHandle] = {}  # by pid
        self.by_index: dict[int, ChildHandle] = {}
        self.server: Spawner | None = None
        self.retired: list[Spawner] = []  # replaced, exiting once their children have
        self.closing = False
        self.generation = 0
        self.dirty: set[int] = set()  # indexes with posts not yet written

    @property
    def sandbox_root(self) -> Path:
        """This worker's sandboxes: one workdir per child slot, removed at exit."""
        root = self.worker.sandbox_dir or (self.settings.state_dir / "sandboxes")
        return root / self.worker_id

    def _server_setup(self) -> control.Setup:
        w = self.worker
        return control.Setup(
            worker=self.worker_id,
            modules=tuple(w.modules),
            sandbox_root=str(self.sandbox_root),
            sys_path=tuple(sys.path),
            address_space_mib=w.address_space_mib,
            open_files=w.open_files,
            processes=w.max_processes,
            user=w.user,
            group=w.group,
            sentry_dsn=self.settings.sentry_dsn,
            log_level=w.log_level,
            namespace=self.settings.namespace,
            shards=self.settings.shards,
            otel=tracing.wanted(w.otel, str(w.otel_file or ""), os.environ),
            otel_file=str(w.otel_file) if w.otel_file else None,
        )

    async def _start_server(self) -> Spawner:
        env = sandbox.clean_environment(os.environ, self.worker.env)
        server = Spawner(self._server_setup(), env, self._on_exit, self._on_server_gone)
        await server.start()
        return server

    async def start(self) -> None:
        self.server = await self._start_server()

    async def replace(self) -> int:
        """HUP, or the fork server died: a new one (fresh imports); returns its
        generation. The old one exits once its last child has (reaped then)."""
        server = await self._start_server()
        old, self.server = self.server, server
        if old is not None and not old.gone:
            self.retired.append(old)
            old.retire()
        self.generation += 1
        return self.generation

    def _on_server_gone(self, server: Spawner, returncode: int) -> None:
        """A fork server exited and was reaped: a retired one is forgotten; the
        current one died (its children with it), which the loop hears of."""
        if server in self.retired:
            self.retired.remove(server)
            log.debug("fork server exited pid=%s worker=%s", server.pid, self.worker_id)
        elif server is self.server and not self.closing:
            code, sig = (None, -returncode) if returncode < 0 else (returncode, None)
            self.post(events.ServerExited(server.pid or 0, code, sig))

    async def spawn(self, index: int) -> None:
        """Forks the child of slot `index`; says so (or why not) on the event queue."""
        try:
            if self.server is None:
                raise Error("no fork server")
            pid, sock, out_fd = await self.server.spawn(index)
        except (Error, OSError) as err:
            self.post(events.SpawnFailed(index, str(err)))
            return
        output = Output(index, self.worker_id)
        handle = ChildHandle(index, pid, sock, out_fd, self.post, self.server, output)
        handle.measure_rss = bool(self.worker.max_memory_per_child_mib)
        self.handles[pid] = handle
        self.by_index[index] = handle
        handle.attach()
        self.post(events.ChildSpawned(index, pid))

    def send(self, index: int, message: protocol.Message) -> None:
        handle = self.by_index.get(index)
        if handle is not None:
            handle.queue(message)
            self.dirty.add(index)

    def flush(self) -> None:
        for index in self.dirty:
            handle = self.by_index.get(index)
            if handle is not None:
                handle.flush()
        self.dirty.clear()

    def kill(self, index: int, sig: int) -> None:
        handle = self.by_index.get(index)
        if handle is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(handle.pid, sig)

    def rss(self, wanted: list[tuple[int, int]]) -> dict[int, int]:
        return {i: h.rss_bytes() for i, pid in wanted if (h := self.handles.get(pid))}

    def check_frames(self, now: float) -> None:
        for handle in self.handles.values():
            if handle.partial_since is not None:  # every pass: no call for the others
                handle.check_frame(now)

    def _on_exit(self, pid: int, code: int | None, sig: int | None) -> None:
        handle = self.handles.pop(pid, None)
        if handle is None:
            return
        handle.detach()
        handle.output.summarise()
        if self.by_index.get(handle.index) is handle:
            del self.by_index[handle.index]
        self.post(events.ChildExited(handle.index, pid, code, sig, handle.tail()))

    async def close(self, timeout_s: float = 2.0) -> None:
        """Stops every child (killing those that do not go in time) and fork server."""
        self.closing = True
        for handle in list(self.handles.values()):
            handle.queue(protocol.Stop())
            handle.flush()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while self.handles and loop.time() < deadline:
            await asyncio.sleep(0.02)
        for handle in list(self.handles.values()):
            with contextlib.suppress(ProcessLookupError):
                os.kill(handle.pid, signal.SIGKILL)
        for server in [*self.retired, self.server]:
            if server is not None:
                with contextlib.suppress(Error):
                    await server.stop(timeout_s=1.0)
        # every fork server has exited, so every child is dead (parent-death signal)
        await asyncio.to_thread(shutil.rmtree, self.sandbox_root, ignore_errors=True)
