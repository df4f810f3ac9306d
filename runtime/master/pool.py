"""The master's children: forked by a fork server, kept at the wanted number,
replaced when they die, retired after their job when asked (recycling, HUP,
fewer children), stopped at shutdown.

The pool knows processes, not jobs: messages about a job and a child that
died holding one go to the master (`PoolEvents`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
import sys
import time
from collections import deque
from pathlib import Path
from typing import Protocol

from runtime import config
from runtime.children import protocol
from runtime.errors import Error, ProtocolError
from runtime.master import reasons
from runtime.master.children import ChildHandle, Running
from runtime.master.forkserver import ForkServer
from runtime.sandbox import sandbox

log = logging.getLogger(__name__)

READY_TIMEOUT_S = 60.0
CRASH_WINDOW_S, CRASHES_BEFORE_PAUSE, CRASH_PAUSE_S = 10.0, 5, 2.0


class PoolEvents(Protocol):
    def on_job_message(self, child: ChildHandle, message: protocol.Message) -> None: ...
    def on_job_ended(self, child: ChildHandle, job: Running, ending: reasons.Ending) -> None: ...
    def on_job_unstarted(self, job: Running) -> None: ...
    def changed(self) -> None: ...


class Pool:
    def __init__(
        self,
        settings: config.Settings,
        worker: config.WorkerSettings,
        worker_id: str,
        events: PoolEvents,
    ) -> None:
        self.settings = settings
        self.worker = worker
        self.worker_id = worker_id
        self.events = events
        self.children: dict[int, ChildHandle] = {}
        self.by_pid: dict[int, ChildHandle] = {}
        self.server: ForkServer | None = None
        self.retired: list[ForkServer] = []
        self.crashes: list[float] = []

    def idle(self) -> list[ChildHandle]:
        return [c for c in self.children.values() if c.state == "idle" and c.job is None]

    def busy(self) -> list[ChildHandle]:
        return [c for c in self.children.values() if c.job is not None]

    def accepting(self) -> list[ChildHandle]:
        """Busy children that may take more jobs into their pipeline (not stopping)."""
        return [c for c in self.children.values() if c.state == "busy" and c.job is not None]

    # --- fork servers -------------------------------------------------------------

    @property
    def sandbox_root(self) -> Path:
        """This worker's sandboxes: one workdir per child slot, removed at exit."""
        root = self.worker.sandbox_dir or (self.settings.state_dir / "sandboxes")
        return root / self.worker_id

    def _server_config(self) -> dict[str, object]:
        w = self.worker
        return {
            "modules": list(w.modules),
            "worker": self.worker_id,
            "sandbox_root": str(self.sandbox_root),
            "sys_path": list(sys.path),
            "sentry_dsn": self.settings.sentry_dsn,
            "user": w.user,
            "group": w.group,
            "limits": {
                "address_space_mib": w.address_space_mib,
                "open_files": w.open_files,
                "processes": w.max_processes,
            },
        }

    async def _start_server(self) -> ForkServer:
        env = sandbox.clean_environment(os.environ)
        server = ForkServer(self._server_config(), env, self._on_exit)
        await server.start()
        return server

    async def start(self, target: int) -> None:
        """Starts the fork server and `target` children; returns when they are ready."""
        self.server = await self._start_server()
        await self.reconcile(target, running=True)
        deadline = time.monotonic() + READY_TIMEOUT_S
        while any(c.state == "starting" for c in self.children.values()):
            if time.monotonic() > deadline:
                raise Error("children did not start in time")
            await asyncio.sleep(0.01)
            await self.reconcile(target, running=True)

    async def replace(self) -> None:
        """HUP: a new fork server (fresh imports); old children leave after their job."""
        try:
            server = await self._start_server()
        except Error as err:
            log.error("HUP: could not start a new fork server, keeping the old one: %s", err)
            return
        old, self.server = self.server, server
        if old is not None:
            self.retired.append(old)
            old.retire()
        for child in list(self.children.values()):
            if child.server is old:
                if child.job is None:
                    self.stop(child)
                else:
                    child.state = "stopping"  # stops once its job is done
        self.events.changed()

    # --- children -----------------------------------------------------------------

    async def _spawn(self, index: int) -> None:
        assert self.server is not None
        pid, sock, out_fd = await self.server.spawn(index)
        child = ChildHandle(index, pid, sock, out_fd, self.server, self)
        self.children[index] = child
        self.by_pid[pid] = child
        child.attach()

    async def reconcile(self, target: int, running: bool) -> None:
        """Moves toward `target` children (none new unless `running`)."""
        if not running:
            for child in self.idle():
                self.stop(child)
            return
        live = [c for c in self.children.values() if c.state != "stopping"]
        for child in sorted(live, key=lambda c: -c.index)[: max(0, len(live) - target)]:
            if child.job is None:
                self.stop(child)
        if len(self.children) < target and self._crash_pause() == 0:
            for index in [i for i in range(target) if i not in self.children]:
                await self._spawn(index)

    def _crash_pause(self) -> float:
        """Seconds to wait before spawning again when children keep dying young."""
        now = time.monotonic()
        self.crashes = [t for t in self.crashes if now - t < CRASH_WINDOW_S]
        if len(self.crashes) < CRASHES_BEFORE_PAUSE:
            return 0.0
        return max(0.0, self.crashes[-1] + CRASH_PAUSE_S - now)

    def stop(self, child: ChildHandle) -> None:
        if child.state in ("idle", "starting", "busy") and child.job is None:
            child.state = "stopping"
            child.send(protocol.Stop())

    def job_over(self, child: ChildHandle, now: float) -> None:
        """A child finished its running job: the next one it holds starts; a child
        due for recycling takes no more and stops once its pipeline is empty."""
        child.jobs_done += 1
        w = self.worker
        recycle = (w.max_jobs_per_child and child.jobs_done >= w.max_jobs_per_child) or (
            w.max_memory_per_child_mib and child.rss_bytes() > w.max_memory_per_child_mib << 20
        )
        if recycle:
            child.state = "stopping"
        self.next_job(child, now)

    def next_job(self, child: ChildHandle, now: float) -> None:
        """The child's next pipelined job becomes its running one (it starts it now)."""
        child.job = child.queued.popleft() if child.queued else None
        if child.job is not None:
            child.job.sent_at = child.job.last_sign = now
            if child.state != "stopping":
                child.state = "busy"
            return
        stopping = child.state == "stopping"
        child.state = "idle"
        if stopping:
            self.stop(child)

    # --- events -------------------------------------------------------------------

    def on_message(self, child: ChildHandle, message: protocol.Message) -> None:
        if isinstance(message, protocol.Ready):
            child.fork_point = message
            if child.state == "starting":
                child.state = "idle"
            log.info("child ready index=%d pid=%d forked by pid=%d threads=%d loop=%s worker=%s",
                     child.index, child.pid, message.parent, message.threads,
                     "running" if message.loop_running else "none", self.worker_id)  # fmt: skip
            self.events.changed()
        elif isinstance(message, protocol.Skipped):
            self.events.on_job_message(child, message)
        elif child.job is None or getattr(message, "jid", None) != child.job.leased.jid:
            log.warning("unexpected %s from child pid=%d", message.kind, child.pid)
        else:
            self.events.on_job_message(child, message)

    def on_broken(self, child: ChildHandle, error: ProtocolError) -> None:
        child.kill_for(
            reasons.Ending("runtime.ProtocolError", f"protocol error from child: {error}")
        )

    def _on_exit(self, pid: int, code: int | None, sig: int | None) -> None:
        child = self.by_pid.pop(pid, None)
        if child is None:
            return
        child.detach()
        child.state = "dead"
        if self.children.get(child.index) is child:
            del self.children[child.index]
        job, child.job = child.job, None
        unstarted, child.queued = list(child.queued), deque()
        if job is not None:
            self.crashes.append(time.monotonic())
            ending = child.kill or reasons.of_exit(code, sig, cpu_limit_s=self.worker.cpu_limit_s)
            self.events.on_job_ended(child, job, ending)
        elif child.kill is None and (code not in (0, None) or sig is not None):
            self.crashes.append(time.monotonic())
            log.warning("idle child died code=%s signal=%s pid=%d output=%r", code, sig, pid,
                        child.output_tail(500))  # fmt: skip
        for waiting in unstarted:  # pipelined behind it: never started
            self.events.on_job_unstarted(waiting)
        self.events.changed()

    # --- the end ------------------------------------------------------------------

    async def close(self, timeout_s: float = 2.0) -> None:
        """Stops every child (killing those that do not go in time) and fork server."""
        for child in list(self.children.values()):
            self.stop(child)
        deadline = time.monotonic() + timeout_s
        while self.children and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        for child in list(self.children.values()):
            child.send_signal(signal.SIGKILL)
        for server in [*self.retired, self.server]:
            if server is not None:
                with contextlib.suppress(Error):
                    await server.stop(timeout_s=1.0)
        # every fork server has exited, so every child is dead (parent-death signal)
        await asyncio.to_thread(shutil.rmtree, self.sandbox_root, ignore_errors=True)
