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
import signal
import time
from dataclasses import dataclass, field

import redis

from runtime import config, sentry
from runtime.children import protocol
from runtime.errors import Error
from runtime.master import guard, reasons
from runtime.master.children import ChildHandle, Running
from runtime.master.dispatch import Dispatch
from runtime.master.leasing import Leasing, Pending, safety_margin
from runtime.master.notify import Notifier
from runtime.master.pool import Pool
from runtime.master.sizes import SizeWatch
from runtime.master.status import Status
from runtime.queue.aio import AsyncClient
from runtime.queue.keys import Keys

log = logging.getLogger(__name__)

SIGNALS = {
    signal.SIGTERM: "drain", signal.SIGINT: "drain", signal.SIGQUIT: "finish",
    signal.SIGUSR1: "kill-jobs", signal.SIGUSR2: "pause", signal.SIGCONT: "resume",
    signal.SIGHUP: "replace", signal.SIGTTIN: "grow", signal.SIGTTOU: "shrink",
}  # fmt: skip
TICK_S = 0.1  # how often running jobs are checked (timeouts, memory, leases)
SENTRY_FLUSH_S = 1.0  # at exit, the longest wait for unsent Sentry events


def renew_due(held: Running | Pending) -> float:
    """When to renew a lease: a third of it gone. A job handed to an idle master
    has a short first lease (handoff.lua); a short job ends before it is due."""
    length = held.leased.lease_s
    if held.leased.handed and not held.renewed:
        length = min(length, config.LIMITS["handoff_lease_s"])
    return held.lease_until - length * 2 / 3


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
            self.client, list(worker.queues), worker.order, self.room, self.event.set,
            on_leased=self._handed, accepting=self._accepting,
        )  # fmt: skip
        self.pool = Pool(settings, worker, worker_id, self)
        self.dispatch = Dispatch(self.pool, self.leasing, worker, worker_id, self._target)
        self.notifier = Notifier()
        self.status = Status(self.notifier, worker_id)
        self.last_check = 0.0
        self.jobs_seen, self.avg_run_s = 0, 0.0

    # --- capacity -----------------------------------------------------------------

    def _target(self) -> int:
        return self.state.target

    def _accepting(self) -> bool:
        return self.state.mode == "run" and not self.state.paused

    def room(self) -> int:
        """How many more jobs to lease now."""
        return self.dispatch.room(self._accepting())

    def _handed(self) -> None:
        """A job was handed to us while we waited: to a child at once."""
        self.renew_event.set()
        if self._accepting():
            self.dispatch.hand_out(time.monotonic())

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
                for child in self.pool.busy():
                    why = "SIGUSR1 to the master"
                    child.kill_for(reasons.killed(9, why, "runtime.Killed"))
            elif intent == "pause":
                self.state.paused = True
            elif intent == "resume":
                self.state.paused = False
                self.leasing.wake()
            elif intent == "replace":
                asyncio.get_running_loop().create_task(self.pool.replace())
            elif intent == "grow":
                self.state.target += 1
            elif intent == "shrink":
                self.state.target = max(0, self.state.target - 1)
        if self.state.mode != "run":
            self.leasing.stop_waiting()
            self.dispatch.withdraw(time.monotonic(), everything=True)  # pipelined: back too
            unstarted = [*self.leasing.buffer, *self.leasing.timed]
            self.leasing.buffer.clear()
            self.leasing.timed.clear()
            for pending in unstarted:  # leased but never started: give back now
                self.leasing.outcomes.add_release(pending.leased.jid, pending.leased.token)

    # --- jobs: handing out, outcomes ----------------------------------------------

    def on_job_message(self, child: ChildHandle, message: protocol.Message) -> None:
        now = time.monotonic()
        if isinstance(message, protocol.Skipped):
            self.dispatch.skipped(child, message.jid, now, self.state.mode == "run")
            self.event.set()
            return
        job = child.job
        assert job is not None
        if isinstance(message, protocol.Heartbeat):
            job.last_sign = now
            return
        if isinstance(message, protocol.Done):
            self.leasing.outcomes.add_complete(job.leased.jid, job.leased.token)
        elif isinstance(message, protocol.Failed):
            self._failure(job, message.group, message.message, message.retry, message.delay)
        self.dispatch.finished(child, job, now, self.state.mode == "run")
        self.event.set()

    def on_job_unstarted(self, job: Running) -> None:
        """A job pipelined to a child that died before starting it."""
        self.dispatch.give_back(job, time.monotonic(), self.state.mode == "run")

    def on_job_ended(self, child: ChildHandle, job: Running, ending: reasons.Ending) -> None:
        """A child died holding a job."""
        leased = job.leased
        if ending.group in (guard.LOST, reasons.FENCED):
            log.warning("job stopped, its lease was lost jid=%s worker=%s", leased.jid,
                        self.worker_id)  # fmt: skip
            # Report with the token we hold: Redis refuses it (LeaseLost) and changes
            # nothing if the lease is gone; if it still holds, the job goes back.
            self.leasing.outcomes.add_release(leased.jid, leased.token)
            return
        if ending.group == guard.RELEASED:
            self.leasing.outcomes.add_release(leased.jid, leased.token)
            return
        tail = child.output_tail()
        message = ending.reason + (f"\n--- last output of the child ---\n{tail}" if tail else "")
        log.warning("child of job ended: %s jid=%s worker=%s", ending.reason, leased.jid,
                    self.worker_id)  # fmt: skip
        self._failure(job, ending.group, message, retry=True, delay=None)
        if leased.remaining <= 0:
            tags = {"queue": leased.queue, "klass": leased.klass, "jid": leased.jid,
                    "attempt": leased.attempt, "worker": self.worker_id}  # fmt: skip
            # never wait for Sentry here: the loop keeps every lease alive
            sentry.report(group=ending.group, message=message, tags=tags, flush_s=None)

    def _failure(
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

    def changed(self) -> None:
        self.event.set()

    # --- renewing leases ----------------------------------------------------------

    def _held(self) -> list[Running | Pending]:
        held: list[Running | Pending] = []
        for child in self.pool.busy():
            held += [child.job, *child.queued] if child.job else []
        return held + list(self.leasing.buffer) + self.leasing.timed

    async def _renew_forever(self) -> None:
        while True:
            held = self._held()
            # renew when the oldest lease is a third gone
            due = min((renew_due(h) for h in held), default=None)
            if due is None or due > time.monotonic():
                timeout = None if due is None else due - time.monotonic()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.renew_event.wait(), timeout)
                self.renew_event.clear()
                continue
            result = await self.leasing.renew({h.leased.jid: h.leased.token for h in held})
            if result is None:
                continue  # the guards stop jobs whose lease can no longer be trusted
            sent_at, lost = result
            for entry in held:
                jid = entry.leased.jid
                if jid in lost:
                    self._lost(entry)
                else:
                    entry.lease_until = sent_at + entry.leased.lease_s
                    entry.renewed = True
                    if isinstance(entry, Running):
                        self._tell_lease(entry)
            self.event.set()

    def _tell_lease(self, job: Running) -> None:
        for child in self.pool.busy():
            if child.holds(job):
                deadline = job.lease_until - safety_margin(job.leased.lease_s)
                child.send(protocol.Lease(job.leased.jid, deadline))

    def _lost(self, entry: Running | Pending) -> None:
        if isinstance(entry, Pending):
            with contextlib.suppress(ValueError):
                self.leasing.buffer.remove(entry)
            with contextlib.suppress(ValueError):
                self.leasing.timed.remove(entry)
            return
        entry.lost = True
        for child in self.pool.busy():
            if child.job is entry:
                child.kill_for(reasons.Ending(guard.LOST, "its lease was lost"))
            elif child.holds(entry) and not entry.withdrawing:  # pipelined: not started yet
                entry.withdrawing = True
                child.send(protocol.Withdraw(entry.leased.jid))

    # --- status -------------------------------------------------------------------

    def _describe(self) -> str:
        s = self.state
        flags = [s.mode] if s.mode != "run" else []
        flags += ["paused"] if s.paused else []
        queues = ",".join(self.worker.queues)
        text = f"queues={queues} children={len(self.pool.children)}/{s.target}"
        text += f" busy={len(self.pool.busy())}"
        return text + (f" [{' '.join(flags)}]" if flags else "")

    # --- the loop -----------------------------------------------------------------

    def _next_wait(self) -> float | None:
        """How long the loop may sleep without news (None: until woken)."""
        now = time.monotonic()
        dues = [self.status.next_due(now), self.dispatch.next_turn_in(now)]  # STATUS, WATCHDOG,
        due = min((d for d in dues if d is not None), default=None)  # a job's turn
        if self.pool.busy() or self.state.mode != "run":
            return TICK_S if due is None else min(due, TICK_S)
        return due

    def _done(self) -> bool:
        return (
            self.state.mode != "run"
            and not self.pool.busy()
            and not self.leasing.buffer
            and not self.leasing.timed
            and not len(self.leasing.outcomes)
        )

    async def _pass(self) -> None:
        self._apply_intents()
        if not self._accepting() and self.leasing.registered:
            await self.leasing.exchange(0, False)  # no handoffs from now: before STATUS says so
        now = time.monotonic()
        if now - self.last_check >= TICK_S:
            self.last_check = now
            guard.check(self.pool.busy(), self.worker, self.state.deadline)
            self.dispatch.withdraw(now, everything=self.state.mode != "run")
        await self.pool.reconcile(self.state.target, running=self.state.mode == "run")
        if self._accepting():
            self.dispatch.hand_out(now)
        self.status.show(self._describe(), now)

    async def _loop(self) -> None:
        while True:
            await self._pass()
            if self._done():
                return
            accepting = self._accepting()
            delay = self.leasing.next_exchange(self.room(), accepting, self.dispatch.urgent())
            if delay == 0:
                await self.leasing.exchange(self.room(), accepting)
                self.renew_event.set()
                if self._accepting():
                    self.dispatch.hand_out(time.monotonic())
                continue
            self.leasing.wait_for_work(accepting)
            waits = [w for w in (delay, self._next_wait()) if w is not None]
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.event.wait(), min(waits) if waits else None)
            self.event.clear()

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
        await self.pool.start(self.state.target)
        log.info("master ready queues=%s children=%d worker=%s", ",".join(self.worker.queues),
                 len(self.pool.children), self.worker_id)  # fmt: skip
        self.notifier.ready(self._describe())
        tasks = [
            loop.create_task(self._renew_forever()),
            loop.create_task(
                SizeWatch(self.client, list(self.worker.queues), self.worker_id).run()
            ),
        ]
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
        await self.pool.close()
        if sentry.enabled():  # events not sent yet: a bounded wait, off the loop
            await asyncio.to_thread(sentry.flush, SENTRY_FLUSH_S)
        try:
            held = await asyncio.wait_for(self.client.forget(list(self.worker.queues)), 1.0)
            if held:
                log.warning("exiting with %d jobs still leased worker=%s", held, self.worker_id)
        except (TimeoutError, redis.exceptions.RedisError, OSError) as err:
            log.warning("could not say goodbye to Redis: %s", err)
        await self.client.close()
        log.info("master stopped worker=%s", self.worker_id)
