"""The master's view of its children: one `ChildHandle` per forked child.

A handle owns our ends of the child's message socket (framed JSON, read and
written without blocking the loop) and of its output pipe, of which only the
tail is kept. Events go to the master through `ChildEvents`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Protocol

from runtime.children import protocol
from runtime.errors import ProtocolError
from runtime.master.reasons import Ending
from runtime.queue.aio import Leased

log = logging.getLogger(__name__)

OUTPUT_TAIL_BYTES = 16 * 1024
PAGE = os.sysconf("SC_PAGE_SIZE")


@dataclass
class Running:
    """A job handed to a child."""

    leased: Leased
    sent_at: float  # monotonic
    last_sign: float  # monotonic: start, or the child's latest heartbeat
    lease_until: float  # monotonic: the lease is known to hold until then
    terminated_at: float | None = None  # SIGTERM sent (timeout)
    withdrawing: bool = False  # pipelined, and asked back (withdraw sent)
    start_at: float | None = None  # leased before its turn: the child starts it then
    renewed: bool = False  # its lease was renewed at least once
    lost: bool = False  # its lease was reported lost
    killed_at: float | None = None  # SIGKILL sent: SIGTERM was ignored for the kill grace


class ChildEvents(Protocol):
    def on_message(self, child: ChildHandle, message: protocol.Message) -> None: ...
    def on_broken(self, child: ChildHandle, error: ProtocolError) -> None: ...


@dataclass
class ChildHandle:
    index: int
    pid: int
    sock: socket.socket
    out_fd: int
    server: object  # the fork server that forked it
    events: ChildEvents
    state: str = "starting"  # starting, idle, busy, stopping, dead
    job: Running | None = None  # the job it runs
    queued: deque[Running] = field(default_factory=deque)  # sent, to run after `job`
    jobs_done: int = 0
    started: float = field(default_factory=time.monotonic)
    kill: Ending | None = None  # why the master killed it, if it did
    output: bytearray = field(default_factory=bytearray)
    frames: protocol.FrameBuffer = field(default_factory=protocol.FrameBuffer)
    outbox: bytearray = field(default_factory=bytearray)
    fork_point: protocol.Ready | None = None

    def attach(self) -> None:
        loop = asyncio.get_running_loop()
        self.sock.setblocking(False)
        os.set_blocking(self.out_fd, False)
        loop.add_reader(self.sock.fileno(), self._on_socket)
        loop.add_reader(self.out_fd, self._on_output)

    def detach(self) -> None:
        loop = asyncio.get_running_loop()
        if self.sock.fileno() >= 0:
            loop.remove_reader(self.sock.fileno())
            loop.remove_writer(self.sock.fileno())
            self.sock.close()
        if self.out_fd >= 0:
            self._on_output()
            loop.remove_reader(self.out_fd)
            os.close(self.out_fd)
            self.out_fd = -1

    # --- reading ----------------------------------------------------------------

    def _on_socket(self) -> None:
        try:
            data = self.sock.recv(1 << 16)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:  # the child is gone; its exit status comes from the fork server
            asyncio.get_running_loop().remove_reader(self.sock.fileno())
            return
        try:
            messages = self.frames.feed(data)
        except ProtocolError as err:
            asyncio.get_running_loop().remove_reader(self.sock.fileno())
            self.events.on_broken(self, err)
            return
        for message in messages:
            self.events.on_message(self, message)

    def _on_output(self) -> None:
        while True:
            try:
                chunk = os.read(self.out_fd, 1 << 16)
            except BlockingIOError:
                return
            except OSError:
                chunk = b""
            if not chunk:
                asyncio.get_running_loop().remove_reader(self.out_fd)
                return
            self.output += chunk
            if len(self.output) > OUTPUT_TAIL_BYTES:
                del self.output[: len(self.output) - OUTPUT_TAIL_BYTES]

    def output_tail(self, limit: int = 4096) -> str:
        return bytes(self.output[-limit:]).decode("utf-8", "replace")

    # --- writing ----------------------------------------------------------------

    def send(self, message: protocol.Message) -> None:
        self.post(message)
        self._flush()

    def post(self, message: protocol.Message) -> None:
        """Adds a message to the outbox; `flush` writes everything posted at once."""
        if self.state != "dead":
            self.outbox += protocol.encode(message)

    def flush(self) -> None:
        if self.outbox:
            self._flush()

    def holds(self, job: Running) -> bool:
        return job is self.job or any(job is waiting for waiting in self.queued)

    def _flush(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            sent = self.sock.send(self.outbox)
        except BlockingIOError:
            sent = 0
        except OSError:
            self.outbox.clear()
            return
        del self.outbox[:sent]
        if self.outbox:
            loop.add_writer(self.sock.fileno(), self._flush)
        else:
            loop.remove_writer(self.sock.fileno())

    # --- the process ------------------------------------------------------------

    def send_signal(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, sig)

    def kill_for(self, ending: Ending, sig: int = signal.SIGKILL) -> None:
        """Kills the child, remembering why (the first reason wins)."""
        if self.kill is None:
            self.kill = ending
        self.send_signal(sig)

    def rss_bytes(self) -> int:
        try:
            with open(f"/proc/{self.pid}/statm", "rb") as fh:
                return int(fh.read().split()[1]) * PAGE
        except (OSError, ValueError, IndexError):
            return 0
