"""The master's book and its children's own bookkeeping, under random histories
(Hypothesis' stateful testing): the book's messages go to children that keep the
jobs sent to them as the real child does (runtime.children.child.Child: its
reader's `_on_message` and its loop's `_begin`, without threads, sockets or job
code), each message delivered, each job started and finished, and each answer
read by the master in any order the two processes could see them.

test_book_states.py lets its children say anything a child may say; here they say
only what a child that follows the protocol says, so the histories can check what
the two sides must agree on: no job starts twice, and every outcome a child sends
is for the job its master holds running there ("unexpected done from child" is the
sign that they disagree, and it came with a job run twice: a job withdrawn from a
busy child twice, and sent to it again each time, started at its second Run's
place while the master thought another job ran).
"""

from __future__ import annotations

import collections
import logging
import random
from collections import deque
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from runtime.children import child as child_module
from runtime.children import protocol
from runtime.children.child import Child, Settings
from runtime.config import WorkerSettings
from runtime.master import events
from runtime.master.book import Book
from runtime.master.held import Where
from runtime.queue.leases import Leased, Popped
from tests.support import histories
from tests.unit.test_book import leased

REDIS_OFFSET_S = 500.0  # local monotonic - Redis time, as the pops say


class Socket:
    """A child's end of its socket: what the child sends, decoded, for the master."""

    def __init__(self) -> None:
        self.frames = protocol.FrameBuffer()
        self.sent: deque[protocol.Message] = deque()

    def sendall(self, data: bytes) -> None:
        self.sent.extend(self.frames.feed(data))


class Modelled:
    """One child: the real Child's bookkeeping, the messages on their way to it (read
    by its reader when a rule says so), and the job its loop runs."""

    def __init__(self, index: int, pid: int) -> None:
        self.pid = pid
        self.sock = Socket()
        workdir = Path("/nonexistent")
        self.child = Child(self.sock, Settings(index, ("m",), workdir, "host-1"))  # type: ignore[arg-type]
        self.unread: deque[protocol.Message] = deque()  # posted by the master
        self.job: protocol.Run | None = None  # the one its loop runs


def _may_take(modelled: Modelled) -> bool:
    """The child's loop is free and a job waits in its inbox."""
    return modelled.job is None and not modelled.child.inbox.empty()


class BookAndChildren(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        logging.disable(logging.CRITICAL)
        self.now = 1000.0
        self.patched = pytest.MonkeyPatch()  # the children's clock is ours; no output pipe
        self.patched.setattr(child_module, "time", SimpleNamespace(monotonic=lambda: self.now))
        self.patched.setattr(child_module, "joblog", SimpleNamespace(end=lambda jid: None))
        self.count = 0
        self.children: dict[int, Modelled] = {}
        self.spawning: set[int] = set()
        self.killed: set[int] = set()
        self.exchange: tuple[events.Exchange, float] | None = None
        self.renew: tuple[events.Renew, float] | None = None
        self.waiting = False
        self.started: collections.Counter[str] = collections.Counter()  # by the children

    def teardown(self) -> None:
        self.patched.undo()
        logging.disable(logging.NOTSET)

    @initialize(concurrency=st.sampled_from([1, 2]), jobs=st.integers(1, 6))
    def children_up_and_jobs_leased(self, concurrency: int, jobs: int) -> None:
        """Short jobs seen (jobs are leased ahead and pipelined), children up, a pop
        that brought jobs."""
        worker = WorkerSettings(modules=("m",), queues=("q",), concurrency=concurrency)
        self.book = Book(worker, "host-1", random.Random(7))
        self.book.capacity.jobs_seen, self.book.capacity.avg_run_s = 10, 0.0005
        self._pass()
        if self.exchange is not None:
            self.exchange_answers(jobs, 0.001)

    # --- playing the loop ---------------------------------------------------------------

    def _take(self, actions: list[events.Action]) -> None:
        for action in actions:
            if isinstance(action, events.Post):
                if action.index in self.children:
                    self.children[action.index].unread.append(action.message)
            elif isinstance(action, events.Exchange):
                assert self.exchange is None, "two exchanges at once"
                self.exchange = (action, self.now)
            elif isinstance(action, events.Renew):
                assert self.renew is None, "two renewals at once"
                self.renew = (action, self.now)
            elif isinstance(action, events.Wait):
                self.waiting = True
            elif isinstance(action, events.StopWaiting):
                self.waiting = False
            elif isinstance(action, events.Spawn):
                self.spawning.add(action.index)
            elif isinstance(action, events.Kill):
                self.killed.add(action.index)

    def _pass(self) -> None:
        """A pass of the loop; a child asked for is forked and ready at once."""
        while True:
            self.book.invariants()
            self._take(self.book.start_jobs(self.now))
            self.book.step(self.now)
            self.book.invariants()
            self._take(self.book.take_actions())
            if not self.spawning:
                return
            for index in sorted(self.spawning):
                self.count += 1
                pid = 10_000 + self.count
                self.children[index] = Modelled(index, pid)
                ready = protocol.Ready(pid, 1, 1, False)
                self.book.apply(events.ChildSpawned(index, pid), self.now)
                self.book.apply(events.ChildSaid(index, pid, ready), self.now)
            self.spawning.clear()

    def _apply(self, event: events.Event) -> None:
        self.book.apply(event, self.now)
        self.book.invariants()
        self._pass()

    def _pick(self, pick: int, ok: Any) -> Modelled | None:
        found = [self.children[i] for i in sorted(self.children) if ok(self.children[i])]
        return found[pick % len(found)] if found else None

    # --- time and Redis -----------------------------------------------------------------

    @rule(seconds=st.sampled_from([0.0005, 0.01, 0.06, 0.1, 0.1]))
    def later(self, seconds: float) -> None:
        self.now += seconds
        self._pass()

    @precondition(lambda self: self.exchange is not None)
    @rule(jobs=st.integers(0, 4), late_s=st.sampled_from([0.0005, 0.01]))
    def exchange_answers(self, jobs: int, late_s: float) -> None:
        assert self.exchange is not None
        action, sent_at = self.exchange
        self.exchange = None
        self.now = max(self.now, sent_at + late_s)
        popped = None
        if action.pop is not None:
            now_us = round((sent_at - REDIS_OFFSET_S) * 1e6)
            popped = Popped(
                [self._leased() for _ in range(min(jobs, action.pop))], None, [], now_us
            )
        states = {
            jid: kind for kind in action.outcomes.kinds() for jid in action.outcomes.jids(kind)
        }
        self._apply(
            events.Exchanged(action.outcomes, action.pop, states, popped, sent_at, self.now)
        )

    def _leased(self, handed: bool = False) -> Leased:
        self.count += 1
        job = leased(f"j{self.count}", lease_s=30.0)
        if not handed:
            return job
        expires_us = round((self.now - REDIS_OFFSET_S + 1.0) * 1e6)
        return replace(job, expires_us=expires_us, handed=True)

    @precondition(lambda self: self.renew is not None)
    @rule(late_s=st.sampled_from([0.0005, 0.01]))
    def renewal_answers(self, late_s: float) -> None:
        assert self.renew is not None
        action, sent_at = self.renew
        self.renew = None
        self.now = max(self.now, sent_at + late_s)
        self._apply(events.Renewed(action.leases, frozenset(), sent_at))

    @precondition(lambda self: self.waiting)
    @rule(handed=st.booleans(), confirmed=st.booleans())
    def wait_ends(self, handed: bool, confirmed: bool) -> None:
        self.waiting = False
        if handed:
            job = self._leased(handed=True)
            renewed = events.Renewed({job.jid: job.token}, frozenset(), self.now)
            answer = renewed if confirmed else None  # the read renewed it itself
            self._apply(events.WaitEnded(job, "own", True, confirmed=answer))
        else:
            self._apply(events.WaitEnded())

    # --- the children, as the real one does it -----------------------------------------

    @precondition(lambda self: any(m.unread for m in self.children.values()))
    @rule(pick=st.integers(0, 3), every=st.booleans())
    def child_reads(self, pick: int, every: bool) -> None:
        """A child's reader takes the next message the master sent it (or `every` one)."""
        modelled = self._pick(pick, lambda m: m.unread)
        while modelled is not None and modelled.unread:
            modelled.child._on_message(modelled.unread.popleft())
            if not every:
                break

    @precondition(lambda self: any(_may_take(m) for m in self.children.values()))
    @rule(pick=st.integers(0, 3))
    def child_takes_its_next_job(self, pick: int) -> None:
        """A child's loop takes the next job it was sent: starts it, or skips it."""
        modelled = self._pick(pick, _may_take)
        if modelled is None:
            return
        run = modelled.child.inbox.get_nowait()
        if run is not None and modelled.child._begin(run):
            modelled.job = run
            self.started[run.jid] += 1

    @precondition(lambda self: any(m.job is not None for m in self.children.values()))
    @rule(pick=st.integers(0, 3))
    def child_finishes(self, pick: int) -> None:
        """The running job returns (Child.run_job's end)."""
        modelled = self._pick(pick, lambda m: m.job is not None)
        if modelled is None:
            return
        jid = modelled.child.running
        assert modelled.job is not None and jid == modelled.job.jid
        with modelled.child.lock:
            modelled.child.running = None
            modelled.child.deadlines.pop(jid, None)
        modelled.job = None
        modelled.child.send(protocol.Done(jid))

    @precondition(lambda self: any(m.sock.sent for m in self.children.values()))
    @rule(pick=st.integers(0, 3), every=st.booleans())
    def master_reads(self, pick: int, every: bool) -> None:
        """The master reads the next message of a child, or `every` one it sent: all
        applied, then one pass (as the loop takes the events that came meanwhile)."""
        modelled = self._pick(pick, lambda m: m.sock.sent)
        if modelled is None:
            return
        index = next(i for i, m in self.children.items() if m is modelled)
        while modelled.sock.sent:
            message = modelled.sock.sent.popleft()
            if isinstance(message, protocol.Done):
                running = self.book.slots.by_index[index].running
                assert message.jid == running, (
                    f"unexpected done from child: it ran {message.jid}, its master holds "
                    f"{running} running there"
                )
            self.book.apply(events.ChildSaid(index, modelled.pid, message), self.now)
            self.book.invariants()
            if not every:
                break
        self._pass()

    @precondition(lambda self: any(i in self.children for i in self.killed))
    @rule()
    def killed_child_exits(self) -> None:
        index = min(i for i in self.killed if i in self.children)
        self.killed.discard(index)
        modelled = self.children.pop(index)
        self._apply(events.ChildExited(index, modelled.pid, None, 9, ""))

    # --- what holds after every step ------------------------------------------------------

    @invariant()
    def every_job_starts_once(self) -> None:
        twice = [jid for jid, n in self.started.items() if n > 1]
        assert not twice, f"started more than once: {twice}"


TestBookAndChildren = histories.bounded(BookAndChildren, examples=300, steps=80)  # a few seconds
TestBookAndChildrenLong = histories.long(BookAndChildren, steps=100)  # ./dev slow


def test_a_job_withdrawn_twice_and_sent_again_starts_once() -> None:
    """The shortest history Hypothesis found before the child counted its withdrawn
    Runs: one child, j3 pipelined behind j2, withdrawn at two ticks (j2 is long) and
    sent again each time. The second withdraw left the child with no deadline for
    j3, so its second Run was skipped ('lease') while its third was on the way: the
    master took that skip for the job's live Run, gave j3 back and sent it a fourth
    time, and the child ran both the third and the fourth."""
    machine = BookAndChildren()
    try:
        machine.children_up_and_jobs_leased(concurrency=1, jobs=2)
        machine.later(seconds=0.1)  # j3 waits behind j2: withdrawn
        machine.child_reads(every=True, pick=0)
        machine.child_takes_its_next_job(pick=0)  # j2 starts
        machine.master_reads(every=False, pick=0)  # j3 skipped: given back, sent again
        machine.later(seconds=0.1)
        machine.child_reads(every=True, pick=0)  # the second Run, then its withdraw
        machine.master_reads(every=False, pick=0)  # skipped again: a third Run
        machine.child_finishes(pick=0)
        machine.child_takes_its_next_job(pick=0)  # j3's first Run: withdrawn
        machine.child_takes_its_next_job(pick=0)  # its second: withdrawn too
        machine.child_reads(every=False, pick=0)  # its third Run comes
        machine.master_reads(every=True, pick=0)  # j2 done: j3 runs, as far as it knows
        for _ in range(3):
            machine.child_takes_its_next_job(pick=0)
            machine.child_finishes(pick=0)
            machine.child_reads(every=True, pick=0)
            machine.master_reads(every=True, pick=0)
        machine.every_job_starts_once()
        assert machine.started["j3"] == 1
        held = machine.book.ledger.held.get("j3")
        assert held is None or held.where is Where.REPORTING, "j3 ran and was reported"
    finally:
        machine.teardown()
