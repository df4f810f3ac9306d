"""The master's ledger: every job it holds and where each one is, one record
(`Held`) per jid from the moment a pop leases it until Redis has taken its report.

    CONFIRMING handed to us on a short first    `confirming`
               lease: started once renewed
    BUFFERED   leased, waiting for a child     `buffer`, in the order they go
    TIMED      leased before its turn          `timed`, by start time
    PIPELINED  sent to a child, behind its     the slot's `queued`, in order
               running job
    WITHDRAWING pipelined, asked back          the slot's `queued`, where it was
    RUNNING    its child runs it               the slot's `running`
    REPORTING  outcome collected, not yet taken by Redis (no structure)

A job's place is written in its record (`where`, `slot`) and in the one
structure of that place, and only `move` changes either: the record and the
structure never disagree. The record's flags and times are the ledger's to write
too: `move` stamps what a place brings (RUNNING: when it started), `lose`,
`cancel`, `renewed`, `signed`, `terminated` and `killed` the rest. A slot is busy
exactly while the ledger files a running job in it (slots.py derives it).

The ledger also keeps the bound on when the first lease needs renewing
(`renew_due`), lowered as jobs come in: one for each namespace the master serves
(its shards: a shard's leases are renewed together, in its namespace).

`invariants()` checks all of that; the tests run it after every event (it walks
every job: never on the loop's path). Pure: no I/O, no clock.
"""

from __future__ import annotations

import bisect
from collections import deque

from runtime.master import plan
from runtime.master.held import Held, Where
from runtime.master.slots import Slots

UNKNOWN = object()  # the renewal bound, not worked out yet
QUEUED = (Where.PIPELINED, Where.WITHDRAWING)  # the places in a slot's `queued`


class Ledger:
    def __init__(self, slots: Slots, shards: int = 1) -> None:
        self.held: dict[str, Held] = {}
        self.buffer: deque[str] = deque()
        self.confirming: list[str] = []  # handed to us, started once a renewal confirms them
        self.timed: list[str] = []  # by start_at
        self.slots = slots  # their `running` and `queued` are the ledger's to write
        self.renew_due: list[float | object | None] = [UNKNOWN] * shards  # by shard

    def add(self, held: Held) -> None:
        """A job leased or handed to us is held from now, in its first place
        (BUFFERED at the back, CONFIRMING, or TIMED by its start time)."""
        jid = held.leased.jid
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
        bound = self.renew_due[held.shard]
        if bound is None or (type(bound) is float and due < bound):
            self.renew_due[held.shard] = due

    def move(  # noqa: PLR0912 - one call a move: it is made several times a job
        self,
        jid: str,
        where: Where | None,
        slot: int | None = None,
        *,
        now: float,
        front: bool = False,
    ) -> Held:
        """Moves a held job to `where` (None: it is not held any more) at `now` and
        returns its record. PIPELINED, WITHDRAWING and RUNNING take the child's
        `slot`; BUFFERED goes to the back, or the `front`. A move between PIPELINED
        and WITHDRAWING keeps the job's turn in its slot. RUNNING stamps when it
        started. A slot whose running job leaves is idle until its next job moves in."""
        held = self.held[jid]
        was = held.where
        if was in QUEUED and where in QUEUED and slot == held.slot:
            held.where = where  # asked back (or not): its turn in the pipeline is kept
            return held
        if was is Where.RUNNING:
            self.slots.by_index[held.slot].running = None  # type: ignore[index]
        elif was is Where.BUFFERED:
            if self.buffer[0] == jid:
                self.buffer.popleft()
            else:
                self.buffer.remove(jid)
        elif was in QUEUED:
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
            self.slots.by_index[slot].running = jid  # type: ignore[index]
            held.sent_at = held.last_sign = now
        elif where is Where.REPORTING:
            held.slot = None
        elif where in QUEUED:
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

    # --- the record's flags and times ------------------------------------------------

    def lose(self, held: Held) -> None:
        """Redis says its lease is gone: nothing of it is renewed any more."""
        held.lost = True

    def cancel(self, held: Held) -> None:
        """Cancelled while held: its lease is gone and nothing of it is reported."""
        held.cancelled = held.lost = True

    def renewed(self, held: Held, until: float) -> None:
        """Its lease was renewed: it holds until `until` (monotonic)."""
        held.lease_until, held.renewed = until, True

    def signed(self, held: Held, now: float) -> None:
        """Its child says it is alive (a heartbeat)."""
        held.last_sign = now

    def terminated(self, held: Held, now: float) -> None:
        """SIGTERM went to its child (its timeout)."""
        held.terminated_at = now

    def killed(self, held: Held, now: float) -> None:
        """SIGKILL went to its child: SIGTERM was ignored for the kill grace."""
        held.killed_at = now

    def _time(self, jid: str) -> None:
        """Into `timed`, after the jobs that start no later."""
        held = self.held
        bisect.insort(self.timed, jid, key=lambda j: held[j].start_at or 0.0)

    # --- renewals ----------------------------------------------------------------------

    def renewal_due(self, shard: int = 0) -> float | None:
        """When the first lease of `shard` needs renewing, or earlier (None: no lease
        to renew).
        Worked out from every held job when unknown (at start, after a renewal), then
        lowered as jobs come (`add`), not raised as they go: scanning every held job
        at each event was a twentieth of the master's time in a drain."""
        if self.renew_due[shard] is UNKNOWN:
            self.renew_due[shard] = min(
                (h.renew_due_at() for h in self.held.values() if not h.lost and h.shard == shard),
                default=None,
            )
        return self.renew_due[shard]  # type: ignore[return-value]

    def forget_due(self, shard: int = 0) -> None:
        """The leases' ends moved (renewed), or the bound came: work it out again."""
        self.renew_due[shard] = UNKNOWN

    def shortest_lease(self) -> float | None:
        return min((h.renew_length_s() for h in self.held.values()), default=None)

    # --- the checks ----------------------------------------------------------------------

    def invariants(self) -> None:
        """Raises AssertionError unless every job is in exactly one place, its record
        says so, the slots agree, and the renewal bound covers every lease we hold."""
        counts = {where: 0 for where in Where}
        for jid, held in self.held.items():
            self._check_record(jid, held)
            counts[held.where] += 1
        self._check_places(Where.BUFFERED, list(self.buffer), counts)
        self._check_places(Where.TIMED, self.timed, counts)
        self._check_places(Where.CONFIRMING, self.confirming, counts)
        starts = [self.held[jid].start_at for jid in self.timed]
        assert None not in starts, "a timed job without a start time"
        assert starts == sorted(starts), f"timed out of order: {starts}"  # type: ignore[type-var]
        running: list[str] = []
        queued: list[str] = []
        for index, slot in self.slots.by_index.items():
            assert slot.index == index, f"slot {slot.index} filed under {index}"
            if slot.running is not None:
                running.append(slot.running)
                assert self.held[slot.running].slot == index, f"{slot.running} not on {index}"
            for jid in slot.queued:
                queued.append(jid)
                assert jid in self.held, f"{jid} is queued on {index} but not held"
                assert self.held[jid].slot == index, f"{jid} queued on {index}, filed elsewhere"
        self._check_places(Where.RUNNING, running, counts)
        for where in QUEUED:
            self._check_places(where, [j for j in queued if self.held[j].where is where], counts)
        assert len(queued) == sum(counts[where] for where in QUEUED), (
            f"slots queue {queued}, records say {[counts[w] for w in QUEUED]}"
        )
        for held in self.held.values():
            assert 0 <= held.shard < len(self.renew_due), f"{held.jid} of no shard ({held.shard})"
        for shard, due in enumerate(self.renew_due):
            if due is UNKNOWN:
                continue
            assert due is None or isinstance(due, float), f"renewal due {due!r}"
            ours = [h.renew_due_at() for h in self.held.values() if not h.lost and h.shard == shard]
            assert due is not None or not ours, f"leases held with no renewal due (shard {shard})"
            assert due is None or not ours or due <= min(ours), (
                f"renewal due at {due}, after a lease of shard {shard} needs it ({min(ours)})"
            )

    def _check_record(self, jid: str, held: Held) -> None:
        """One record: filed under its jid, on a slot exactly where a slot holds it,
        its flags and times those of its place."""
        assert held.jid == jid, f"{jid} is filed under another jid ({held.jid})"
        if held.where is Where.RUNNING or held.where in QUEUED:
            assert held.slot in self.slots.by_index, f"{jid} is on a slot that is gone"
        else:
            assert held.slot is None, f"{jid} is {held.where.value} on slot {held.slot}"
        if held.where in (Where.CONFIRMING, Where.BUFFERED, Where.TIMED):
            assert not held.lost, f"{jid} is {held.where.value} with its lease lost"
        if held.where is Where.RUNNING:
            assert held.sent_at is not None, f"{jid} is running, with no start stamped"
            assert held.last_sign >= held.sent_at, f"{jid}: a sign before its start"
        if held.cancelled:
            assert held.lost, f"{jid} is cancelled with its lease held"
        if held.killed_at is not None:
            assert held.terminated_at is not None, f"{jid} killed, never terminated"

    def _check_places(self, where: Where, jids: list[str], counts: dict[Where, int]) -> None:
        assert len(set(jids)) == len(jids), f"a job twice in {where.value}: {jids}"
        for jid in jids:
            held = self.held.get(jid)
            assert held is not None, f"{jid} is {where.value} but not held"
            assert held.where is where, f"{jid} is in {where.value}, its record says {held.where}"
        assert counts[where] == len(jids), (
            f"{counts[where]} jobs say {where.value}, {len(jids)} are"
        )
