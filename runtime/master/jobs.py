"""How a job moves from the book (book.py) through a child: handed to an idle
child or a busy one's pipeline, what the child says (outcome, progress, puts),
how the child ended, and the report that goes to Redis — or the job given back.

`JobFlow` is the part of `Book` that moves jobs through children; `Intake`
(intake.py) brings them in; book.py holds the mode, the capacity arithmetic,
renewals and the checks on running jobs. Pure: plain values in, actions out.
"""

from __future__ import annotations

import logging

from runtime.children import protocol
from runtime.master import events, plan, reasons
from runtime.master.held import (
    HANDOFF_EARLY_S,
    Held,
    Where,
)
from runtime.master.slots import Slot, SlotState
from runtime.master.state import BookState

log = logging.getLogger(__name__)


class JobFlow(BookState):
    # --- handing jobs to children ----------------------------------------------------

    def hand_out(self, now: float) -> None:
        """Idle children first (the job starts now), then pipelines of busy ones. Not
        while a job handed to us awaits its confirming renewal (one round trip): it
        was ready before anything popped since, so it goes first."""
        if self.confirming or (not self.buffer and not self.timed):  # most passes: nothing
            return
        self._turns_come(now)
        for slot in self.slots.idle():
            held = self._next_pending(now)
            if held is None:
                break
            self._send(slot, held, now, running=True)
        depth = self.depth()
        if depth and self.buffer:
            for slot in self.slots.accepting():
                for _ in range(self._pipeline_room(slot, depth)):  # less by one a job sent
                    held = self._next_pending(now)
                    if held is None:
                        break
                    self._send(slot, held, now, running=False)

    def _turns_come(self, now: float) -> None:
        """Jobs whose turn is close go to the front of the buffer: they are due."""
        if not self.timed:
            return
        due: list[str] = []
        while self.timed and (self.held[self.timed[0]].start_at or 0.0) - HANDOFF_EARLY_S <= now:
            due.append(self.timed.pop(0))
        self.buffer.extendleft(reversed(due))

    def _next_pending(self, now: float) -> Held | None:
        """The next job leased ahead with enough of its lease left to run. One whose
        lease ran out (its master was frozen or cut off), or holds too little to be
        worth starting (plan.start_before), is never started: it is given back."""
        while self.buffer:
            held = self.held[self.buffer.popleft()]
            if now < held.start_before():
                return held
            stop_at = plan.stop_before(held.lease_until, held.renew_length_s())
            if now >= stop_at:
                log.warning("job leased ahead not started, its lease ran out jid=%s queue=%s "
                            "worker=%s", held.jid, held.leased.queue, self.worker_id)  # fmt: skip
            else:
                log.info("job leased ahead given back unstarted, %.2f s of its lease left "
                         "jid=%s queue=%s worker=%s", stop_at - now,
                         held.jid, held.leased.queue, self.worker_id)  # fmt: skip
            self._release(held)
        return None

    def _send(self, slot: Slot, held: Held, now: float, running: bool) -> None:
        leased = held.leased
        held.slot = slot.index
        if running:
            held.where, held.sent_at, held.last_sign = Where.RUNNING, now, now
            slot.running, slot.state = held.jid, SlotState.BUSY
        else:
            held.where = Where.PIPELINED
            slot.queued.append(held.jid)
        deadline = plan.stop_before(held.lease_until, held.renew_length_s())
        self.actions.append(events.Post(slot.index, protocol.Run(
            jid=leased.jid, klass=leased.klass, queue=leased.queue, data=leased.data,
            attempt=leased.attempt, retries=leased.retries, remaining=leased.remaining,
            deadline=deadline, cpu_limit_s=self.worker.cpu_limit_s, start_at=held.start_at,
        )))  # fmt: skip

    # --- what children say -----------------------------------------------------------

    def _on_child_said(self, event: events.ChildSaid, now: float) -> None:
        slot = self.slots.get(event.index, event.pid)
        if slot is None:
            return
        message = event.message
        if event.rss_bytes is not None:
            slot.rss_bytes = event.rss_bytes
        if isinstance(message, protocol.Done | protocol.Failed):  # the most common: first
            if not self._running(slot, message, event.pid):
                return
            held = self.held[message.jid]
            if isinstance(message, protocol.Done):
                self.outcomes.add_complete(
                    held.jid, held.leased.token, result=message.result, output=event.output,
                    note=message.note or None, puts=held.puts,
                )  # fmt: skip
                self._report(held, None)
            else:
                self._failure(held, message.group, message.message, message.retry,
                              message.delay, event.output)  # fmt: skip
            self._finished(slot, held, now)
        elif isinstance(message, protocol.Ready):
            if slot.state is SlotState.STARTING:
                slot.state = SlotState.IDLE
            log.info("child ready index=%d pid=%d forked by pid=%d threads=%d loop=%s worker=%s",
                     slot.index, event.pid, message.parent, message.threads,
                     "running" if message.loop_running else "none", self.worker_id)  # fmt: skip
        elif isinstance(message, protocol.Skipped):
            self._skipped(slot, message.jid, now)
        elif isinstance(message, protocol.Put | protocol.Progress):
            self._on_job_said(slot, message)
        elif self._running(slot, message, event.pid) and isinstance(message, protocol.Heartbeat):
            self.held[message.jid].last_sign = now

    def _running(self, slot: Slot, message: protocol.Message, pid: int) -> bool:
        """The message is about the job the slot runs (else: logged, ignored)."""
        jid = getattr(message, "jid", None)
        if slot.running is None or jid != slot.running:
            log.warning("unexpected %s from child pid=%d worker=%s", message.kind, pid,
                        self.worker_id)  # fmt: skip
            return False
        return True

    def _on_job_said(self, slot: Slot, message: protocol.Put | protocol.Progress) -> None:
        """The running job puts a job or tells its progress."""
        held = self.held.get(message.jid)
        if held is None or slot.running != message.jid:
            return
        if isinstance(message, protocol.Progress):
            token = held.leased.token
            self.outcomes.add_progress(held.jid, token, message.done, message.total,
                                       message.message)  # fmt: skip
            self._noted()
        elif message.now:
            self.outcomes.add_put(message.spec, message.data, by=held.jid)  # in its history
            self._noted()
        else:  # goes with its completion: a failed or retried attempt puts nothing
            held.puts.append((message.spec, message.data))

    def _on_cancelled(self, event: events.Cancelled, now: float) -> None:
        """A job we hold was cancelled: stopped at once, nothing reported."""
        held = self.held.get(event.jid)
        if held is None or held.cancelled:
            return
        log.info("cancelled jid=%s queue=%s worker=%s", held.jid, held.leased.queue,
                 self.worker_id)  # fmt: skip
        held.cancelled = held.lost = True
        self._let_go(held, reasons.CANCELLED)

    def _let_go(self, held: Held, ending: reasons.Ending) -> None:
        """A job that is not ours any more (lease lost, cancelled): dropped if no child
        has it, its child killed (for `ending`) if running, asked back if pipelined."""
        if held.where in (Where.CONFIRMING, Where.BUFFERED, Where.TIMED):
            places = {Where.CONFIRMING: self.confirming, Where.BUFFERED: self.buffer}
            places.get(held.where, self.timed).remove(held.jid)
            del self.held[held.jid]
        elif held.where is Where.RUNNING and held.slot is not None:
            self._kill(self.slots.by_index[held.slot], ending)
        elif held.where is Where.PIPELINED and held.slot is not None and not held.withdrawing:
            held.withdrawing = True
            self.actions.append(events.Post(held.slot, protocol.Withdraw(held.jid)))

    def _finished(self, slot: Slot, held: Held, now: float) -> None:
        """The child reported its running job's outcome: its next one starts."""
        self.avg_run_s = plan.average(self.avg_run_s, self.jobs_seen, now - held.sent_at)
        self.jobs_seen += 1
        slot.jobs_done += 1
        w = self.worker
        if (w.max_jobs_per_child and slot.jobs_done >= w.max_jobs_per_child) or (
            w.max_memory_per_child_mib and slot.rss_bytes > w.max_memory_per_child_mib << 20
        ):
            slot.retire = True
        self._next_job(slot, now)  # its pipeline is refilled by the pass's hand-out

    def _next_job(self, slot: Slot, now: float) -> None:
        """The slot's next pipelined job becomes its running one (it starts it now)."""
        slot.running = slot.queued.popleft() if slot.queued else None
        if slot.running is not None:
            held = self.held[slot.running]
            held.where, held.sent_at, held.last_sign = Where.RUNNING, now, now
            return
        slot.state = SlotState.IDLE
        if slot.retire:
            self.actions += self.slots.stop(slot)

    def _skipped(self, slot: Slot, jid: str, now: float) -> None:
        """The child did not start `jid` (withdrawn, or its lease ran out meanwhile)."""
        if slot.running == jid:
            self._next_job(slot, now)
        elif jid in slot.queued:
            slot.queued.remove(jid)
        else:
            return
        self._give_back(self.held[jid], now)

    def _give_back(self, held: Held, now: float) -> None:
        """A job that never started: to another child if its lease holds and we still
        lease, else back to Redis."""
        held.slot, held.withdrawing = None, False
        if held.lost:
            del self.held[held.jid]
        elif self.accepting() and now < held.start_before():
            held.where = Where.BUFFERED
            self.buffer.appendleft(held.jid)
        else:
            self._release(held)

    # --- endings and reports -------------------------------------------------------------

    def _on_child_exited(self, event: events.ChildExited, now: float) -> None:
        slot = self.slots.get(event.index, event.pid)
        if slot is None:
            return
        del self.slots.by_index[event.index]
        if slot.running is not None:
            self.slots.crashed(now)
            cpu = self.worker.cpu_limit_s
            ending = slot.kill or reasons.of_exit(event.code, event.signal, cpu_limit_s=cpu)
            self._ended(self.held[slot.running], ending, event.tail)
        elif slot.kill is None and (event.code not in (0, None) or event.signal is not None):
            self.slots.crashed(now)
            log.warning("idle child died code=%s signal=%s pid=%d output=%r worker=%s",
                        event.code, event.signal, event.pid, event.tail[-500:],
                        self.worker_id)  # fmt: skip
            if slot.state is SlotState.STARTING and self.start_failure is None:
                lines = event.tail.strip().splitlines()
                self.start_failure = lines[-1] if lines else f"exited with code {event.code}"
        for jid in slot.queued:  # pipelined behind it: never started
            self._give_back(self.held[jid], now)

    def _ended(self, held: Held, ending: reasons.Ending, tail: str) -> None:
        """A child died holding a running job."""
        leased = held.leased
        if ending.fate is reasons.Fate.DROPPED:
            if ending is not reasons.CANCELLED:
                log.warning("job stopped, its lease was lost jid=%s worker=%s", held.jid,
                            self.worker_id)  # fmt: skip
            del self.held[held.jid]
            return
        if ending.fate is reasons.Fate.RELEASED:
            if ending is not reasons.SHUTDOWN:
                log.warning("job stopped, its lease was lost (%s) jid=%s worker=%s",
                            ending.reason, held.jid, self.worker_id)  # fmt: skip
            self._release(held, started=True)
            return
        message = ending.reason + (f"\n--- last output of the child ---\n{tail}" if tail else "")
        log.warning("child of job ended: %s jid=%s worker=%s", ending.reason, held.jid,
                    self.worker_id)  # fmt: skip
        self._failure(held, ending.group, message, retry=True, delay=None)
        if leased.remaining <= 0:
            tags = {"queue": leased.queue, "klass": leased.klass, "jid": leased.jid,
                    "attempt": leased.attempt, "worker": self.worker_id}  # fmt: skip
            self.actions.append(events.ReportFailure(ending.group, message, tags))

    def _failure(
        self, held: Held, group: str, message: str, retry: bool, delay: float | None,
        output: str = "",
    ) -> None:  # fmt: skip
        leased = held.leased
        log.info("job attempt failed group=%s jid=%s queue=%s worker=%s",
                 group, leased.jid, leased.queue, self.worker_id)  # fmt: skip
        if retry:
            delay_ms = -1 if delay is None else round(max(0.0, delay) * 1000)
            self.outcomes.add_retry(leased.jid, leased.token, group, message, delay_ms,
                                    output=output)  # fmt: skip
        else:
            self.outcomes.add_fail(leased.jid, leased.token, group, message, output=output)
        self._report(held, None)

    def _release(self, held: Held, started: bool = False) -> None:
        """Back to Redis unfinished; a job that `started` keeps its attempt counted."""
        self._report(held, "stopped" if started else "release")

    def _report(self, held: Held, kind: str | None) -> None:
        """The job's outcome goes to Redis with the next exchange; the book keeps the
        job (its lease renewed) until Redis took it."""
        if kind == "complete":
            self.outcomes.add_complete(held.jid, held.leased.token)
        elif kind in ("release", "stopped"):
            self.outcomes.add_release(held.jid, held.leased.token, started=kind == "stopped")
        held.where, held.slot = Where.REPORTING, None
        self._noted()

    def _noted(self) -> None:
        """A report waits to go: the oldest one sets when the batch must leave."""
        if self.reports_since is None:
            self.reports_since = self.now
