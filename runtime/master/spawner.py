"""The master's side of a fork server (runtime.children.forkserver): `Spawner`.

Starting one runs a fresh interpreter that imports the job modules; spawning
hands it the child's ends of a socket pair (messages) and a pipe (stdout and
stderr) and gets back the child's pid. It reports how each child ended.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
import subprocess
import sys
from collections.abc import Callable
from typing import Any

from runtime.errors import ConfigError, Error

log = logging.getLogger(__name__)

MAX_DATAGRAM = 1 << 16
START_TIMEOUT_S = 120.0

ExitCallback = Callable[[int, int | None, int | None], None]  # pid, code, signal


class Spawner:
    def __init__(self, config: dict[str, Any], env: dict[str, str], on_exit: ExitCallback) -> None:
        self.config = config
        self.env = env
        self.on_exit = on_exit
        self.ctl: socket.socket | None = None
        self.process: subprocess.Popen[bytes] | None = None
        self.pending: dict[int, asyncio.Future[int]] = {}
        self.live: set[int] = set()
        self.retiring = False

    @property
    def pid(self) -> int | None:
        return None if self.process is None else self.process.pid

    async def start(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "runtime.children.forkserver", str(theirs.fileno())],
            pass_fds=[theirs.fileno()],
            env=self.env,
            close_fds=True,
        )
        theirs.close()
        self.ctl = ours
        ours.send(json.dumps(self.config).encode())
        loop = asyncio.get_running_loop()
        ours.setblocking(False)
        try:
            reply = await asyncio.wait_for(loop.sock_recv(ours, MAX_DATAGRAM), START_TIMEOUT_S)
        except TimeoutError:
            raise Error("the fork server did not start in time") from None
        message = json.loads(reply) if reply else {"kind": "error", "message": "exited at start"}
        if message["kind"] != "ready":
            self.process.wait(timeout=10)
            raise ConfigError(message["message"])
        loop.add_reader(ours.fileno(), self._readable)

    def _readable(self) -> None:
        assert self.ctl is not None
        try:
            payload = self.ctl.recv(MAX_DATAGRAM)
        except BlockingIOError:
            return
        except OSError:
            payload = b""
        if not payload:
            self._closed()
            return
        message = json.loads(payload)
        if message["kind"] == "spawned":
            self.live.add(message["pid"])
            future = self.pending.pop(message["index"], None)
            if future is not None and not future.done():
                future.set_result(message["pid"])
        elif message["kind"] == "exited":
            self.live.discard(message["pid"])
            self.on_exit(message["pid"], message["code"], message["signal"])
            self._maybe_exit()

    def _closed(self) -> None:
        """The fork server died: its children died with it."""
        if self.ctl is not None:
            asyncio.get_running_loop().remove_reader(self.ctl.fileno())
            self.ctl.close()
            self.ctl = None
        for pid in sorted(self.live):
            self.on_exit(pid, None, 9)
        self.live.clear()
        for future in self.pending.values():
            if not future.done():
                future.set_exception(Error("the fork server exited"))
        self.pending.clear()

    async def spawn(self, index: int) -> tuple[int, socket.socket, int]:
        """Forks a child: (pid, our end of its message socket, the read end of its output)."""
        if self.ctl is None:
            raise Error("the fork server is not running")
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        out_r, out_w = os.pipe()
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self.pending[index] = future
        try:
            socket.send_fds(
                self.ctl,
                [json.dumps({"kind": "spawn", "index": index}).encode()],
                [theirs.fileno(), out_w],
            )
        finally:
            theirs.close()
            os.close(out_w)
        pid = await future
        return pid, ours, out_r

    def retire(self) -> None:
        """Exit once its last child has exited (HUP: a new server took over)."""
        self.retiring = True
        self._maybe_exit()

    def _maybe_exit(self) -> None:
        if self.retiring and not self.live and self.ctl is not None:
            with contextlib.suppress(OSError):
                self.ctl.send(json.dumps({"kind": "exit"}).encode())

    async def stop(self, timeout_s: float = 5.0) -> None:
        self.retire()
        if self.process is None:
            return
        loop = asyncio.get_running_loop()
        try:
            await asyncio.wait_for(loop.run_in_executor(None, self.process.wait), timeout_s)
        except TimeoutError:
            self.process.kill()
            await loop.run_in_executor(None, self.process.wait)
        if self.ctl is not None:
            loop.remove_reader(self.ctl.fileno())
            self.ctl.close()
            self.ctl = None
