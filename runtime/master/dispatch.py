"""Which child runs which job next, and how far ahead the master leases.

Jobs a pop leased wait in the master's buffer (`Leasing.buffer`). An idle child
gets the next one at once. While jobs are short, a busy child also gets the next
one or two to run after its current one (its pipeline, `ChildHandle.queued`), so
it never waits for the master between jobs, and the master leases about
PREFETCH_WINDOW_S of work ahead, so pops and reports travel to Redis in batches.
A job waiting in a pipeline behind an unexpectedly long one is withdrawn and goes
to another child; so are pipelined jobs when the master stops leasing.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable

from runtime import config
from runtime.children import protocol
from runtime.master.children import ChildHandle, Running
from runtime.master.leasing import Leasing, Pending, safety_margin
from runtime.master.pool import Pool

log = logging.getLogger(__name__)

PREFETCH_MAX_JOB_S = 0.05  # lease ahead only while jobs take less than this on average
PREFETCH_WINDOW_S = 0.01  # by default lease about this much work ahead (short jobs)
PREFETCH_MAX = 64  # the most jobs leased ahead by default
PIPELINE_MAX_JOB_S = 0.005  # queue a job behind a running one only below this average
DEEP_PIPELINE_JOB_S = 0.001  # ... two of them below this
WITHDRAW_AFTER_S = 0.05  # a pipelined job waits about this long at most behind a long one
HANDOFF_EARLY_S = 0.002  # a job leased before its turn goes to a child this long before it


class Dispatch:
    def __init__(
        self,
        pool: Pool,
        leasing: Leasing,
        worker: config.WorkerSettings,
        worker_id: str,
        target: Callable[[], int],
    ) -> None:
        self.pool = pool
        self.leasing = leasing
        self.worker = worker
        self.worker_id = worker_id
        self.target = target  # the wanted number of children
        self.jobs_seen, self.avg_run_s = 0, 0.0
        self.pipelining = False

    # --- how much to hold -------------------------------------------------------

    def _warm(self) -> bool:
        return self.jobs_seen >= max(1, self.target()) and self.avg_run_s < PREFETCH_MAX_JOB_S

    def depth(self) -> int:
        """Jobs a busy child may hold behind its running one."""
        depth = 0
        if self._warm() and self.avg_run_s < PIPELINE_MAX_JOB_S:
            depth = 2 if self.avg_run_s < DEEP_PIPELINE_JOB_S else 1
            depth = min(depth, self.worker.pipeline)
        if bool(depth) != self.pipelining:
            self.pipelining = bool(depth)
            log.info("pipelining %s: jobs take %.2f ms on average worker=%s",
                     "on" if depth else "off", self.avg_run_s * 1000, self.worker_id)  # fmt: skip
        return depth

    def prefetch(self) -> int:
        """Jobs to lease ahead of the children (in the buffer): only while jobs are
        short, since a job leased ahead waits behind the running ones."""
        if not self._warm():
            return 0
        if self.worker.prefetch is not None:
            return self.worker.prefetch
        children = max(1, self.target())
        window = math.ceil(children * PREFETCH_WINDOW_S / max(self.avg_run_s, 1e-6))
        return min(PREFETCH_MAX, max(children, window))

    def _slots(self) -> int:
        """Free places in the children: idle ones, and room in busy ones' pipelines."""
        depth = self.depth()
        free = len(self.pool.idle())
        if depth:
            free += sum(self._pipeline_room(c, depth) for c in self.pool.accepting())
        return free

    def _pipeline_room(self, child: ChildHandle, depth: int) -> int:
        """Jobs the child's pipeline may take: never past its --max-jobs-per-child."""
        room = depth - len(child.queued)
        if self.worker.max_jobs_per_child:
            life = self.worker.max_jobs_per_child - child.jobs_done - 1 - len(child.queued)
            room = min(room, life)
        return max(0, room)

    def room(self, accepting: bool) -> int:
        """How many more jobs to lease now."""
        if not accepting:
            return 0
        return max(0, self._slots() + self.prefetch() - len(self.leasing.buffer))

    def urgent(self) -> bool:
        """A child could take a job and none is leased, or the buffer runs low."""
        buffered = len(self.leasing.buffer)
        return (buffered == 0 and self._slots() > 0) or buffered < (self.prefetch() + 1) // 2

    # --- handing out ------------------------------------------------------------

    def next_turn_in(self, now: float) -> float | None:
        """Seconds until a job leased before its turn must go to a child."""
        timed = self.leasing.timed
        if not timed or timed[0].start_at is None:
            return None
        return max(0.0, timed[0].start_at - HANDOFF_EARLY_S - now)

    def _turns_come(self, now: float) -> None:
        """Jobs whose turn is close go to the front of the buffer: they are due."""
        timed, due = self.leasing.timed, []
        while timed and (timed[0].start_at or 0.0) - HANDOFF_EARLY_S <= now:
            due.append(timed.pop(0))
        self.leasing.buffer.extendleft(reversed(due))

    def hand_out(self, now: float) -> None:
        """Idle children first (the job starts now), then pipelines of busy ones."""
        self._turns_come(now)
        touched: list[ChildHandle] = []
        for child in self.pool.idle():
            pending = self._next_pending(now)
            if pending is None:
                break
            self._send(child, pending, now, running=True)
            touched.append(child)
        depth = self.depth()
        if depth and self.leasing.buffer:
            for child in self.pool.accepting():
                while self._pipeline_room(child, depth) > 0:
                    pending = self._next_pending(now)
                    if pending is None:
                        break
                    self._send(child, pending, now, running=False)
                    touched.append(child)
        for child in touched:
            child.flush()

    def _next_pending(self, now: float) -> Pending | None:
        """The next job leased ahead whose lease still holds. One whose lease ran out
        (its master was frozen or cut off) is never started: it is given back."""
        buffer = self.leasing.buffer
        while buffer:
            pending = buffer.popleft()
            if now < pending.lease_until - safety_margin(pending.leased.lease_s):
                return pending
            leased = pending.leased
            log.warning("job leased ahead not started, its lease ran out jid=%s queue=%s "
                        "worker=%s", leased.jid, leased.queue, self.worker_id)  # fmt: skip
            self.leasing.outcomes.add_release(leased.jid, leased.token)
        return None

    def _send(self, child: ChildHandle, pending: Pending, now: float, running: bool) -> None:
        leased = pending.leased
        job = Running(leased, now, now, pending.lease_until, start_at=pending.start_at,
                      renewed=pending.renewed)  # fmt: skip
        if running:
            child.job = job
            child.state = "busy"
            child.output.clear()
        else:
            child.queued.append(job)
        deadline = pending.lease_until - safety_margin(leased.lease_s)
        child.post(protocol.Run(
            jid=leased.jid, klass=leased.klass, queue=leased.queue, data=leased.data,
            attempt=leased.attempt, retries=leased.retries, remaining=leased.remaining,
            deadline=deadline, cpu_limit_s=self.worker.cpu_limit_s, start_at=pending.start_at,
        ))  # fmt: skip

    # --- a child's job ended, or was not started ---------------------------------

    def finished(self, child: ChildHandle, job: Running, now: float, accepting: bool) -> None:
        """The child reported its running job's outcome: its next one starts."""
        took = now - job.sent_at
        self.avg_run_s = took if self.jobs_seen == 0 else 0.9 * self.avg_run_s + 0.1 * took
        self.jobs_seen += 1
        self.pool.job_over(child, now)
        if accepting and self.leasing.buffer:  # refill at once, not after Redis
            self.hand_out(now)

    def skipped(self, child: ChildHandle, jid: str, now: float, accepting: bool) -> None:
        """The child did not start `jid` (withdrawn, or its lease ran out meanwhile)."""
        if child.job is not None and child.job.leased.jid == jid:
            job = child.job
            self.pool.next_job(child, now)
        else:
            found = [j for j in child.queued if j.leased.jid == jid]
            if not found:
                return
            job = found[0]
            child.queued.remove(job)
        self.give_back(job, now, accepting)

    def give_back(self, job: Running, now: float, accepting: bool) -> None:
        """A job that never started: to another child if its lease holds and we still
        lease, else back to Redis (refused, and logged, if the lease is gone)."""
        fresh = now < job.lease_until - safety_margin(job.leased.lease_s)
        if accepting and fresh and not job.lost:
            self.leasing.buffer.appendleft(
                Pending(job.leased, job.lease_until, job.start_at, job.renewed)
            )
        else:
            self.leasing.outcomes.add_release(job.leased.jid, job.leased.token)

    def withdraw(self, now: float, everything: bool) -> None:
        """Takes back pipelined jobs waiting behind a long-running one (or all of them,
        when the master stops leasing); the child answers `skipped`."""
        for child in self.pool.busy():
            job = child.job
            stuck = job is not None and now - job.sent_at > WITHDRAW_AFTER_S
            if not child.queued or not (everything or stuck):
                continue
            for waiting in child.queued:
                if not waiting.withdrawing:
                    waiting.withdrawing = True
                    child.post(protocol.Withdraw(waiting.leased.jid))
            child.flush()
