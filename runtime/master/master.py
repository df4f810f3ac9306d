"""The master: one per worker host process. Leases jobs, runs them in children,
keeps the leases alive, reports every outcome. It never runs user code.

Signal handlers only record an intent; each pass of the loop moves the real
state toward the wanted one:

    TERM, INT  drain: stop leasing, let running jobs finish for the grace
               period, then kill the rest and give their jobs back; exit
    QUIT       finish: stop leasing, let running jobs finish; exit
    USR1       kill the running jobs' children (the jobs are retried)
    USR2       pause leasing            CONT   resume leasing
    HUP        replace every child with a fresh one from a new fork server
               (freshly imported code), each after its current job
    TTIN       one child more           TTOU   one child less
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
import time
from dataclasses import dataclass, field

import redis

from runtime import config, sentry
from runtime.children import protocol
from runtime.errors import Error, ProtocolError
from runtime.master import reasons
from runtime.master.children import ChildHandle, Running
from runtime.master.forkserver import ForkServer
from runtime.master.leasing import Leasing, Pending, safety_margin
from runtime.master.notify import Notifier
from runtime.proctitle import set_title
from runtime.queue.aio import AsyncClient
from runtime.queue.keys import Keys
from runtime.sandbox import sandbox

log = logging.getLogger(__name__)

SIGNALS = {
    signal.SIGTERM: "drain", signal.SIGINT: "drain", signal.SIGQUIT: "finish",
    signal.SIGUSR1: "kill-jobs", signal.SIGUSR2: "pause", signal.SIGCONT: "resume",
    signal.SIGHUP: "replace", signal.SIGTTIN: "grow", signal.SIGTTOU: "shrink",
}  # fmt: skip
TICK_S = 0.1  # how often running jobs are checked (timeouts, memory, leases)
PREFETCH_MAX_JOB_S = 0.05  # lease ahead only while jobs take less than this on average
READY_TIMEOUT_S = 60.0
RELEASED = "runtime.Released"  # not a failure: the job goes back unfinished
LOST = "runtime.LeaseLost"  # not ours to report any more


@dataclass
class State:
    mode: str = "run"  # run, drain, finish
    paused: bool = False
    target: int = 1
    deadline: float | None = None  # drain: when running jobs are killed and given back
    intents: list[str] = field(default_factory=list)


class Master:
    def __init__(
        self, settings: config.Settings, worker: config.WorkerSettings, url: str, worker_id: str
    ) -> None:
        self.settings = settings
        self.worker = worker
        self.worker_id = worker_id
        self.client = AsyncClient(url, Keys(settings.namespace), worker_id)
        self.state = State(target=worker.concurrency)
        self.event = asyncio.Event()
        self.renew_event = asyncio.Event()  # jobs were leased: the renewal plan changed
        self.leasing = Leasing(
            self.client, list(worker.queues), worker.order, self.room, self.event.set
        )
        self.children: dict[int, ChildHandle] = {}
        self.by_pid: dict[int, ChildHandle] = {}
        self.server: ForkServer | None = None
        self.retired: list[ForkServer] = []
        self.notifier = Notifier()
        self.last_check = 0.0
        self.recent_crashes: list[float] = []
        self.title = ""
        self.jobs_seen, self.avg_run_s = 0, 0.0
        self.status_sent, self.status_at = "", 0.0

    # --- capacity ---------------------------------------------------------------

    def idle(self) -> list[ChildHandle]:
        return [c for c in self.children.values() if c.state == "idle" and c.job is None]

    def busy(self) -> list[ChildHandle]:
        return [c for c in self.children.values() if c.job is not None]

    def prefetch(self) -> int:
        """Jobs to lease ahead of free children: only while jobs are short, since a job
        leased ahead waits behind the running ones."""
        wanted = self.worker.concurrency if self.worker.prefetch is None else self.worker.prefetch
        warm = self.jobs_seen >= max(1, self.state.target) and self.avg_run_s < PREFETCH_MAX_JOB_S
        return wanted if warm else 0

    def room(self) -> int:
        """How many more jobs to lease now."""
        if self.state.mode != "run" or self.state.paused:
            return 0
        return max(0, len(self.idle()) + self.prefetch() - len(self.leasing.buffer))

    def _urgent(self) -> bool:
        """A child has nothing to run next, or the jobs leased ahead run low."""
        buffered = len(self.leasing.buffer)
        return (buffered == 0 and bool(self.idle())) or buffered < (self.prefetch() + 1) // 2

    def _timed(self, job: Running) -> None:
        """Keeps a moving average of how long jobs run (it decides the prefetch)."""
        took = time.monotonic() - job.sent_at
        self.avg_run_s = took if self.jobs_seen == 0 else 0.9 * self.avg_run_s + 0.1 * took
        self.jobs_seen += 1

    # --- signals: record the intent, nothing else --------------------------------

    def _intend(self, intent: str) -> None:
        self.state.intents.append(intent)
        self.event.set()

    def _apply_intents(self) -> None:
        intents, self.state.intents = self.state.intents, []
        for intent in intents:
            log.info("signal received: %s worker=%s", intent, self.worker_id)
            if intent == "drain" and self.state.mode != "drain":
                self.state.mode = "drain"
                self.state.deadline = time.monotonic() + self.worker.grace_s
            elif intent == "finish" and self.state.mode == "run":
                self.state.mode = "finish"
            elif intent == "kill-jobs":
                for child in self.busy():
                    why = "SIGUSR1 to the master"
                    child.kill_for(reasons.killed(9, why, "runtime.Killed"))
            elif intent == "pause":
                self.state.paused = True
            elif intent == "resume":
                self.state.paused = False
                self.leasing.wake()
            elif intent == "replace":
                asyncio.get_running_loop().create_task(self._replace_children())
            elif intent == "grow":
                self.state.target += 1
            elif intent == "shrink":
                self.state.target = max(0, self.state.target - 1)
        if self.state.mode != "run":
            self.leasing.stop_waiting()
            while self.leasing.buffer:  # leased but never started: give back now
                pending = self.leasing.buffer.popleft()
                self.leasing.outcomes.add_release(pending.leased.jid, pending.leased.token)

    # --- children -----------------------------------------------------------------

    def _server_config(self) -> dict[str, object]:
        w = self.worker
        root = w.sandbox_dir or (self.settings.state_dir / "sandboxes")
        return {
            "modules": list(w.modules),
            "worker": self.worker_id,
            "sandbox_root": str(root / self.worker_id),
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

    async def _spawn(self, index: int) -> None:
        assert self.server is not None
        pid, sock, out_fd = await self.server.spawn(index)
        child = ChildHandle(index, pid, sock, out_fd, self.server, self)
        self.children[index] = child
        self.by_pid[pid] = child
        child.attach()
        log.debug("child started index=%d pid=%d worker=%s", index, pid, self.worker_id)

    async def _reconcile_children(self) -> None:
        if self.state.mode != "run":
            for child in self.idle():
                self._stop(child)
            return
        live = [c for c in self.children.values() if c.state != "stopping"]
        for child in sorted(live, key=lambda c: -c.index)[: max(0, len(live) - self.state.target)]:
            if child.job is None:
                self._stop(child)
        if len(self.children) < self.state.target and self._crash_pause() == 0:
            free = [i for i in range(self.state.target) if i not in self.children]
            for index in free:
                await self._spawn(index)

    def _crash_pause(self) -> float:
        """Seconds to wait before spawning again when children keep dying young."""
        now = time.monotonic()
        self.recent_crashes = [t for t in self.recent_crashes if now - t < 10]
        if len(self.recent_crashes) < 5:
            return 0.0
        return max(0.0, self.recent_crashes[-1] + 2.0 - now)

    def _stop(self, child: ChildHandle) -> None:
        if child.state in ("idle", "starting", "busy") and child.job is None:
            child.state = "stopping"
            child.send(protocol.Stop())

    async def _replace_children(self) -> None:
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
                    self._stop(child)
                else:
                    child.state = "stopping"  # stops once its job is done
        self.event.set()

    # --- events from children ------------------------------------------------------

    def on_message(self, child: ChildHandle, message: protocol.Message) -> None:
        if isinstance(message, protocol.Ready):
            child.fork_point = message
            if child.state == "starting":
                child.state = "idle"
            log.info("child ready index=%d pid=%d forked by pid=%d threads=%d loop=%s worker=%s",
                     child.index, child.pid, message.parent, message.threads,
                     "running" if message.loop_running else "none", self.worker_id)  # fmt: skip
        elif child.job is None or getattr(message, "jid", None) != child.job.leased.jid:
            log.warning("unexpected %s from child pid=%d", message.kind, child.pid)
        elif isinstance(message, protocol.Heartbeat):
            child.job.last_sign = time.monotonic()
            return
        elif isinstance(message, protocol.Done):
            self.leasing.outcomes.add_complete(message.jid, child.job.leased.token)
            self._timed(child.job)
            self._job_over(child)
        elif isinstance(message, protocol.Failed):
            self._timed(child.job)
            self._record_failure(child.job, message.group, message.message, message.retry,
                                 message.delay)  # fmt: skip
            self._job_over(child)
        self.event.set()

    def on_broken(self, child: ChildHandle, error: ProtocolError) -> None:
        child.kill_for(
            reasons.Ending("runtime.ProtocolError", f"protocol error from child: {error}")
        )

    def _record_failure(
        self, job: Running, group: str, message: str, retry: bool, delay: float | None
    ) -> None:
        leased = job.leased
        log.info("job attempt failed group=%s jid=%s queue=%s worker=%s",
                 group, leased.jid, leased.queue, self.worker_id)  # fmt: skip
        if retry:
            delay_ms = -1 if delay is None else round(max(0.0, delay) * 1000)
            self.leasing.outcomes.add_retry(leased.jid, leased.token, group, message, delay_ms)
        else:
            self.leasing.outcomes.add_fail(leased.jid, leased.token, group, message)

    def _job_over(self, child: ChildHandle) -> None:
        child.job = None
        child.jobs_done += 1
        w = self.worker
        recycle = (w.max_jobs_per_child and child.jobs_done >= w.max_jobs_per_child) or (
            w.max_memory_per_child_mib and child.rss_bytes() > w.max_memory_per_child_mib << 20
        )
        if child.state == "stopping" or recycle:
            child.state = "idle"
            self._stop(child)
        else:
            child.state = "idle"
            if self.leasing.buffer and self.state.mode == "run":
                self._run(child, self.leasing.buffer.popleft())  # at once, not after Redis

    def _on_exit(self, pid: int, code: int | None, sig: int | None) -> None:
        child = self.by_pid.pop(pid, None)
        if child is None:
            return
        child.detach()
        child.state = "dead"
        if self.children.get(child.index) is child:
            del self.children[child.index]
        job, child.job = child.job, None
        if job is not None:
            ending = child.kill or reasons.of_exit(code, sig, cpu_limit_s=self.worker.cpu_limit_s)
            self._job_ended_with_child(child, job, ending)
        elif child.kill is None and (code not in (0, None) or sig is not None):
            self.recent_crashes.append(time.monotonic())
            log.warning("idle child died code=%s signal=%s pid=%d output=%r", code, sig, pid,
                        child.output_tail(500))  # fmt: skip
        self.event.set()

    def _job_ended_with_child(
        self, child: ChildHandle, job: Running, ending: reasons.Ending
    ) -> None:
        leased = job.leased
        if ending.group in (LOST, reasons.FENCED):
            log.warning("job stopped, its lease was lost jid=%s worker=%s", leased.jid,
                        self.worker_id)  # fmt: skip
            return
        if ending.group == RELEASED:
            self.leasing.outcomes.add_release(leased.jid, leased.token)
            return
        self.recent_crashes.append(time.monotonic())
        tail = child.output_tail()
        message = ending.reason + (f"\n--- last output of the child ---\n{tail}" if tail else "")
        log.warning("child of job ended: %s jid=%s worker=%s", ending.reason, leased.jid,
                    self.worker_id)  # fmt: skip
        self._record_failure(job, ending.group, message, retry=True, delay=None)
        if leased.remaining <= 0:
            tags = {"queue": leased.queue, "klass": leased.klass, "jid": leased.jid,
                    "attempt": leased.attempt, "worker": self.worker_id}  # fmt: skip
            sentry.report(group=ending.group, message=message, tags=tags)

    # --- handing out jobs ---------------------------------------------------------

    def _hand_out(self) -> None:
        for child in self.idle():
            if not self.leasing.buffer:
                return
            pending = self.leasing.buffer.popleft()
            self._run(child, pending)

    def _run(self, child: ChildHandle, pending: Pending) -> None:
        leased, now = pending.leased, time.monotonic()
        child.job = Running(leased, now, now, pending.lease_until)
        child.state = "busy"
        child.output.clear()
        deadline = pending.lease_until - safety_margin(leased.lease_s)
        child.send(protocol.Run(
            jid=leased.jid, klass=leased.klass, queue=leased.queue, data=leased.data,
            attempt=leased.attempt, retries=leased.retries, remaining=leased.remaining,
            deadline=deadline, cpu_limit_s=self.worker.cpu_limit_s,
        ))  # fmt: skip

    # --- watching running jobs ----------------------------------------------------

    def _check_running(self) -> None:
        now = time.monotonic()
        if now - self.last_check < TICK_S:
            return
        self.last_check = now
        limit = (self.worker.memory_limit_mib or 0) << 20
        for child in self.busy():
            job = child.job
            assert job is not None
            margin = safety_margin(job.leased.lease_s)
            if now >= job.lease_until - margin / 2:
                child.kill_for(reasons.Ending(LOST, "its lease could not be renewed in time"))
            elif job.terminated_at is None and now - job.last_sign > job.leased.timeout_s:
                why = f"timed out after {job.leased.timeout_s:g} s"
                child.kill_for(reasons.Ending("runtime.Timeout", why), signal.SIGTERM)
                job.terminated_at = now
            elif (
                job.terminated_at is not None and now - job.terminated_at > self.worker.kill_grace_s
            ):
                child.send_signal(signal.SIGKILL)
            elif limit and child.rss_bytes() > limit:
                why = f"memory limit {self.worker.memory_limit_mib} MiB"
                child.kill_for(reasons.killed(9, why, "runtime.MemoryLimit"))
            elif self.state.deadline is not None and now >= self.state.deadline:
                child.kill_for(reasons.Ending(RELEASED, "given back at shutdown"))

    def _next_wait(self) -> float | None:
        if self.busy() or self.state.mode != "run":
            return TICK_S
        if self.title != self.status_sent:  # a status change waits for its turn
            return 0.5
        return None

    # --- renewing leases ----------------------------------------------------------

    def _next_renewal(self) -> float | None:
        """When a lease will be a third gone (monotonic), None when nothing is held."""
        held: list[Running | Pending] = [c.job for c in self.busy() if c.job]
        held += list(self.leasing.buffer)
        return min((h.lease_until - h.leased.lease_s * 2 / 3 for h in held), default=None)

    async def _renew_forever(self) -> None:
        while True:
            due = self._next_renewal()
            if due is None or due > time.monotonic():
                timeout = None if due is None else due - time.monotonic()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.renew_event.wait(), timeout)
                self.renew_event.clear()
                continue
            jobs = {c.job.leased.jid: c for c in self.busy() if c.job}
            pending = {p.leased.jid: p for p in self.leasing.buffer}
            leases = {jid: c.job.leased.token for jid, c in jobs.items() if c.job}
            leases.update({jid: p.leased.token for jid, p in pending.items()})
            result = await self.leasing.renew(leases)
            if result is None:
                continue
            sent_at, lost = result
            for jid, child in jobs.items():
                job = child.job
                if job is None or job.leased.jid != jid:
                    continue
                if jid in lost:
                    child.kill_for(reasons.Ending(LOST, "its lease was lost"))
                else:
                    job.lease_until = sent_at + job.leased.lease_s
                    deadline = job.lease_until - safety_margin(job.leased.lease_s)
                    child.send(protocol.Lease(jid, deadline))
            for jid, entry in pending.items():
                if jid in lost:
                    self._drop_pending(entry)
                else:
                    entry.lease_until = sent_at + entry.leased.lease_s
            self.event.set()

    def _drop_pending(self, entry: Pending) -> None:
        with contextlib.suppress(ValueError):
            self.leasing.buffer.remove(entry)

    # --- status ---------------------------------------------------------------------

    def _describe(self) -> str:
        s = self.state
        flags = [s.mode] if s.mode != "run" else []
        flags += ["paused"] if s.paused else []
        busy = len(self.busy())
        queues = ",".join(self.worker.queues)
        return (f"queues={queues} children={len(self.children)}/{s.target} busy={busy}"
                + (f" [{' '.join(flags)}]" if flags else ""))  # fmt: skip

    def _show(self) -> None:
        """Process title and systemd status, when they change (status at most 2/s)."""
        text = self._describe()
        if text != self.title:
            self.title = text
            set_title(f"runtime master {self.worker_id} {text}")
        now = time.monotonic()
        if text != self.status_sent and now - self.status_at >= 0.5:
            self.status_sent, self.status_at = text, now
            self.notifier.status(text)

    async def _watchdog(self) -> None:
        interval = (self.notifier.watchdog_s or 0) / 2
        while interval:
            self.notifier.watchdog()
            await asyncio.sleep(interval)

    # --- the loop ---------------------------------------------------------------------

    def _done(self) -> bool:
        return (
            self.state.mode != "run"
            and not self.busy()
            and not self.leasing.buffer
            and not len(self.leasing.outcomes)
        )

    async def _pass(self) -> None:
        self._apply_intents()
        self._check_running()
        await self._reconcile_children()
        self._hand_out()
        self._show()

    async def _loop(self) -> None:
        while True:
            await self._pass()
            if self._done():
                return
            accepting = self.state.mode == "run" and not self.state.paused
            delay = self.leasing.next_exchange(self.room(), accepting, self._urgent())
            if delay == 0:
                await self.leasing.exchange(self.room(), accepting)
                self.renew_event.set()
                self._hand_out()
                continue
            self.leasing.wait_for_work(accepting)
            waits = [w for w in (delay, self._next_wait()) if w is not None]
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.event.wait(), min(waits) if waits else None)
            self.event.clear()

    async def _wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while any(c.state == "starting" for c in self.children.values()):
            if time.monotonic() > deadline:
                raise Error("children did not start in time")
            self.event.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.event.wait(), 1.0)
            await self._reconcile_children()

    async def run(self) -> int:
        """Runs until a stop signal; returns the process exit code."""
        loop = asyncio.get_running_loop()
        for sig, intent in SIGNALS.items():
            loop.add_signal_handler(sig, self._intend, intent)
        sentry.init(self.settings.sentry_dsn, server_name=self.worker_id)
        try:
            await self.client.ping()
            await self.client.load_scripts()
        except (redis.exceptions.RedisError, OSError) as err:
            raise Error(f"cannot reach Redis: {err}") from err
        self.server = await self._start_server()
        await self._reconcile_children()
        await self._wait_ready()
        log.info("master ready queues=%s children=%d worker=%s", ",".join(self.worker.queues),
                 len(self.children), self.worker_id)  # fmt: skip
        self.notifier.ready(self._describe())
        tasks = [loop.create_task(self._renew_forever()), loop.create_task(self._watchdog())]
        try:
            await self._loop()
        finally:
            self.notifier.stopping("stopping")
            for task in tasks:
                task.cancel()
            await self._shut_down()
        return 0

    async def _shut_down(self) -> None:
        self.leasing.stop_waiting()
        for child in list(self.children.values()):
            self._stop(child)
        deadline = time.monotonic() + 2.0
        while self.children and time.monotonic() < deadline:
            self.event.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.event.wait(), 0.05)
        for child in list(self.children.values()):
            child.send_signal(signal.SIGKILL)
        for server in [*self.retired, self.server]:
            if server is not None:
                await server.stop(timeout_s=1.0)
        try:
            held = await asyncio.wait_for(self.client.forget(), 1.0)
            if held:
                log.warning("exiting with %d jobs still leased worker=%s", held, self.worker_id)
        except (TimeoutError, redis.exceptions.RedisError, OSError) as err:
            log.warning("could not say goodbye to Redis: %s", err)
        await self.client.close()
        log.info("master stopped worker=%s", self.worker_id)
