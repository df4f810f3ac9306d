"""How jobs come to the master: exchanges that carry the reports out and pop jobs
in, in one round trip; jobs handed to an idle master while it waited; when to
wait, and for how long. Jobs that come are added to the ledger (ledger.py).
Pure, like the book: plain values in, actions out.

A master serving several namespaces has one Intake for each (its `shard`, with
that namespace's queues, link and reports); the jobs it takes remember their
shard. The children's room is shared: a pop asks for the room the other shards'
pops out now did not ask for (Capacity.asking, by shard).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from runtime import config
from runtime.errors import Error, LeaseLost, NoSuchJob
from runtime.master import events, reasons
from runtime.master.capacity import Capacity
from runtime.master.held import AHEAD_S, FLUSH_AFTER_S, FLUSH_BATCH, LOOK_LATE_S, Held, Where
from runtime.master.ledger import Ledger
from runtime.master.link import Link
from runtime.master.reports import Reports
from runtime.queue.leases import Leased

log = logging.getLogger(__name__)


class Intake:
    def __init__(
        self,
        worker: config.WorkerSettings,
        worker_id: str,
        ledger: Ledger,
        capacity: Capacity,
        link: Link,
        reports: Reports,
        actions: list[events.Action],
        shard: int = 0,
        queues: tuple[str, ...] | None = None,
        *,
        let_go: Callable[[Held, reasons.Ending, float], None],
    ) -> None:
        """`let_go`: how a held job that is not ours any more goes (JobFlow.let_go)."""
        self.worker, self.worker_id = worker, worker_id
        self.ledger, self.capacity, self.link = ledger, capacity, link
        self.reports, self.actions = reports, actions
        self.shard, self.let_go = shard, let_go
        self.queues = list(worker.queues if queues is None else queues)
        self.exchanging = self.waiting = False
        self.want_work = True  # the last pop was full, or something woke us since
        self.wake_at: float | None = None  # pop again then (something comes due)
        self.registered = False  # idle on our queues in Redis: jobs may be handed to us
        self.offset: float | None = None  # local monotonic - Redis time (s), conservative

    # --- exchanges: reports out, pops in ----------------------------------------------

    def exchange_at(self, now: float) -> float | None:
        """When the next exchange should go (now or earlier: at once; None: nothing).
        While Redis is out of reach an exchange is the probe, whatever there is to say."""
        if not self.link.up:
            return None if self.exchanging or self.link.probing else self.link.retry_at
        if self.exchanging or self._shard_awaits_confirmation():
            return None  # a handed job's confirming renewal goes alone: its answer starts it
        accepting = self.capacity.accepting()
        taken = self.capacity.others_asking(self.shard)  # asked for by the other shards' pops
        wants_jobs = accepting and self.want_work and self.capacity.urgent_room(now, taken) > 0
        if wants_jobs or (not accepting and self.registered):  # a pop (or an unregistering one)
            return now
        outcomes = self.reports.outcomes
        if not outcomes:
            return None
        since = self.reports.since
        if len(outcomes) >= FLUSH_BATCH or not accepting or since is None:
            return now
        return since + FLUSH_AFTER_S

    def maybe_exchange(self, now: float) -> None:
        due = self.exchange_at(now)
        if due is None or due > now or not self.link.may_call(now):
            return
        accepting = self.capacity.accepting()
        room = self.capacity.room(now, self.capacity.others_asking(self.shard)) if accepting else 0
        # no room and nothing to unregister: the reports go alone (a pop of 0 costs
        # Redis a call and would stop the urgent pops until something wakes us)
        count: int | None = room if room or self.registered else None
        if count is None and not self.reports.outcomes:
            if self.link.up:
                return
            count = 0  # a probe: a pop of nothing still tells whether Redis answers
        self.exchanging = True
        outage_ms = self.link.outage_ms(now)
        self.link.sending()
        outcomes = self.reports.take() if self._reports_ride(count, now) else self.reports.hold()
        if count:
            self.capacity.asking[self.shard] = count
        self.actions.append(
            events.Exchange(outcomes, count, self._rotated(), outage_ms, self.shard)
        )

    def _reports_ride(self, count: int | None, now: float) -> bool:
        """Whether the reports go with this exchange. A pop takes them only once they
        are half due: a report call costs Redis about as much for one job as for
        several, and without prefetch a pop goes as each job ends (the reports of a
        few jobs then ride one pop, none waiting longer than they may)."""
        reports = self.reports
        if not count or reports.since is None or len(reports.outcomes) >= FLUSH_BATCH:
            return True
        return now >= reports.since + FLUSH_AFTER_S / 2

    def _shard_awaits_confirmation(self) -> bool:
        """Whether a job handed to this shard awaits its confirming renewal."""
        if not self.ledger.confirming:  # nearly always: no generator
            return False
        held, shard = self.ledger.held, self.shard
        return any(held[jid].shard == shard for jid in self.ledger.confirming)

    def _rotated(self) -> tuple[str, ...]:
        if self.worker.order == "round-robin" and len(self.queues) > 1:
            self.queues.append(self.queues.pop(0))
        return tuple(self.queues)

    def _answered(self) -> None:
        """The exchange out came back (or failed): its pop asks for nothing more."""
        self.exchanging = False
        self.capacity.asking[self.shard] = 0

    def on_exchanged(self, event: events.Exchanged, now: float) -> None:
        self._answered()
        reports = self.reports
        reports.sending = None
        if self.link.succeeded(now, event.sent_at):
            self.want_work = True
        unsent = set(_reported(event.unsent)) if event.unsent is not None else set()
        if event.unsent is not None and len(event.unsent):
            reports.outcomes.merge(event.unsent)
            reports.noted(now)
        held_by, move, reporting = self.ledger.held, self.ledger.move, Where.REPORTING
        for jid, token in _reported(event.outcomes):
            held = held_by.get(jid)
            if (jid, token) in unsent:
                continue
            # its report landed (not one of an earlier lease of a job leased again)
            if held is not None and held.where is reporting and held.leased.token == token:
                move(jid, None, now=now)
                if held.cancelled:
                    reports.cancelled.add(jid)
        for jid, state in event.states.items():
            if jid in reports.cancelled:
                reports.cancelled.discard(jid)  # cancelled meanwhile: nothing to say
            elif not isinstance(state, Error):
                continue  # its new state: the report landed (one check a job, not two)
            elif isinstance(state, LeaseLost | NoSuchJob):
                log.warning(
                    "report refused with %s, nothing changed jid=%s worker=%s",
                    type(state).__name__,
                    jid,
                    self.worker_id,
                )
            else:
                log.error("report refused: %s jid=%s worker=%s", state, jid, self.worker_id)
        if event.popped is not None:
            self._take_popped(event, now)

    def on_failed(self, event: events.ExchangeFailed | events.WaitFailed, now: float) -> None:
        if isinstance(event, events.ExchangeFailed):
            self._answered()
            self.reports.put_back(event.outcomes, event.sent_at, now)
        else:
            self.waiting = False
            self.want_work = True  # the next exchange pops (and probes) instead

    def _take_popped(self, event: events.Exchanged, now: float) -> None:
        popped, asked = event.popped, event.asked
        assert popped is not None
        if popped.now_us is not None:  # before the call, so lease ends come out early
            self.offset = event.sent_at - popped.now_us / 1e6
        self.registered = bool(asked) and len(popped.jobs) < (asked or 0)
        if popped.refill:
            self.actions += [events.Extend(low, self.shard) for low in popped.refill]
        for jid, why in popped.corrupt:
            log.error(
                "a popped job does not decode, left to its lease: %s jid=%s worker=%s",
                why,
                jid,
                self.worker_id,
            )
        add, shard, held_by = self.ledger.add, self.shard, self.ledger.held
        for leased in popped.jobs:
            if leased.jid in held_by and not self._leased_again(leased, now):
                continue
            if leased.handed:  # handed to us while we waited: its first lease is short
                self._take_handed(leased, now)
            elif leased.start_in_s is None:
                add(Held(leased, Where.BUFFERED, event.sent_at + leased.lease_s, shard=shard))
            else:  # Redis's clock read in the call: start no earlier than received + wait
                start_at = event.received_at + leased.start_in_s
                add(
                    Held(leased, Where.TIMED, event.sent_at + leased.lease_s, start_at, shard=shard)
                )
        if asked is not None and len(popped.jobs) < max(asked, 1):
            self.want_work = False
            # on Redis's clock when the pop ran, no earlier than it was sent: counted
            # from the reply, the next pop would be late by the round trip
            wake = popped.wake_in_s
            self.wake_at = None if wake is None else event.sent_at + max(0.0, wake - AHEAD_S * 0.6)

    def _take_handed(self, leased: Leased, now: float) -> None:
        """A job handed to this master: its lease runs out at expires_us on Redis's
        clock, converted with the offset of our last pop. Its first lease is short
        (so that a master that died while it waited costs the job about a second on
        a fast link, a few of its round trips on a slow one: handoff.lua), so it is
        not started before a renewal confirms it (Confirming): a master cut off
        from Redis just after the hand-off, or frozen with the job in its socket,
        never runs a job that another master may have taken since."""
        if leased.expires_us is None or self.offset is None or not self.capacity.accepting():
            self.reports.outcomes.add_release(leased.jid, leased.token)  # e.g. paused meanwhile
            self.reports.noted(now)
            return
        if leased.jid in self.ledger.held and not self._leased_again(leased, now):
            return
        lease_until = leased.expires_us / 1e6 + self.offset
        self.ledger.add(Held(leased, Where.CONFIRMING, lease_until, shard=self.shard))

    def _leased_again(self, leased: Leased, now: float) -> bool:
        """A lease of a job this master holds already: Redis took the job back (its
        lease ran out, e.g. while the master was frozen: place.lua's reclaim) and
        leased it to us again. The earlier lease is lost: a job that no child has
        goes on under the new one (True); a job a child has is stopped (let go, as
        for a lease lost) and the new lease goes back to Redis unstarted (False),
        since one record holds one lease of a jid (ledger.py)."""
        old = self.ledger.held[leased.jid]
        if old.leased.token == leased.token:
            return False  # this very lease again: nothing new
        log.warning(
            "job leased again, its earlier lease ran out jid=%s queue=%s was=%s worker=%s",
            leased.jid,
            leased.queue,
            old.where.value,
            self.worker_id,
        )
        if old.shard == self.shard:  # (the same jid in another namespace is another job)
            if old.where is Where.REPORTING:  # a report of the lost lease would be refused
                self.reports.drop(old.jid, old.leased.token)
                self.ledger.move(old.jid, None, now=now)
                return True
            if not old.lost:
                self.ledger.lose(old)
                self.let_go(old, reasons.LOST, now)
            if old.jid not in self.ledger.held:  # it was not started: dropped
                return True
        self.reports.outcomes.add_release(leased.jid, leased.token)
        self.reports.noted(now)
        return False

    # --- waiting for work ----------------------------------------------------------

    def maybe_wait(self, now: float) -> None:
        """Keeps one blocking read for work going while there is room and no work."""
        want = (
            not self.want_work  # the cheapest first: every pass asks
            and self.link.up
            and self.capacity.accepting()
            and self.capacity.room(now, self.capacity.others_asking(self.shard)) > 0
        )
        if want and not self.waiting:
            self.waiting = True
            self.actions.append(events.Wait(self.shard))

    def stop_waiting(self) -> None:
        if self.waiting:
            self.waiting = False
            self.actions.append(events.StopWaiting(self.shard))

    def on_wait_ended(self, event: events.WaitEnded, now: float) -> None:
        self.waiting = False
        if event.handed is not None:
            self._take_handed(event.handed, now)
        elif (
            event.key is not None
            and not event.own
            and self.capacity.room(now, self.capacity.others_asking(self.shard)) == 0
        ):
            self.actions.append(events.GiveBack(event.key, self.shard))  # to other masters
        elif event.at_us is not None and self.offset is not None:
            # a job was handed to another master: pop when its first lease ends (if
            # that master is dead, the pop reclaims the job); until then, wait on
            at = event.at_us / 1e6 + self.offset + LOOK_LATE_S
            self.wake_at = at if self.wake_at is None else min(self.wake_at, at)
            return
        self.want_work = True


def _reported(outcomes: Any) -> list[tuple[str, str]]:
    """(jid, token) of the leases reported, in the order complete, retry, fail,
    release (no generator for the kinds that are empty, nearly always)."""
    reported = [(row.jid, row.token) for row in outcomes.complete.values()]
    if outcomes.retry:
        reported += [(r.jid, r.token) for r in outcomes.retry]
    if outcomes.fail:
        reported += [(f.jid, f.token) for f in outcomes.fail]
    if outcomes.release:
        reported += outcomes.release.items()
    return reported
