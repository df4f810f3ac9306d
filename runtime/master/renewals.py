"""Keeping the master's leases alive: one batched renewal of every lease it holds
when the first one is due (early: plan.renew_at), the new deadlines told to the
children, and the jobs whose lease Redis says is gone let go. Pure: the ledger
(ledger.py) keeps the renewal bound, the link says whether a call may go.
A master serving several namespaces has one Renewals for each (its `shard`):
each renews the jobs that came from its namespace, over that namespace's link."""

from __future__ import annotations

import logging
from collections.abc import Callable

from runtime.children import protocol
from runtime.master import events, plan, reasons
from runtime.master.held import Held, Where
from runtime.master.ledger import Ledger
from runtime.master.link import Link

log = logging.getLogger(__name__)


class Renewals:
    def __init__(
        self,
        worker_id: str,
        ledger: Ledger,
        link: Link,
        actions: list[events.Action],
        let_go: Callable[[Held, reasons.Ending, float], None],
        shard: int = 0,
    ) -> None:
        self.worker_id, self.shard = worker_id, shard
        self.ledger, self.link, self.actions = ledger, link, actions
        self.let_go = let_go  # a job that is not ours any more (jobs.JobFlow.let_go)
        self.renewing = False  # a renewal is out

    def at(self, now: float) -> float | None:
        """When the next renewal should go (None: nothing to renew, or one is out)."""
        due = self.ledger.renewal_due(self.shard)
        if due is None or self.renewing:
            return None
        return due if self.link.up else max(due, self.link.retry_at)

    def maybe_renew(self, now: float) -> None:
        due = self.at(now)
        if due is not None and due <= now:  # a bound: the job it was for may be gone
            self.ledger.forget_due(self.shard)
            due = self.at(now)
        if due is None or due > now or not self.link.may_call(now):
            return
        shard = self.shard
        leases = {
            jid: h.leased.token
            for jid, h in self.ledger.held.items()
            if not h.lost and h.shard == shard
        }
        if not leases:
            return
        self.renewing = True
        outage_ms = self.link.outage_ms(now)
        self.link.sending()
        confirms = any(jid in leases for jid in self.ledger.confirming)
        self.actions.append(events.Renew(leases, outage_ms, shard, confirms=confirms))

    def on_renewed(self, event: events.Renewed, now: float) -> bool:
        """True when the renewal ended an outage of Redis."""
        self.renewing = False
        back = self.link.succeeded(now, event.sent_at)
        self.on_confirmed(event, now)
        return back

    def on_confirmed(self, event: events.Renewed, now: float) -> None:
        """A renewal's answer taken in: by `on_renewed` for the renewals this part
        sends, and alone for the confirming renewal of a handed job that the
        blocking read made itself as it returned (remote.Remote.wait; one of ours may be
        out meanwhile). That one says nothing of the link: it never carries an
        outage (resumed.lua), so only the book's own calls end one."""
        self.ledger.forget_due(self.shard)  # the leases' ends move
        held_by = self.ledger.held
        for jid, token in event.leases.items():
            held = held_by.get(jid)
            if held is None or held.leased.token != token or held.where is Where.REPORTING:
                continue
            if jid in event.lost:
                self._lose(held, now)
                continue
            self.ledger.renewed(held, event.sent_at + held.leased.lease_s)
            if held.where is Where.CONFIRMING:  # a handed job, confirmed: it may start
                self.ledger.move(jid, Where.BUFFERED, now=now, front=True)
            elif held.slot is not None:
                deadline = plan.stop_before(held.lease_until, held.renew_length_s())
                self.actions.append(events.Post(held.slot, protocol.Deadline(jid, deadline)))

    def _lose(self, held: Held, now: float) -> None:
        """Redis says the lease is gone: the job is not ours any more."""
        self.ledger.lose(held)
        if held.where in (Where.CONFIRMING, Where.BUFFERED, Where.TIMED):  # not started
            log.warning(
                "job leased ahead not started, its lease ran out jid=%s queue=%s worker=%s",
                held.jid,
                held.leased.queue,
                self.worker_id,
            )
        else:
            log.warning(
                "lease lost jid=%s queue=%s worker=%s", held.jid, held.leased.queue, self.worker_id
            )
        self.let_go(held, reasons.LOST, now)
