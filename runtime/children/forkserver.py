"""The fork server: a fresh interpreter that imports the job modules once and
forks children on request.

The master starts it (`python -m runtime.children.forkserver FD`) before it
needs any child, so every fork happens in a process with one thread and no
event loop, and imported code is shared copy-on-write. A new fork server (HUP)
means freshly imported code. It talks to its master over a SOCK_SEQPACKET
socket: JSON datagrams, with file descriptors passed alongside.

    master -> server   config, spawn {index} + [child socket, output pipe], exit
    server -> master   ready {pid} | error {message}, spawned {index, pid},
                       exited {pid, code, signal}

It sits in its own process group (a terminal's Ctrl-C reaches only the
master), dies with its master (parent-death signal), and reaps its children,
reporting how each ended. A child that died holding a job left its files: the
server empties the child's workdir before it reports the exit, so the next
child in that slot (forked after the report) never sees them.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import os
import select
import signal
import socket
import sys
import traceback
from pathlib import Path
from typing import Any

from runtime.children import child, protocol
from runtime.proctitle import set_title
from runtime.sandbox import sandbox
from runtime.sandbox.prctl import PR_SET_PDEATHSIG, prctl

MAX_DATAGRAM = 1 << 16
IGNORED = (
    signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1,
    signal.SIGUSR2, signal.SIGTTIN, signal.SIGTTOU, signal.SIGWINCH,
)  # fmt: skip


def send(ctl: socket.socket, message: dict[str, Any], fds: list[int] | None = None) -> None:
    payload = json.dumps(message).encode()
    if fds:
        socket.send_fds(ctl, [payload], fds)
    else:
        ctl.send(payload)


class ForkServer:
    def __init__(self, ctl: socket.socket, config: dict[str, Any]) -> None:
        self.ctl = ctl
        self.config = config
        self.children: dict[int, Path] = {}  # pid -> its workdir
        self.exiting = False
        self.wake_r, self.wake_w = os.pipe()

    def _fork_point(self) -> protocol.Ready:
        threads = len(os.listdir("/proc/self/task"))
        loop_running = asyncio._get_running_loop() is not None
        return protocol.Ready(os.getpid(), os.getpid(), threads, loop_running)

    def spawn(self, index: int, sock_fd: int, out_fd: int) -> int:
        fork_point = self._fork_point()
        pid = os.fork()
        if pid == 0:  # the child: never returns into the server's code
            code = 70
            try:
                code = self._become_child(index, sock_fd, out_fd, fork_point)
            except SystemExit as done:  # sys.exit() in a job ends the child with its code
                code = done.code if isinstance(done.code, int) else int(done.code is not None)
            except BaseException:  # noqa: BLE001 - the outermost point of the child process
                traceback.print_exc()
            finally:
                os._exit(code)
        os.close(sock_fd)
        os.close(out_fd)
        self.children[pid] = self._workdir(index)
        return pid

    def _workdir(self, index: int) -> Path:
        return Path(self.config["sandbox_root"]) / str(index)

    def _become_child(
        self, index: int, sock_fd: int, out_fd: int, fork_point: protocol.Ready
    ) -> int:
        signal.set_wakeup_fd(-1)
        for sig in (*IGNORED, signal.SIGCHLD):
            signal.signal(sig, signal.SIG_DFL)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(out_fd, 1)
        os.dup2(out_fd, 2)
        os.set_inheritable(sock_fd, False)
        sandbox.keep_only_fds({0, 1, 2, sock_fd})
        cfg = self.config
        settings = child.Settings(
            index=index,
            modules=tuple(cfg["modules"]),
            workdir=self._workdir(index),
            worker=cfg["worker"],
            sentry_dsn=cfg.get("sentry_dsn"),
        )
        spec = sandbox.Spec(
            workdir=settings.workdir,
            limits=sandbox.Limits(**cfg.get("limits", {})),
            user=cfg.get("user"),
            group=cfg.get("group"),
        )
        return child.main(socket.socket(fileno=sock_fd), settings, spec, fork_point)

    def reap(self) -> None:
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                self.children.clear()
                return
            if pid == 0:
                return
            workdir = self.children.pop(pid, None)
            if workdir is not None:  # already empty unless it died holding a job
                with contextlib.suppress(OSError):
                    sandbox.empty(workdir, create=False)
            code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else None
            sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
            send(self.ctl, {"kind": "exited", "pid": pid, "code": code, "signal": sig})

    def handle(self, message: dict[str, Any], fds: list[int]) -> None:
        kind = message.get("kind")
        if kind == "spawn" and len(fds) == 2 and not self.exiting:
            pid = self.spawn(int(message["index"]), fds[0], fds[1])
            send(self.ctl, {"kind": "spawned", "index": message["index"], "pid": pid})
        elif kind == "exit":
            self.exiting = True
        else:
            for fd in fds:
                os.close(fd)

    def serve(self) -> int:
        os.set_blocking(self.wake_w, False)
        signal.set_wakeup_fd(self.wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        while not (self.exiting and not self.children):
            readable, _, _ = select.select([self.ctl.fileno(), self.wake_r], [], [])
            if self.wake_r in readable:
                os.read(self.wake_r, 4096)
            self.reap()
            if self.ctl.fileno() in readable:
                payload, fds, _, _ = socket.recv_fds(self.ctl, MAX_DATAGRAM, 4)
                if not payload:  # the master is gone: so are its children
                    for pid in self.children:
                        os.kill(pid, signal.SIGKILL)
                    return 0
                self.handle(json.loads(payload), fds)
        return 0


def main(argv: list[str]) -> int:
    ctl = socket.socket(fileno=int(argv[1]))
    master = os.getppid()
    os.setpgid(0, 0)
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != master:
        return 1
    for sig in IGNORED:
        signal.signal(sig, signal.SIG_IGN)
    config: dict[str, Any] = json.loads(ctl.recv(MAX_DATAGRAM))
    sys.path[:] = config.get("sys_path", sys.path)
    set_title(f"runtime fork-server for {config['worker']} ({' '.join(config['modules'])})")
    try:
        for module in config["modules"]:
            importlib.import_module(module)
    except BaseException as err:  # noqa: BLE001 - any failure to import is the master's to report
        send(ctl, {"kind": "error", "message": f"cannot import {module}: {err!r}"})
        return 1
    send(ctl, {"kind": "ready", "pid": os.getpid()})
    return ForkServer(ctl, config).serve()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
