"""The fork server: a fresh interpreter that imports the job modules once and
forks children on request.

The master starts it (`python -m runtime.children.forkserver FD`) before it
needs any child, so every fork happens in a process with one thread and no
event loop, and imported code is shared copy-on-write. A new fork server (HUP)
means freshly imported code. It talks to its master over a SOCK_SEQPACKET
socket, one message a datagram (runtime.children.control): the master sets it
up, asks it to spawn children (their file descriptors alongside) and to exit;
it says whether it is serving, and which children it spawned and reaped.

It sits in its own process group (a terminal's Ctrl-C reaches only the
master), and reaps its children, reporting how each ended. A child that died
holding a job left its files: the server empties the child's workdir before it
reports the exit, so the next child in that slot (forked after the report)
never sees them. A child killed by the kernel at its hard CPU limit (SIGKILL,
for a job that ignored SIGXCPU or raised its soft limit) is reported with
`signal` SIGXCPU, as one stopped at the soft limit is; `raw_signal` is the
signal that really ended it.

No leftovers: the server is a subreaper and every child leads its own process
group. When a child ends, in any way, the server kills the child's process
group (while the zombie still holds the group's number) and every process
reparented to it that is not one of its live children (daemons a job
double-forked), until none is left; it reaps those too. Processes it had
itself when it became ready (started by the job modules' imports) are spared.
When its master goes (the socket closes, or the parent-death signal SIGTERM
wakes it), it kills every child and all they left behind, then exits.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import os
import select
import signal
import socket
import sys
import time
import traceback
from pathlib import Path

from runtime.children import child, control, protocol, tracing
from runtime.errors import ProtocolError
from runtime.proctitle import set_title
from runtime.sandbox import sandbox
from runtime.sandbox.prctl import PR_SET_CHILD_SUBREAPER, PR_SET_PDEATHSIG, prctl

LAST_SWEEP_S = 5.0  # at exit: the longest wait for killed processes to be reaped
CPU_LIMIT_SLACK_S = 0.05  # CPU time read from /proc is in clock ticks
IGNORED = (
    signal.SIGINT,
    signal.SIGTERM,
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGUSR1,
    signal.SIGUSR2,
    signal.SIGTTIN,
    signal.SIGTTOU,
    signal.SIGWINCH,
)


def _kill(pid: int, *, group: bool = False) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        (os.killpg if group else os.kill)(pid, signal.SIGKILL)


class ForkServer:
    def __init__(self, ctl: socket.socket, setup: control.Setup, master: int) -> None:
        self.ctl = ctl
        self.setup = setup
        self.master = master
        self.children: dict[int, Path] = {}  # pid -> its workdir
        self.own = set(sandbox.children_of(os.getpid()))  # started by imports: spared
        self.exiting = False
        self.wake_r, self.wake_w = os.pipe()

    def _fork_point(self) -> protocol.Ready:
        threads = len(os.listdir("/proc/self/task"))
        loop_running = asyncio._get_running_loop() is not None
        return protocol.Ready(os.getpid(), os.getpid(), threads, loop_running)

    def spawn(self, index: int, sock_fd: int, out_fd: int) -> int:
        fork_point = self._fork_point()
        oom_score_adj = sandbox.oom_score_adj_for_children(self.master)
        pid = os.fork()
        if pid == 0:  # the child: never returns into the server's code
            code = 70
            try:
                os.setpgid(0, 0)  # its own group: killed whole when it ends
                code = self._become_child(index, sock_fd, out_fd, fork_point, oom_score_adj)
            except SystemExit as done:  # sys.exit() in a job ends the child with its code
                code = done.code if isinstance(done.code, int) else int(done.code is not None)
            except BaseException:  # noqa: BLE001 - the outermost point of the child process
                traceback.print_exc()
            finally:
                os._exit(code)
        with contextlib.suppress(OSError):  # also here: whichever of us comes first
            os.setpgid(pid, pid)
        os.close(sock_fd)
        os.close(out_fd)
        self.children[pid] = self._workdir(index)
        return pid

    def _workdir(self, index: int) -> Path:
        return Path(self.setup.sandbox_root) / str(index)

    def _become_child(
        self, index: int, sock_fd: int, out_fd: int, fork_point: protocol.Ready, oom: int
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
        setup = self.setup
        settings = child.Settings(
            index=index,
            modules=setup.modules,
            workdir=self._workdir(index),
            worker=setup.worker,
            sentry_dsn=setup.sentry_dsn,
            log_level=setup.log_level,
            namespace=setup.namespace,
            shards=setup.shards,
            otel=setup.otel,
            otel_file=setup.otel_file,
        )
        limits = sandbox.Limits(setup.address_space_mib, setup.open_files, setup.processes)
        spec = sandbox.Spec(
            workdir=settings.workdir,
            limits=limits,
            user=setup.user,
            group=setup.group,
            oom_score_adj=oom,
        )
        return child.main(socket.socket(fileno=sock_fd), settings, spec, fork_point)

    def reap(self) -> bool:
        """Reaps every process of ours that ended; False once we have none left.
        A job child's end is reported after its process group is killed; any
        other process of ours is something a job left behind: swept."""
        while True:
            try:
                ended = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                self.children.clear()
                return False
            if ended is None:
                return True
            if ended.si_pid in self.children:
                self._ended(ended.si_pid)
            else:
                self.own.discard(ended.si_pid)  # its number may come back as an orphan's
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(ended.si_pid, 0)
            self.sweep()

    def _ended(self, pid: int) -> None:
        """A job child is a zombie: its pid still names its process group."""
        _kill(pid, group=True)
        at_cpu_limit = self._at_cpu_hard_limit(pid)
        _, status = os.waitpid(pid, 0)
        workdir = self.children.pop(pid)  # already empty unless it died holding a job
        with contextlib.suppress(OSError):
            sandbox.empty(workdir, create=False)
        code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else None
        raw = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
        sig = signal.SIGXCPU if raw == signal.SIGKILL and at_cpu_limit else raw
        with contextlib.suppress(OSError):  # the master may be gone
            control.send(self.ctl, control.Reaped(pid, code, sig, raw))

    @staticmethod
    def _at_cpu_hard_limit(pid: int) -> bool:
        """Whether a (zombie) child had used its CPU budget: past its hard limit less
        the grace the sandbox gives after SIGXCPU (the kernel's SIGKILL comes at a
        tick, and /proc counts a little less than the kernel's limit check does)."""
        hard = sandbox.cpu_hard_limit_of(pid)
        used = sandbox.cpu_seconds_of(pid)
        if hard is None or used is None:
            return False
        return used >= hard - sandbox.CPU_GRACE_S - CPU_LIMIT_SLACK_S

    def sweep(self) -> None:
        """Kills every process of ours that is neither a live job child nor our own:
        what jobs left behind, reparented to us when their child died."""
        for pid in sandbox.children_of(os.getpid()):
            if pid not in self.children and pid not in self.own:
                _kill(pid)

    def end(self) -> int:
        """Kills every child and everything they left, reaps them all; returns 0."""
        for pid in list(self.children):
            _kill(pid)
        deadline = time.monotonic() + LAST_SWEEP_S
        self.sweep()
        while self.reap() and time.monotonic() < deadline:
            self.sweep()
            if all(pid in self.own for pid in sandbox.children_of(os.getpid())):
                break
            select.select([self.wake_r], [], [], 0.05)
            with contextlib.suppress(BlockingIOError):
                os.read(self.wake_r, 4096)
        return 0

    def handle(self, payload: bytes, fds: list[int]) -> None:
        """One datagram of the master's. What is not a spawn it can do now (a bad
        message, one after `exit`) is dropped with its file descriptors."""
        try:
            message = control.unpack(payload)
        except ProtocolError as err:
            sys.stderr.write(f"fork server: a bad message from the master: {err}\n")
            message = None
        match message:
            case control.Spawn(index=index) if len(fds) == 2 and not self.exiting:
                pid = self.spawn(index, fds[0], fds[1])
                control.send(self.ctl, control.Spawned(index, pid))
                return
            case control.Exit():
                self.exiting = True
        for fd in fds:
            os.close(fd)

    def serve(self) -> int:
        os.set_blocking(self.wake_r, False)
        os.set_blocking(self.wake_w, False)
        signal.set_wakeup_fd(self.wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.signal(signal.SIGTERM, lambda *_: None)  # wakes us: is the master gone?
        prctl(PR_SET_PDEATHSIG, signal.SIGTERM)  # from now on: we clean up, then exit
        while not (self.exiting and not self.children):
            if os.getppid() != self.master:
                return self.end()
            readable, _, _ = select.select([self.ctl.fileno(), self.wake_r], [], [])
            if self.wake_r in readable:
                with contextlib.suppress(BlockingIOError):
                    os.read(self.wake_r, 4096)
            self.reap()
            if self.ctl.fileno() in readable:
                payload, fds, _, _ = socket.recv_fds(self.ctl, control.MAX_DATAGRAM, 4)
                if not payload:  # the master is gone: so are its children
                    return self.end()
                self.handle(payload, fds)
        return self.end()


def main(argv: list[str]) -> int:
    ctl = socket.socket(fileno=int(argv[1]))
    master = os.getppid()
    os.setpgid(0, 0)
    prctl(PR_SET_CHILD_SUBREAPER, 1)  # orphans of the jobs' processes come to us
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # while importing: nothing to clean up yet
    if os.getppid() != master:
        return 1
    for sig in IGNORED:
        signal.signal(sig, signal.SIG_IGN)
    setup = _setup(ctl)
    if setup is None:
        return 1
    if setup.sys_path:
        sys.path[:] = setup.sys_path
    set_title(f"runtime fork-server for {setup.worker} ({' '.join(setup.modules)})")
    try:
        for module in setup.modules:
            importlib.import_module(module)
    except BaseException as err:  # noqa: BLE001 - any failure to import is the master's to report
        control.send(ctl, control.NotServing(f"cannot import {module}: {err!r}"))
        return 1
    if setup.otel:
        try:
            tracing.preload()
        except ImportError as err:
            message = f"tracing needs the otel extra (pip install 'runtime-worker[otel]'): {err}"
            control.send(ctl, control.NotServing(message))
            return 1
    control.send(ctl, control.Serving(os.getpid()))
    return ForkServer(ctl, setup, master).serve()


def _setup(ctl: socket.socket) -> control.Setup | None:
    """The master's first message, its setup; None (and the master told) if it is not."""
    try:
        message = control.unpack(ctl.recv(control.MAX_DATAGRAM))
    except ProtocolError as err:
        problem = f"a bad setup: {err}"
    else:
        if isinstance(message, control.Setup):
            return message
        problem = f"{message.kind} came before the setup"
    with contextlib.suppress(OSError):  # the master may be gone
        control.send(ctl, control.NotServing(problem))
    return None


if __name__ == "__main__":
    sys.exit(main(sys.argv))
