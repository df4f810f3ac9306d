"""The master's side of a fork server (runtime.children.forkserver): `Spawner`.

Starting one runs a fresh interpreter that imports the job modules; spawning
hands it the child's ends of a socket pair (messages) and a pipe (stdout and
stderr) and gets back the child's pid. It reports how each child ended.

The fork server is the master's own child: it is reaped the moment it exits
(a pidfd on the master's loop; where there is none, once its socket closes),
whether it was retired (HUP), stopped, or died by itself, and its end is
reported (`on_gone`). One that fails to start
is killed and reaped before the error is raised.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import subprocess
import sys
from collections.abc import Callable

from runtime.children import control
from runtime.errors import ConfigError, Error, ProtocolError

log = logging.getLogger(__name__)

START_TIMEOUT_S = 120.0
POLL_EXIT_S = 0.05  # without a pidfd: how often an exit the socket announced is polled

ExitCallback = Callable[[int, int | None, int | None], None]  # pid, code, signal
GoneCallback = Callable[["Spawner", int], None]  # the server, its Popen returncode


class Spawner:
    def __init__(
        self,
        setup: control.Setup,
        env: dict[str, str],
        on_exit: ExitCallback,
        on_gone: GoneCallback | None = None,
    ) -> None:
        self.setup = setup
        self.env = env
        self.on_exit = on_exit
        self.on_gone = on_gone
        self.ctl: socket.socket | None = None
        self.process: subprocess.Popen[bytes] | None = None
        self.pidfd = -1  # readable once the fork server has exited (then reaped)
        self.exited: asyncio.Future[int] | None = None  # its returncode, once reaped
        self.pending: dict[int, asyncio.Future[int]] = {}
        self.live: set[int] = set()
        self.retiring = False

    @property
    def pid(self) -> int | None:
        return None if self.process is None else self.process.pid

    @property
    def gone(self) -> bool:
        """It has exited and was reaped."""
        return self.exited is not None and self.exited.done()

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
        try:
            message = await self._hello(ours)
        except BaseException:  # cancelled, or it did not start: never left behind
            self._abandon()
            raise
        if not isinstance(message, control.Serving):
            self._abandon()
            if isinstance(message, control.NotServing):
                raise ConfigError(message.message)
            raise Error(f"the fork server said {message.kind} before it was serving")
        loop = asyncio.get_running_loop()
        self.exited = loop.create_future()
        try:
            self.pidfd = os.pidfd_open(self.process.pid)
        except OSError:  # no pidfd here (an old kernel, a seccomp filter): see _readable
            self.pidfd = -1
        else:
            loop.add_reader(self.pidfd, self._reap)
        loop.add_reader(ours.fileno(), self._readable)

    async def _hello(self, ours: socket.socket) -> control.Control:
        """Sends the setup; the fork server's first message (serving or not)."""
        control.send(ours, self.setup)
        ours.setblocking(False)
        loop = asyncio.get_running_loop()
        try:
            reply = await asyncio.wait_for(
                loop.sock_recv(ours, control.MAX_DATAGRAM), START_TIMEOUT_S
            )
        except TimeoutError:
            raise Error("the fork server did not start in time") from None
        return control.unpack(reply) if reply else control.NotServing("exited at start")

    def _abandon(self) -> None:
        """A fork server that did not start: killed and reaped (it has no children)."""
        assert self.process is not None
        with contextlib.suppress(OSError):
            self.process.kill()
        self.process.wait()
        if self.ctl is not None:
            self.ctl.close()
            self.ctl = None

    def _reap(self) -> None:
        """The fork server exited: what it said before it went is read, then it is
        reaped and its end reported."""
        assert self.process is not None and self.exited is not None
        if self.exited.done():
            return
        code = self.process.poll()
        loop = asyncio.get_running_loop()
        if code is None:  # not yet: asked again when the pidfd is readable, or soon
            if self.pidfd < 0:
                loop.call_later(POLL_EXIT_S, self._reap)
            return
        if self.pidfd >= 0:
            loop.remove_reader(self.pidfd)
            os.close(self.pidfd)
            self.pidfd = -1
        while self.ctl is not None and self._take():  # its last messages, then its end
            pass
        if self.ctl is not None:
            self._closed()
        self.exited.set_result(code)
        if self.on_gone is not None:
            self.on_gone(self, code)

    def _readable(self) -> None:
        self._take()
        if self.ctl is None and self.pidfd < 0 and not self.gone:
            self._reap()  # without a pidfd, the socket's end says it exited

    def _take(self) -> bool:
        """Takes one message off the control socket; False when none is there now,
        or the socket closed (the fork server is gone)."""
        assert self.ctl is not None
        try:
            payload = self.ctl.recv(control.MAX_DATAGRAM)
        except BlockingIOError:
            return False
        except OSError:
            payload = b""
        if not payload:
            self._closed()
            return False
        try:
            message = control.unpack(payload)
        except ProtocolError as err:  # a bug of ours: said, and the message dropped
            log.error("fork server pid=%s sent a bad message: %s", self.pid, err)
            return True
        match message:
            case control.Spawned(index=index, pid=pid):
                self.live.add(pid)
                future = self.pending.pop(index, None)
                if future is not None and not future.done():
                    future.set_result(pid)
            case control.Reaped(pid=pid, code=code, signal=sig):
                self.live.discard(pid)
                self.on_exit(pid, code, sig)
                self._maybe_exit()
            case _:
                log.error("fork server pid=%s sent %s after it started", self.pid, message.kind)
        return True

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
            try:
                control.send(self.ctl, control.Spawn(index), [theirs.fileno(), out_w])
            finally:
                theirs.close()
                os.close(out_w)
            pid = await future
        except BaseException:  # no child: our ends go too
            if self.pending.get(index) is future:
                del self.pending[index]
            ours.close()
            os.close(out_r)
            raise
        return pid, ours, out_r

    def retire(self) -> None:
        """Exit once its last child has exited (HUP: a new server took over)."""
        self.retiring = True
        self._maybe_exit()

    def _maybe_exit(self) -> None:
        if self.retiring and not self.live and self.ctl is not None:
            with contextlib.suppress(OSError):
                control.send(self.ctl, control.Exit())

    async def stop(self, timeout_s: float = 5.0) -> None:
        """Asks it to exit once its children have; kills it after `timeout_s`.
        Returns once it is reaped."""
        self.retire()
        if self.process is None or self.exited is None:
            return
        try:
            await asyncio.wait_for(asyncio.shield(self.exited), timeout_s)
        except TimeoutError:
            with contextlib.suppress(OSError):
                self.process.kill()
            await self.exited
