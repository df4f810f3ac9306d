"""The master's ledger: every job it holds and where each one is, one record
(`Held`) per jid from the moment a pop leases it until Redis has taken its report.

    CONFIRMING handed to us on a short first    `confirming`
               lease: started once renewed
    BUFFERED   leased, waiting for a child     `buffer`, in the order they go
    TIMED      leased before its turn          `timed`, by start time
    PIPELINED  sent to a child, behind its     the slot's `queued`, in order
               running job
    RUNNING    its child runs it               the slot's `running`
    REPORTING  outcome collected, not yet taken by Redis (no structure)

A job's place is written in its record (`where`, `slot`) and in the one
structure of that place, and only `move` changes either: the record and the
structure never disagree. The ledger also keeps the bound on when the first
lease needs renewing (`renew_due`), lowered as jobs come in: one for each
namespace the master serves (its lanes: a lane's leases are renewed together,
in its namespace).

`invariants()` checks all of that; the tests run it after every event (it walks
every job: never on the loop's path). Pure: no I/O, no clock.
"""

from __future__ import annotations

import bisect
from collections import deque

from runtime.master import plan
from runtime.master.held import Held, Where
from runtime.master.slots import Slots, SlotState

UNKNOWN = object()  # the renewal bound, not worked out yet


class Ledger:
    def __init__(self, slots: Slots, lanes: int = 1) -> None:
        self.held: dict[str, Held] = {}
        self.buffer: deque[str] = deque()
        self.confirming: list[str] = []  # handed to us, started once a renewal confirms them
        self.timed: list[str] = []  # by start_at
        self.slots = slots  # their `running` and `queued` are the ledger's to write
        self.renew_due: list[float | object | None] = [UNKNOWN] * lanes  # by lane

    def add(self, held: Held) -> None:
        """A job leased or handed to us is held from now, in its first place
        (BUFFERED at the back, CONFIRMING, or TIMED by its start time)."""
        jid = held.jid
        self.held[jid] = held
        held.slot = None
        if held.where is Where.BUFFERED:
            self.buffer.append(jid)
            due = plan.renew_at(held.lease_until, held.renew_length_s())
        elif held.where is Where.CONFIRMING:
            self.confirming.append(jid)
            due = 0.0  # renewed at once: it starts when the renewal confirms it
        else:
            held.where = Where.TIMED
            self._time(jid)
            due = plan.renew_at(held.lease_until, held.renew_length_s())
        bound = self.renew_due[held.lane]
        if bound is None or (type(bound) is float and due < bound):
            self.renew_due[held.lane] = due

    def move(  # noqa: PLR0912 - one call a move: it is made several times a job
        self, jid: str, where: Where | None, slot: int | None = None, *, front: bool = False
    ) -> Held:
        """Moves a held job to `where` (None: it is not held any more) and returns
        its record. PIPELINED and RUNNING take the child's `slot`; BUFFERED goes to
        the back, or the `front`. A slot whose running job leaves is idle until
        its next job moves in."""
        held = self.held[jid]
        was = held.where
        if was is Where.RUNNING:
            left = self.slots.by_index[held.slot]  # type: ignore[index]
            left.running, left.state = None, SlotState.IDLE
        elif was is Where.BUFFERED:
            if self.buffer[0] == jid:
                self.buffer.popleft()
            else:
                self.buffer.remove(jid)
        elif was is Where.PIPELINED:
            queued = self.slots.by_index[held.slot].queued  # type: ignore[index]
            if queued[0] == jid:
                queued.popleft()
            else:
                queued.remove(jid)
        elif was is Where.TIMED:
            self.timed.remove(jid)
        elif was is Where.CONFIRMING:
            self.confirming.remove(jid)
        if where is None:
            del self.held[jid]
            return held
        held.where, held.slot = where, slot
        if where is Where.RUNNING:
            into = self.slots.by_index[slot]  # type: ignore[index]
            into.running, into.state = jid, SlotState.BUSY
        elif where is Where.REPORTING:
            held.slot = None
        elif where is Where.PIPELINED:
            self.slots.by_index[slot].queued.append(jid)  # type: ignore[index]
        elif where is Where.BUFFERED:
            held.slot = None
            if front:
                self.buffer.appendleft(jid)
            else:
                self.buffer.append(jid)
        elif where is Where.TIMED:
            held.slot = None
            self._time(jid)
        else:
            held.slot = None
            self.confirming.append(jid)
        return held

    def _time(self, jid: str) -> None:
        """Into `timed`, after the jobs that start no later."""
        held = self.held
        bisect.insort(self.timed, jid, key=lambda j: held[j].start_at or 0.0)

    # --- renewals ----------------------------------------------------------------------

    def renewal_due(self, lane: int = 0) -> float | None:
        """When the first lease of `lane` needs renewing, or earlier (None: no lease
        to renew).
        Worked out from every held job when unknown (at start, after a renewal), then
        lowered as jobs come (`add`), not raised as they go: scanning every held job
        at each event was a twentieth of the master's time in a drain."""
        if self.renew_due[lane] is UNKNOWN:
            self.renew_due[lane] = min(
                (h.renew_due_at() for h in self.held.values() if not h.lost and h.lane == lane),
                default=None,
            )
        return self.renew_due[lane]  # type: ignore[return-value]

    def forget_due(self, lane: int = 0) -> None:
        """The leases' ends moved (renewed), or the bound came: work it out again."""
        self.renew_due[lane] = UNKNOWN

    def shortest_lease(self) -> float | None:
        return min((h.renew_length_s() for h in self.held.values()), default=None)

    # --- the checks ----------------------------------------------------------------------

    def invariants(self) -> None:
        """Raises AssertionError unless every job is in exactly one place, its record
        says so, the slots agree, and the renewal bound covers every lease we hold."""
        counts = {where: 0 for where in Where}
        for jid, held in self.held.items():
            assert held.jid == jid, f"{jid} is filed under another jid ({held.jid})"
            counts[held.where] += 1
            if held.where in (Where.RUNNING, Where.PIPELINED):
                assert held.slot in self.slots.by_index, f"{jid} is on a slot that is gone"
            else:
                assert held.slot is None, f"{jid} is {held.where.value} on slot {held.slot}"
            if held.where in (Where.CONFIRMING, Where.BUFFERED, Where.TIMED):
                assert not held.lost, f"{jid} is {held.where.value} with its lease lost"
                assert not held.withdrawing, f"{jid} is {held.where.value} and withdrawing"
        self._check_places(Where.BUFFERED, list(self.buffer), counts)
        self._check_places(Where.TIMED, self.timed, counts)
        self._check_places(Where.CONFIRMING, self.confirming, counts)
        starts = [self.held[jid].start_at for jid in self.timed]
        assert None not in starts, "a timed job without a start time"
        assert starts == sorted(starts), f"timed out of order: {starts}"  # type: ignore[type-var]
        running, queued = [], []
        for index, slot in self.slots.by_index.items():
            assert slot.index == index, f"slot {slot.index} filed under {index}"
            assert (slot.running is not None) == (slot.state is SlotState.BUSY), (
                f"slot {index} is {slot.state.value} running {slot.running}"
            )
            if slot.running is not None:
                running.append(slot.running)
                assert self.held[slot.running].slot == index, f"{slot.running} not on {index}"
            for jid in slot.queued:
                queued.append(jid)
                assert self.held[jid].slot == index, f"{jid} queued on {index}, filed elsewhere"
        self._check_places(Where.RUNNING, running, counts)
        self._check_places(Where.PIPELINED, queued, counts)
        for held in self.held.values():
            assert 0 <= held.lane < len(self.renew_due), f"{held.jid} of no lane ({held.lane})"
        for lane, due in enumerate(self.renew_due):
            if due is UNKNOWN:
                continue
            assert due is None or isinstance(due, float), f"renewal due {due!r}"
            ours = [h.renew_due_at() for h in self.held.values() if not h.lost and h.lane == lane]
            assert due is not None or not ours, f"leases held with no renewal due (lane {lane})"
            assert due is None or not ours or due <= min(ours), (
                f"renewal due at {due}, after a lease of lane {lane} needs it ({min(ours)})"
            )

    def _check_places(self, where: Where, jids: list[str], counts: dict[Where, int]) -> None:
        assert len(set(jids)) == len(jids), f"a job twice in {where.value}: {jids}"
        for jid in jids:
            held = self.held.get(jid)
            assert held is not None, f"{jid} is {where.value} but not held"
            assert held.where is where, f"{jid} is in {where.value}, its record says {held.where}"
        assert counts[where] == len(jids), (
            f"{counts[where]} jobs say {where.value}, {len(jids)} are"
        )
