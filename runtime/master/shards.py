"""One `runtime worker` over the queues of several namespaces (a sharded site,
runtime.queue.shards): one master process per namespace, forked before any
event loop or Redis connection exists, under a small supervisor.

Each master is the ordinary one (its own book, Redis link, fork server and
children) serving the worker's queues of its namespace, with the worker's
settings otherwise; its worker id is the given id plus `.namespace` (or its
own hostname-pid). The supervisor only:

* forwards every signal a master acts on (TERM, INT, QUIT, USR1, USR2, CONT,
  HUP, TTIN, TTOU) to all of them; the handlers record the signal, the loop
  forwards it;
* tells systemd READY=1 (NOTIFY_SOCKET) once every master said it was ready;
* once one master exits, tells the others TERM (a site's worker stops as a
  whole), waits for them, and exits with the highest exit code.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import signal
import socket
import tempfile
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from types import FrameType

from runtime import config
from runtime.master.master import SIGNALS
from runtime.master.notify import Notifier
from runtime.queue.shards import Shards

log = logging.getLogger(__name__)

RunOne = Callable[[config.Settings, config.WorkerSettings, "str | None"], int]
TICK_S = 0.1  # the supervisor's loop wakes at least this often


def run_site(
    settings: config.Settings,
    worker: config.WorkerSettings,
    worker_id: str | None,
    run_one: RunOne,
) -> int:
    """Runs the worker's queues: with one master if they live in one namespace,
    else one master per namespace under a supervisor; returns the exit code."""
    groups = Shards.of(settings).split(worker.queues)
    plans = [
        (
            replace(settings, namespace=ns),
            replace(worker, queues=queues),
            None if worker_id is None else f"{worker_id}.{ns}",
        )
        for ns, queues in groups.items()
    ]
    if len(plans) == 1:
        return run_one(*plans[0])
    return Supervisor(plans, run_one).run()


class Supervisor:
    def __init__(
        self,
        plans: list[tuple[config.Settings, config.WorkerSettings, str | None]],
        run_one: RunOne,
    ) -> None:
        self.plans = plans
        self.run_one = run_one
        self.pids: dict[int, str] = {}  # running master pid -> namespace
        self.codes: list[int] = []
        self.pending: list[int] = []  # signals received, to forward
        self.stopping = False
        self.ready: set[int] = set()

    def run(self) -> int:
        with tempfile.TemporaryDirectory(prefix="runtime-site-") as tmp:
            path = str(Path(tmp) / "notify")
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
                sock.bind(path)
                sock.setblocking(False)
                notifier = Notifier()  # ours, from the environment, before the masters'
                for sig in SIGNALS:
                    signal.signal(sig, self._record)
                for plan in self.plans:
                    self._fork(plan, path)
                log.info(
                    "site worker: masters %s",
                    " ".join(f"{ns}={pid}" for pid, ns in self.pids.items()),
                )
                while self.pids:
                    self._pass(sock, notifier)
        return max(self.codes, default=0)

    def _record(self, signum: int, frame: FrameType | None) -> None:
        self.pending.append(signum)

    def _fork(
        self, plan: tuple[config.Settings, config.WorkerSettings, str | None], notify_path: str
    ) -> None:
        settings, worker, worker_id = plan
        pid = os.fork()
        if pid == 0:  # the master of one namespace
            code = 70
            try:
                for sig in SIGNALS:
                    signal.signal(sig, signal.SIG_DFL)
                os.environ["NOTIFY_SOCKET"] = notify_path
                os.environ.pop("WATCHDOG_USEC", None)
                code = self.run_one(settings, worker, worker_id)
            except SystemExit as exit_:
                code = exit_.code if isinstance(exit_.code, int) else 1
            except BaseException:
                log.exception("the master of namespace %s failed", settings.namespace)
            finally:
                os._exit(code)
        self.pids[pid] = settings.namespace

    def _pass(self, sock: socket.socket, notifier: Notifier) -> None:
        """Forwards signals, relays readiness, reaps masters."""
        select.select([sock], [], [], TICK_S)
        while self.pending:
            self._tell_all(self.pending.pop(0))
        while True:
            try:
                message = sock.recv(4096).decode(errors="replace")
            except BlockingIOError:
                break
            fields = dict(line.partition("=")[::2] for line in message.splitlines())
            if fields.get("READY") == "1" and fields.get("MAINPID", "").isdigit():
                self.ready.add(int(fields["MAINPID"]))
                if self.ready >= set(self.pids) and len(self.ready) == len(self.plans):
                    notifier.ready(f"masters of {', '.join(self.pids.values())} ready")
        for pid in list(self.pids):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                namespace = self.pids.pop(pid)
                code = os.waitstatus_to_exitcode(status)
                self.codes.append(code if code >= 0 else 128 - code)
                log.info("the master of namespace %s exited (%d) pid=%d", namespace, code, pid)
                if not self.stopping:
                    self.stopping = True
                    self._tell_all(signal.SIGTERM)

    def _tell_all(self, sig: int) -> None:
        if sig in (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT):
            self.stopping = True
        for pid in self.pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
