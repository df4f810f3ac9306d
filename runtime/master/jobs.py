"""How a job handed to a child (handout.py) goes on: what the child says
(outcome, progress, puts), how the child ended, and the report that goes to
Redis — or the job asked back, given back or let go. Every change of a job's
place is a `Ledger.move`. Pure: plain values in, actions out. A job's reports
go to the namespace it came from: the Reports of its shard (`shards`, one for
each namespace the master serves).
"""

from __future__ import annotations

import logging
import signal

from runtime import config
from runtime.children import protocol
from runtime.master import events, reasons
from runtime.master.capacity import Capacity
from runtime.master.held import Held, Where
from runtime.master.ledger import Ledger
from runtime.master.reports import Reports
from runtime.master.slots import Slot, Slots, SlotState
from runtime.queue import wire

log = logging.getLogger(__name__)


class JobFlow:
    def __init__(
        self,
        worker: config.WorkerSettings,
        worker_id: str,
        ledger: Ledger,
        slots: Slots,
        capacity: Capacity,
        reports: Reports,
        actions: list[events.Action],
        shards: list[Reports] | None = None,
    ) -> None:
        self.worker, self.worker_id = worker, worker_id
        self.ledger, self.slots, self.capacity = ledger, slots, capacity
        self.reports, self.actions = reports, actions
        self.shards = shards or [reports]  # by shard: the reports owed to each namespace
        self.start_failure: str | None = None  # a child could not start (sandbox): why

    # --- asking jobs back -------------------------------------------------------------

    def withdraw(self, slot: Slot, now: float) -> None:
        """Asks back the jobs pipelined behind the slot's running one."""
        for jid in list(slot.queued):
            self._ask_back(self.ledger.held[jid], now)

    def _ask_back(self, held: Held, now: float) -> None:
        """A pipelined job is asked back (once): the child skips it, or has started it."""
        if held.where is Where.PIPELINED and held.slot is not None:
            self.ledger.move(held.jid, Where.WITHDRAWING, held.slot, now=now)
            self.actions.append(events.Post(held.slot, protocol.Withdraw(held.jid)))

    # --- what children say -----------------------------------------------------------

    def on_child_said(self, event: events.ChildSaid, now: float) -> None:
        slot = self.slots.get(event.index, event.pid)
        if slot is None:
            return
        message = event.message
        if event.rss_bytes is not None:
            slot.rss_bytes = event.rss_bytes
        if isinstance(message, protocol.Done | protocol.Failed):  # the most common: first
            if slot.running is None or message.jid != slot.running:
                self._unexpected(message, event.pid)
                return
            held = self.ledger.held[message.jid]
            if isinstance(message, protocol.Done):
                self.shards[held.shard].outcomes.add_complete(
                    message.jid,
                    held.leased.token,
                    result=message.result,
                    output=event.output,
                    note=message.note or None,
                    puts=held.puts,
                    usage=wire.usage_text(message.cpu_s, message.max_rss_mb, message.rss_of_job),
                )
                self._report(held, now)
            else:
                self._failure(
                    held,
                    message.group,
                    message.message,
                    message.retry,
                    message.delay,
                    now,
                    event.output,
                    wire.usage_text(message.cpu_s, message.max_rss_mb, message.rss_of_job),
                )
            self._finished(slot, held, now)
        elif isinstance(message, protocol.Ready):
            if slot.state is SlotState.STARTING:
                slot.state = SlotState.READY
            log.info(
                "child ready index=%d pid=%d forked by pid=%d threads=%d loop=%s worker=%s",
                slot.index,
                event.pid,
                message.parent,
                message.threads,
                "running" if message.loop_running else "none",
                self.worker_id,
            )
        elif isinstance(message, protocol.Skipped):
            self._skipped(slot, message.jid, now)
        elif isinstance(message, protocol.Put | protocol.Progress):
            self._on_job_said(slot, message, now)
        elif slot.running is None or getattr(message, "jid", None) != slot.running:
            self._unexpected(message, event.pid)
        elif isinstance(message, protocol.Heartbeat):
            self.ledger.signed(self.ledger.held[slot.running], now)

    def on_child_printed(self, event: events.ChildPrinted, now: float) -> None:
        """The running job's latest lines go live with the next exchange (its own
        output goes with its report once it ends: lines of an ended job are not)."""
        slot = self.slots.get(event.index, event.pid)
        held = self.ledger.held.get(event.jid)
        if slot is None or held is None or slot.running != event.jid:
            return
        reports = self.shards[held.shard]
        reports.outcomes.add_live(held.jid, held.leased.token, event.text, event.dropped)
        reports.noted(now)

    def _unexpected(self, message: protocol.Message, pid: int) -> None:
        log.warning("unexpected %s from child pid=%d worker=%s", message.kind, pid, self.worker_id)

    def _on_job_said(
        self, slot: Slot, message: protocol.Put | protocol.Progress, now: float
    ) -> None:
        """The running job puts a job or tells its progress."""
        held = self.ledger.held.get(message.jid)
        if held is None or slot.running != message.jid:
            return
        reports = self.shards[held.shard]
        if isinstance(message, protocol.Progress):
            token = held.leased.token
            reports.outcomes.add_progress(
                held.jid, token, message.done, message.total, message.message
            )
            reports.noted(now)
        elif message.now:
            reports.outcomes.add_put(message.spec, message.data, by=held.jid)  # in its history
            reports.noted(now)
        else:  # goes with its completion: a failed or retried attempt puts nothing
            held.puts.append((message.spec, message.data))

    def on_cancelled(self, event: events.Cancelled, now: float) -> None:
        """A job we hold was cancelled: stopped at once, nothing reported."""
        held = self.ledger.held.get(event.jid)
        if held is None or held.cancelled:
            return
        log.info("cancelled jid=%s queue=%s worker=%s", held.jid, held.leased.queue, self.worker_id)
        self.ledger.cancel(held)
        self.let_go(held, reasons.CANCELLED, now)

    def let_go(self, held: Held, ending: reasons.Ending, now: float) -> None:
        """A job that is not ours any more (lease lost, cancelled): dropped if no child
        has it, its child killed (for `ending`) if running, asked back if pipelined."""
        if held.where in (Where.CONFIRMING, Where.BUFFERED, Where.TIMED):
            self.ledger.move(held.jid, None, now=now)
        elif held.where is Where.RUNNING and held.slot is not None:
            self.kill(self.slots.by_index[held.slot], ending)
        else:
            self._ask_back(held, now)

    def kill(self, slot: Slot, ending: reasons.Ending, sig: int = signal.SIGKILL) -> None:
        """Kills a slot's child, remembering why (the first reason wins)."""
        if slot.kill is None:
            slot.kill = ending
        self.actions.append(events.Kill(slot.index, sig))

    def _finished(self, slot: Slot, held: Held, now: float) -> None:
        """The child reported its running job's outcome: its next one starts."""
        self.capacity.finished(held.running_for(now))
        slot.jobs_done += 1
        w = self.worker
        if (w.max_jobs_per_child and slot.jobs_done >= w.max_jobs_per_child) or (
            w.max_memory_per_child_mib and slot.rss_bytes > w.max_memory_per_child_mib << 20
        ):
            slot.retire = True
        self._next_job(slot, now)  # its pipeline is refilled by the pass's hand-out

    def _next_job(self, slot: Slot, now: float) -> None:
        """The slot's running job left: its next pipelined job runs (the child starts
        it now), or the slot is idle (and stops, if it retires)."""
        if slot.queued:
            self.ledger.move(slot.queued[0], Where.RUNNING, slot.index, now=now)
        elif slot.retire:
            self.actions += self.slots.stop(slot)

    def _skipped(self, slot: Slot, jid: str, now: float) -> None:
        """The child did not start `jid` (withdrawn, or its lease ran out meanwhile)."""
        if slot.running == jid:
            self._give_back(self.ledger.held[jid], now)
            self._next_job(slot, now)
        elif jid in slot.queued:
            self._give_back(self.ledger.held[jid], now)

    def _give_back(self, held: Held, now: float) -> None:
        """A job that never started: to another child if its lease holds and we still
        lease, else back to Redis."""
        if held.lost:
            self.ledger.move(held.jid, None, now=now)
        elif self.capacity.accepting() and now < held.start_before():
            self.ledger.move(held.jid, Where.BUFFERED, now=now, front=True)
        else:
            self.release(held, now)

    # --- endings and reports -------------------------------------------------------------

    def on_child_exited(self, event: events.ChildExited, now: float) -> None:
        slot = self.slots.get(event.index, event.pid)
        if slot is None:
            return
        if slot.running is not None:
            self.slots.crashed(now)
            cpu = self.worker.cpu_limit_s
            ending = slot.kill or reasons.of_exit(event.code, event.signal, cpu_limit_s=cpu)
            self._ended(self.ledger.held[slot.running], ending, event.tail, now)
        elif slot.kill is None and (event.code not in (0, None) or event.signal is not None):
            self.slots.crashed(now)
            log.warning(
                "idle child died code=%s signal=%s pid=%d output=%r worker=%s",
                event.code,
                event.signal,
                event.pid,
                event.tail[-500:],
                self.worker_id,
            )
            if slot.state is SlotState.STARTING and self.start_failure is None:
                lines = event.tail.strip().splitlines()
                self.start_failure = lines[-1] if lines else f"exited with code {event.code}"
        while slot.queued:  # pipelined behind it: never started
            self._give_back(self.ledger.held[slot.queued[0]], now)
        self.slots.remove(slot)

    def _ended(self, held: Held, ending: reasons.Ending, tail: str, now: float) -> None:
        """A child died holding a running job."""
        leased = held.leased
        if ending.fate is reasons.Fate.DROPPED:
            if ending is not reasons.CANCELLED:
                log.warning(
                    "job stopped, its lease was lost jid=%s worker=%s", held.jid, self.worker_id
                )
            self.ledger.move(held.jid, None, now=now)
            return
        if ending.fate is reasons.Fate.RELEASED:
            if ending is not reasons.SHUTDOWN:
                log.warning(
                    "job stopped, its lease was lost (%s) jid=%s worker=%s",
                    ending.reason,
                    held.jid,
                    self.worker_id,
                )
            self.release(held, now, started=True)
            return
        message = ending.reason + (f"\n--- last output of the child ---\n{tail}" if tail else "")
        log.warning(
            "child of job ended: %s jid=%s worker=%s", ending.reason, held.jid, self.worker_id
        )
        self._failure(held, ending.group, message, retry=True, delay=None, now=now)
        if leased.remaining <= 0:
            tags = {
                "queue": leased.queue,
                "klass": leased.klass,
                "jid": leased.jid,
                "attempt": leased.attempt,
                "worker": self.worker_id,
            }
            self.actions.append(events.ReportFailure(ending.group, message, tags))

    def _failure(
        self,
        held: Held,
        group: str,
        message: str,
        retry: bool,
        delay: float | None,
        now: float,
        output: str = "",
        usage: str = "",
    ) -> None:
        leased = held.leased
        log.info(
            "job attempt failed group=%s jid=%s queue=%s worker=%s",
            group,
            leased.jid,
            leased.queue,
            self.worker_id,
        )
        outcomes = self.shards[held.shard].outcomes
        if retry:
            delay_ms = -1 if delay is None else round(max(0.0, delay) * 1000)
            outcomes.add_retry(
                leased.jid, leased.token, group, message, delay_ms, output=output, usage=usage
            )
        else:
            outcomes.add_fail(leased.jid, leased.token, group, message, output=output, usage=usage)
        self._report(held, now)

    def release(self, held: Held, now: float, started: bool = False) -> None:
        """Back to Redis unfinished; a job that `started` keeps its attempt counted.
        A job whose lease is lost is only dropped: Redis would refuse the report,
        and the jid may be leased to us again meanwhile (intake.py)."""
        if held.lost:
            self.ledger.move(held.jid, None, now=now)
            return
        self.shards[held.shard].outcomes.add_release(held.jid, held.leased.token, started=started)
        self._report(held, now)

    def _report(self, held: Held, now: float) -> None:
        """The job's outcome goes to Redis with the next exchange; the ledger keeps
        the job (its lease renewed) until Redis took it."""
        self.ledger.move(held.leased.jid, Where.REPORTING, now=now)
        self.shards[held.shard].noted(now)  # the oldest report sets when the batch leaves
