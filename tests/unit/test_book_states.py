"""The master's book under random histories (Hypothesis' stateful testing): leases,
outcomes, crashes, timer ticks, Redis failures and recoveries, signals and cancels,
in any order a real loop could see them, with the book's invariants checked after
every event and every pass. The loop's part is played here as in test_book.py:
each event is applied, jobs for idle children go first (start_jobs), then a pass;
the actions that come out are what later rules answer (an exchange in flight, a
renewal, a wait, a fork, a kill, a stop).

A bounded run is part of the default test run; `./dev slow` runs many more and
longer histories. A failure Hypothesis finds is shrunk to its shortest history,
which then becomes a plain unit test in test_book.py.
"""

from __future__ import annotations

import logging
import random
import signal
from dataclasses import replace

from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from runtime.children import protocol
from runtime.config import WorkerSettings
from runtime.errors import LeaseLost, RedisCondition
from runtime.master import events
from runtime.master.book import Book
from runtime.master.held import Where
from runtime.master.slots import SlotState
from runtime.queue.leases import Leased, Outcomes, Popped
from tests.support import histories
from tests.unit.test_book import leased

REDIS_OFFSET_S = 500.0  # local monotonic - Redis time, as the pops say
SPEC = '{"jid":"put-%d","queue":"q","klass":"m:f"}'


class BookMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        logging.disable(logging.CRITICAL)  # a line for every crash and outage: thousands a run
        worker = WorkerSettings(
            modules=("m",),
            queues=("q", "r"),
            concurrency=2,
            grace_s=1.0,
            kill_grace_s=0.5,
            memory_limit_mib=64,
            max_jobs_per_child=4,
            order="round-robin",
        )
        self.book = Book(worker, "host-1", random.Random(7))
        self.now = 1000.0
        self.count = 0  # jids and pids made so far
        self.exchange: tuple[events.Exchange, float] | None = None  # in flight, sent at
        self.renew: tuple[events.Renew, float] | None = None
        self.waiting = False
        self.spawning: set[int] = set()
        self.pids: dict[int, int] = {}  # the children forked, by index
        self.signals: dict[int, int] = {}  # the signal each child was killed with
        self.stopped: set[int] = set()  # told to stop
        self.generation = 0
        self.reported: set[tuple[str, str]] = set()  # (jid, token) of every report sent
        self._pass()

    # --- playing the loop ---------------------------------------------------------------

    def _take(self, actions: list[events.Action]) -> None:
        for action in actions:
            if isinstance(action, events.Exchange):
                assert self.exchange is None, "two exchanges at once"
                self.exchange = (action, self.now)
                self._sent(action.outcomes)
            elif isinstance(action, events.Renew):
                assert self.renew is None, "two renewals at once"
                self.renew = (action, self.now)
            elif isinstance(action, events.Wait):
                assert not self.waiting, "two waits at once"
                self.waiting = True
            elif isinstance(action, events.StopWaiting):
                self.waiting = False  # the loop cancels the read: no event comes
            elif isinstance(action, events.Spawn):
                self.spawning.add(action.index)
            elif isinstance(action, events.Kill):
                self.signals.setdefault(action.index, action.signal)
                if action.signal == signal.SIGKILL:
                    self.signals[action.index] = signal.SIGKILL
            elif isinstance(action, events.Post) and isinstance(action.message, protocol.Stop):
                self.stopped.add(action.index)

    def _pass(self) -> None:
        self.book.invariants()
        self._take(self.book.start_jobs(self.now))
        self.book.step(self.now)
        self.book.invariants()
        self._take(self.book.take_actions())

    def _apply(self, *happened: events.Event) -> None:
        for event in happened:
            self.book.apply(event, self.now)
            self.book.invariants()
        self._pass()

    def _leased(
        self,
        lease_s: float,
        timeout_s: float,
        remaining: int,
        start_in_s: float | None = None,
        handed: bool = False,
    ) -> Leased:
        self.count += 1
        jid = f"j{self.count}"
        expires_us = round((self.now - REDIS_OFFSET_S + 1.0) * 1e6) if handed else None
        job = leased(
            jid, lease_s=lease_s, timeout_s=timeout_s, remaining=remaining, start_in_s=start_in_s
        )
        return replace(job, retries=3, expires_us=expires_us, handed=handed)

    def _slot(self, pick: int, *, busy: bool = False, queued: bool = False) -> int | None:
        slots = [s for s in self.book.slots.all() if s.index in self.pids]
        slots = [s for s in slots if (not busy or s.running) and (not queued or s.queued)]
        return sorted(s.index for s in slots)[pick % len(slots)] if slots else None

    def _said(self, index: int, message: protocol.Message, **more: object) -> events.ChildSaid:
        return events.ChildSaid(index, self.pids[index], message, **more)  # type: ignore[arg-type]

    @initialize(jobs=st.integers(0, 6), warm=st.booleans())
    def children_up_and_jobs_leased(self, jobs: int, warm: bool) -> None:
        """Most histories start where the interesting ones do: children ready, a pop
        that brought jobs; `warm`: short jobs seen, so jobs are leased ahead and
        pipelined."""
        if warm:
            self.book.capacity.jobs_seen, self.book.capacity.avg_run_s = 10, 0.0005
        while self.spawning:
            self.fork_server_answers(0, "ready")
        if self.exchange is not None:
            self.exchange_answers([(3.0, 60.0, 1, None, False)] * jobs, None, False, None, 0.001)

    # --- time ---------------------------------------------------------------------------

    @rule(seconds=st.sampled_from([0.0005, 0.002, 0.01, 0.06, 0.1, 0.3, 1.0, 2.5]))
    def later(self, seconds: float) -> None:
        self.now += seconds
        self._pass()

    @rule(seconds=st.sampled_from([4.0, 40.0]))
    def frozen(self, seconds: float) -> None:
        """The master is stopped (SIGSTOP) past its leases: no pass until the next
        rule, whose events it takes first when it goes on (SIGCONT), as the loop
        does with what queued meanwhile."""
        self.now += seconds

    # --- Redis --------------------------------------------------------------------------

    @precondition(lambda self: self.exchange is not None)
    @rule(
        jobs=st.lists(
            st.tuples(
                st.sampled_from([3.0, 30.0]),
                st.sampled_from([0.2, 60.0]),
                st.integers(0, 2),
                st.sampled_from([None, None, 0.05, 0.4]),
                st.booleans(),
            ),
            max_size=4,
        ),
        refused=st.sampled_from([None, "release", "complete", "retry"]),
        lost=st.booleans(),
        wake_in_s=st.sampled_from([None, 0.05]),
        late_s=st.sampled_from([0.0005, 0.01, 0.2]),
        again=st.lists(st.integers(0, 7), max_size=2),
    )
    def exchange_answers(
        self,
        jobs: list[tuple[float, float, int, float | None, bool]],
        refused: str | None,
        lost: bool,
        wake_in_s: float | None,
        late_s: float,
        again: list[int] | None = None,
    ) -> None:
        assert self.exchange is not None
        action, sent_at = self.exchange
        self.exchange = None
        self.now = max(self.now, sent_at + late_s)
        outcomes = action.outcomes
        unsent = outcomes.only(refused) if refused else None  # type: ignore[arg-type]
        if unsent is not None:
            self._sent(unsent, back=True)
        popped = None
        if action.pop is not None:
            leased = self._again(again or [], outcomes, lost)[: action.pop]
            leased += [
                self._leased(lease_s, timeout_s, remaining, start_in, handed and start_in is None)
                for lease_s, timeout_s, remaining, start_in, handed in jobs
            ]
            now_us = round((sent_at - REDIS_OFFSET_S) * 1e6)
            popped = Popped(leased[: action.pop], wake_in_s, [], now_us)
        states: dict[str, object] = {}
        for kind in outcomes.kinds():
            for jid in outcomes.jids(kind):
                states[jid] = LeaseLost("lease lost") if lost else kind
        self._apply(
            events.Exchanged(outcomes, action.pop, states, popped, sent_at, self.now, unsent)
        )
        kept = set() if unsent is None else {j for k in unsent.kinds() for j in unsent.jids(k)}
        for jid, token in _leases(outcomes):
            held = self.book.ledger.held.get(jid)
            if jid not in kept and held is not None:  # held, but not under the lease reported
                assert held.leased.token != token, f"{jid} held after its report landed"

    def _ran_out(self) -> bool:
        return any(held.lease_until < self.now for held in self.book.ledger.held.values())

    @precondition(lambda self: self.exchange is not None and self._ran_out())
    @rule(picks=st.lists(st.integers(0, 7), min_size=1, max_size=2), lost=st.booleans())
    def exchange_leases_again(self, picks: list[int], lost: bool) -> None:
        """The pop reclaimed leases that ran out (a freeze) and leased those jobs to
        this master again: the history of the combined-fault rig's crash."""
        self.exchange_answers([], None, lost, None, 0.0005, picks)

    def _again(self, picks: list[int], outcomes: Outcomes, lost: bool) -> list[Leased]:
        """Jobs the master still holds whose lease ran out (its clock says so:
        Redis's lease ends later than the master counts), reclaimed by this pop and
        leased to the same master again, with a new token (lib/place.lua's
        reclaim, then the pop). Not a job whose report this call took."""
        taken = set() if lost else {j for k in outcomes.kinds() for j in outcomes.jids(k)}
        ran_out = sorted(
            jid
            for jid, held in self.book.ledger.held.items()
            if held.lease_until < self.now and jid not in taken
        )
        again: list[Leased] = []
        for pick in picks:
            if ran_out:
                jid = ran_out.pop(pick % len(ran_out))
                self.count += 1
                job = replace(self.book.ledger.held[jid].leased, token=f"tok-{jid}-{self.count}")
                again.append(replace(job, handed=False, expires_us=None, start_in_s=None))
        return again

    def _sent(self, outcomes: Outcomes, back: bool = False) -> None:
        """Nothing is reported twice: one report a lease (its jid and token), unless
        it came `back` (not delivered: it goes again)."""
        for lease in _leases(outcomes):
            if back:
                self.reported.discard(lease)
            else:
                assert lease not in self.reported, f"{lease[0]} reported twice"
                self.reported.add(lease)

    @precondition(lambda self: self.exchange is not None)
    @rule(
        condition=st.sampled_from(
            [RedisCondition.BUSY, RedisCondition.CONNECTION, RedisCondition.OOM]
        )
    )
    def exchange_fails(self, condition: RedisCondition) -> None:
        assert self.exchange is not None
        action, sent_at = self.exchange
        self.exchange = None
        self._sent(action.outcomes, back=True)
        self._apply(events.ExchangeFailed(action.outcomes, condition, "refused", sent_at))

    @precondition(lambda self: self.renew is not None)
    @rule(lose=st.sets(st.integers(0, 7), max_size=2), late_s=st.sampled_from([0.0005, 0.2]))
    def renewal_answers(self, lose: set[int], late_s: float) -> None:
        assert self.renew is not None
        action, sent_at = self.renew
        self.renew = None
        self.now = max(self.now, sent_at + late_s)
        jids = sorted(action.leases)
        lost = frozenset(jids[i] for i in lose if i < len(jids))
        self._apply(events.Renewed(action.leases, lost, sent_at))

    @precondition(lambda self: self.renew is not None)
    @rule(condition=st.sampled_from([RedisCondition.BUSY, RedisCondition.TIMEOUT]))
    def renewal_fails(self, condition: RedisCondition) -> None:
        assert self.renew is not None
        action, sent_at = self.renew
        self.renew = None
        self._apply(events.RenewFailed(action.leases, condition, "refused", sent_at))

    @precondition(lambda self: self.waiting)
    @rule(
        what=st.sampled_from(
            [
                *("handed", "confirmed", "found lost", "token", "look later", "nothing"),
                *("failed", "handed again"),
            ]
        )
    )
    def wait_ends(self, what: str) -> None:
        self.waiting = False
        again = self._again([0], Outcomes(), lost=True) if what == "handed again" else []
        if again:  # a job reclaimed from us, handed to us again as we waited
            expires_us = round((self.now - REDIS_OFFSET_S + 1.0) * 1e6)
            job = replace(again[0], handed=True, expires_us=expires_us)
            self._apply(events.WaitEnded(job, "own", True))
        elif what == "failed":
            self._apply(events.WaitFailed(RedisCondition.CONNECTION, "reset", self.now))
        elif what == "handed":
            self._apply(events.WaitEnded(self._leased(3.0, 60.0, 1, handed=True), "own", True))
        elif what in ("confirmed", "found lost"):  # the read renewed it itself (remote.Remote.wait)
            job = self._leased(3.0, 60.0, 1, handed=True)
            lost = frozenset({job.jid}) if what == "found lost" else frozenset()
            confirmed = events.Renewed({job.jid: job.token}, lost, self.now)
            self._apply(events.WaitEnded(job, "own", True, confirmed=confirmed))
        elif what == "token":
            self._apply(events.WaitEnded(None, "wake:q", False))
        elif what == "look later":
            at_us = round((self.now - REDIS_OFFSET_S + 0.5) * 1e6)
            self._apply(events.WaitEnded(None, "wake:q", False, at_us))
        else:
            self._apply(events.WaitEnded())

    @rule(pick=st.integers(0, 10), known=st.booleans())
    def cancelled(self, pick: int, known: bool) -> None:
        held = sorted(self.book.ledger.held)
        jid = held[pick % len(held)] if held and known else "someone-elses"
        self._apply(events.Cancelled(jid))

    # --- children -----------------------------------------------------------------------

    @precondition(lambda self: bool(self.spawning))
    @rule(pick=st.integers(0, 3), how=st.sampled_from(["ready"] * 4 + ["fork failed", "dies"]))
    def fork_server_answers(self, pick: int, how: str) -> None:
        index = sorted(self.spawning)[pick % len(self.spawning)]
        self.spawning.discard(index)
        if how == "fork failed":
            self._apply(events.SpawnFailed(index, "no memory"))
            return
        self.count += 1
        pid = self.pids[index] = 10_000 + self.count
        self.signals.pop(index, None)
        self.stopped.discard(index)
        if how == "ready":
            self._apply(
                events.ChildSpawned(index, pid),
                events.ChildSaid(index, pid, protocol.Ready(pid, 1, 1, False)),
            )
        else:
            self._apply(events.ChildSpawned(index, pid))
            self._exited(index, 88, None, "sandbox step 'uid' failed")

    @rule(
        pick=st.integers(0, 3),
        says=st.sampled_from(
            [
                "done",
                "done",
                "failed",
                "fails for good",
                "heartbeat",
                "progress",
                "puts now",
                "puts after",
                "skips",
                "stray",
            ]
        ),
    )
    def child_says(self, pick: int, says: str) -> None:
        index = self._slot(pick, busy=True)
        if index is None:
            return
        jid = self.book.slots.by_index[index].running or ""
        self.count += 1
        message: protocol.Message = {
            "done": protocol.Done(jid, '{"ok":1}'),
            "failed": protocol.Failed(jid, "ValueError", "bad", delay=0.5),
            "fails for good": protocol.Failed(jid, "ValueError", "bad", retry=False),
            "heartbeat": protocol.Heartbeat(jid),
            "progress": protocol.Progress(jid, 1, 2),
            "puts now": protocol.Put(jid, SPEC % self.count, "{}", now=True),
            "puts after": protocol.Put(jid, SPEC % self.count, "{}"),
            "skips": protocol.Skipped(jid, "its deadline passed"),
            "stray": protocol.Done("not-its-job"),
        }[says]
        self._apply(self._said(index, message, rss_bytes=1 << 20))

    @rule(pick=st.integers(0, 3), second=st.booleans())
    def child_gives_back_a_queued_job(self, pick: int, second: bool) -> None:
        index = self._slot(pick, queued=True)
        if index is None:
            return
        queued = self.book.slots.by_index[index].queued
        jid = queued[min(len(queued) - 1, int(second))]
        self._apply(self._said(index, protocol.Skipped(jid, "withdrawn")))

    @rule(
        pick=st.integers(0, 3),
        how=st.sampled_from([(1, None), (86, None), (None, 11), (None, 9), (0, None), (87, None)]),
    )
    def child_dies(self, pick: int, how: tuple[int | None, int | None]) -> None:
        index = self._slot(pick)
        if index is not None:
            self._exited(index, *how, "Traceback ...")

    @precondition(lambda self: any(i in self.pids for i in [*self.signals, *self.stopped]))
    @rule(pick=st.integers(0, 3))
    def killed_or_stopped_child_exits(self, pick: int) -> None:
        gone = sorted(i for i in {*self.signals, *self.stopped} if i in self.pids)
        index = gone[pick % len(gone)]
        sig = self.signals.get(index)
        self._exited(index, None if sig else 0, sig, "")

    @rule(pick=st.integers(0, 3))
    def child_breaks_the_protocol(self, pick: int) -> None:
        index = self._slot(pick)
        if index is not None:
            self._apply(events.ChildBroke(index, self.pids[index], "incomplete frame"))

    @rule(pick=st.integers(0, 3), mib=st.sampled_from([1, 100]))
    def memory_is_read(self, pick: int, mib: int) -> None:
        index = self._slot(pick)
        if index is not None:
            self._apply(events.Rss({index: mib << 20}))

    def _exited(self, index: int, code: int | None, sig: int | None, tail: str) -> None:
        pid = self.pids.pop(index)
        self.signals.pop(index, None)
        self.stopped.discard(index)
        self._apply(events.ChildExited(index, pid, code, sig, tail))

    # --- signals ------------------------------------------------------------------------

    @rule(
        intent=st.sampled_from(
            [
                *events.Intent,
                *[i for i in events.Intent if i.name in ("PAUSE", "RESUME", "GROW", "KILL_JOBS")],
            ]
        )
    )
    def signalled(self, intent: events.Intent) -> None:
        self._apply(events.Signalled(intent))

    @precondition(lambda self: bool(self.pids))
    @rule()
    def fork_server_replaced(self) -> None:
        self.generation += 1
        self._apply(events.ServerReplaced(self.generation))

    @precondition(lambda self: bool(self.pids))
    @rule()
    def fork_server_dies(self) -> None:
        """As the master hears it: each child killed with it, then its own end."""
        for index in sorted(self.pids):
            self._exited(index, None, 9, "")
        self._apply(events.ServerExited(4242, None, 9))

    def teardown(self) -> None:
        logging.disable(logging.NOTSET)

    # --- what holds after every step ------------------------------------------------------

    @invariant()
    def consistent(self) -> None:
        self.book.invariants()
        for slot in self.book.slots.all():
            if slot.state is SlotState.READY:
                assert slot.index in self.pids, f"slot {slot.index} is up with no child"
        if not self.book.capacity.accepting():  # after a pass: nothing leased ahead
            ledger = self.book.ledger
            assert not ledger.buffer and not ledger.timed and not ledger.confirming
            assert all(h.where is not Where.BUFFERED for h in ledger.held.values())


def _leases(outcomes: Outcomes) -> list[tuple[str, str]]:
    """(jid, token) of every report (complete, retry, fail, release)."""
    leases = [(row.jid, row.token) for row in outcomes.complete.values()]
    leases += [(row.jid, row.token) for row in outcomes.retry]
    leases += [(row.jid, row.token) for row in outcomes.fail]
    return leases + list(outcomes.release.items())


TestBookHistories = histories.bounded(BookMachine, examples=150, steps=50)  # a few seconds
TestBookLongHistories = histories.long(BookMachine, steps=150)  # ./dev slow
