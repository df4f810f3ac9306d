"""Handing held jobs to children: to idle ones first (the job starts now), then
to the pipelines of busy ones, jobs whose turn comes first; a job leased ahead
with too little of its lease left is given back instead (JobFlow.release). Every
change of a job's place is a `Ledger.move`. Pure: plain values in, actions out.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from runtime import config
from runtime.children import protocol
from runtime.master import events, plan
from runtime.master.capacity import Capacity
from runtime.master.held import HANDOFF_EARLY_S, WITHDRAW_AFTER_S, Held, Where
from runtime.master.ledger import Ledger
from runtime.master.link import Link
from runtime.master.slots import Slot, Slots

log = logging.getLogger(__name__)


class HandOut:
    def __init__(
        self,
        worker: config.WorkerSettings,
        worker_id: str,
        ledger: Ledger,
        slots: Slots,
        capacity: Capacity,
        actions: list[events.Action],
        release: Callable[[Held, float], None],
        links: list[Link] | None = None,
    ) -> None:
        """`release`: how a job not worth starting goes back (JobFlow.release);
        `links`: each shard's (several: book.py)."""
        self.worker, self.worker_id = worker, worker_id
        self.ledger, self.slots, self.capacity = ledger, slots, capacity
        self.actions, self.release = actions, release
        self.links = links or []

    def hand_out(self, now: float) -> None:
        """Idle children first (the job starts now), then pipelines of busy ones, but
        not of one whose job has run long enough to have its pipeline withdrawn
        (book._withdraw_stuck). Not while a job handed to us awaits its confirming
        renewal (one round trip): it was ready before anything popped since, so it
        goes first."""
        ledger = self.ledger
        if (ledger.confirming and self._waits_for_confirmation()) or (
            not ledger.buffer and not ledger.timed
        ):
            return  # most passes
        if ledger.timed:
            self._turns_come(now)
        for slot in self.slots.idle():
            pending = self._next_pending(now)
            if pending is None:
                break
            self._send(slot, *pending, now, running=True)
        depth = self.capacity.depth(now)
        if depth and self.ledger.buffer:
            held_by = ledger.held
            for slot in self.slots.accepting():
                # running_for, read inline (every pass that pipelines asks, for each child)
                sent_at = held_by[slot.running].sent_at  # type: ignore[index]
                if sent_at is not None and now - sent_at > WITHDRAW_AFTER_S:
                    continue  # stuck on a long job: a job sent behind it would be withdrawn
                for _ in range(self.capacity.pipeline_room(slot, depth)):  # less by one a job
                    pending = self._next_pending(now)
                    if pending is None:
                        break
                    self._send(slot, *pending, now, running=False)

    def _waits_for_confirmation(self) -> bool:
        """Whether a handed job waits for its confirming renewal: in a namespace whose
        Redis is out of reach it waits for that Redis, not the other namespaces' jobs."""
        links = self.links
        return not links or any(links[self.ledger.held[j].shard].up for j in self.ledger.confirming)

    def _turns_come(self, now: float) -> None:
        """Jobs whose turn is close go to the front of the buffer: they are due."""
        timed, held = self.ledger.timed, self.ledger.held
        due = 0
        while due < len(timed) and (held[timed[due]].start_at or 0.0) - HANDOFF_EARLY_S <= now:
            due += 1
        for jid in reversed(timed[:due]):  # in their order, ahead of the buffer
            self.ledger.move(jid, Where.BUFFERED, now=now, front=True)

    def _next_pending(self, now: float) -> tuple[Held, float] | None:
        """The next job leased ahead with enough of its lease left to run, with the
        deadline its child gets (plan.stop_before: worked out once, it is asked for
        twice). One whose lease ran out (its master was frozen or cut off), or holds
        too little to be worth starting (plan.start_before), is never started: it is
        given back."""
        buffer, held_by = self.ledger.buffer, self.ledger.held
        while buffer:
            held = held_by[buffer[0]]
            length_s = held.renew_length_s()
            stop_at = plan.stop_before(held.lease_until, length_s)
            if now < plan.start_before_stop(stop_at, length_s):
                return held, stop_at
            if now >= stop_at:
                log.warning(
                    "job leased ahead not started, its lease ran out jid=%s queue=%s worker=%s",
                    held.jid,
                    held.leased.queue,
                    self.worker_id,
                )
            else:
                log.info(
                    "job leased ahead given back unstarted, %.2f s of its lease left "
                    "jid=%s queue=%s worker=%s",
                    stop_at - now,
                    held.jid,
                    held.leased.queue,
                    self.worker_id,
                )
            self.release(held, now)
        return None

    def _send(self, slot: Slot, held: Held, deadline: float, now: float, running: bool) -> None:
        """`held` goes to `slot`'s child, which stops it at `deadline` unless renewed."""
        leased = held.leased
        where = Where.RUNNING if running else Where.PIPELINED
        self.ledger.move(leased.jid, where, slot.index, now=now)
        self.actions.append(
            events.Post(
                slot.index,
                protocol.Run(
                    jid=leased.jid,
                    klass=leased.klass,
                    queue=leased.queue,
                    data=leased.data,
                    attempt=leased.attempt,
                    retries=leased.retries,
                    remaining=leased.remaining,
                    deadline=deadline,
                    cpu_limit_s=self.worker.cpu_limit_s,
                    start_at=held.start_at,
                    batch=leased.batch,
                    traceparent=leased.traceparent,
                ),
            )
        )
