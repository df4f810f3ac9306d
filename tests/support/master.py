"""Real masters as subprocesses, for the integration tests."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

from runtime.queue.embedded import ServerProcess
from tests.support.waiting import wait_for

REPO = Path(__file__).resolve().parents[2]


class MasterProcess:
    def __init__(
        self,
        server: ServerProcess,
        namespace: str,
        workdir: Path,
        queues: str,
        *args: str,
        modules: tuple[str, ...] = ("tests.integration.jobs",),
        env: dict[str, str] | None = None,
        url: str | None = None,
    ) -> None:
        self.server = server
        self.url = url or server.url  # e.g. a fault proxy's in front of the server
        self.namespace = namespace
        self.workdir = workdir
        self.argv = [sys.executable, "-m", "runtime", "worker", *modules, "--queues", queues, *args]
        self.extra_env = env or {}
        self.log_path = workdir / f"master-{uuid.uuid4().hex[:6]}.log"
        self.notify_path = workdir / f"notify-{uuid.uuid4().hex[:6]}.sock"
        self.proc: subprocess.Popen[bytes] | None = None
        self.messages: list[str] = []
        self.notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.notify.bind(str(self.notify_path))
        self.notify.setblocking(False)

    def start(self, ready: bool = True) -> MasterProcess:
        env = {
            **os.environ,
            "REDIS_URL": self.url,
            "RUNTIME_NAMESPACE": self.namespace,
            "NOTIFY_SOCKET": str(self.notify_path),
            "RUNTIME_STATE_DIR": str(self.workdir),
            **self.extra_env,
        }
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(self.argv, cwd=REPO, env=env, stdout=log, stderr=log)
        if ready:
            self.wait_notified("READY=1")
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def notifications(self) -> list[str]:
        while True:
            try:
                self.messages.append(self.notify.recv(4096).decode())
            except BlockingIOError:
                return self.messages

    def wait_notified(self, text: str, timeout_s: float = 30.0) -> None:
        def seen() -> bool:
            if any(text in m for m in self.notifications()):
                return True
            if self.proc is not None and self.proc.poll() is not None:
                raise AssertionError(f"master exited {self.proc.returncode}: {self.log()[-3000:]}")
            return False

        wait_for(seen, timeout_s, what=f"{text} from the master")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def send(self, sig: int) -> None:
        os.kill(self.pid, sig)

    def wait(self, timeout_s: float = 30.0) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout=timeout_s)

    def fork_server_pid(self) -> int | None:
        for pid in _children_of(self.pid):
            try:  # a fork server replaced (HUP) may be reaped after it was listed
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if b"fork-server" in cmdline:
                return pid
        return None

    def children(self) -> list[int]:
        """The pids of the job children (the fork server's children)."""
        server = self.fork_server_pid()
        return [] if server is None else _children_of(server)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGCONT)
            self.kill()
        self.notify.close()


def _children_of(parent: int) -> list[int]:
    kids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_bytes()
            except OSError:
                continue
            fields = stat[stat.rfind(b")") + 2 :].split()
            if int(fields[1]) == parent and fields[0] != b"Z":
                kids.append(int(entry))
    return kids


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2 :].split()[0] != b"Z"


def wait_gone(pid: int, timeout_s: float = 10.0) -> None:
    wait_for(lambda: not alive(pid), timeout_s, what=f"pid {pid} to exit")


def now() -> float:
    return time.time()
