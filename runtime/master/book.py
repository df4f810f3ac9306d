"""The master's one book: the jobs it holds (the ledger), its children, its link
to Redis and the reports it owes, and the decisions over them. Events come in
(`apply`), each pass decides (`step`), and what must be done goes out as
actions (`take_actions`) for the loop to carry out; `next_wake` says when a pass
has something to do without news, `done` when the master may exit. The loop
reads nothing else but a few answers for the loop's own duties (`start_jobs`,
`rss_wanted`, `ready`, `start_failure`, `describe`, `link.up`).

The book is composed of narrow parts, each owning its state:

    Ledger    every held job and where it is (ledger.py), changed by one `move`
    Slots     the children (slots.py)
    Capacity  the mode, the children wanted, prefetch and pipelining (capacity.py)
    Intake    exchanges, pops, handoffs, waiting for work (intake.py)
    HandOut   jobs to children: idle ones first, then pipelines (handout.py)
    JobFlow   jobs through children: messages, endings, giving back (jobs.py)
    Renewals  keeping the leases alive (renewals.py)
    Reports   the outcomes owed to Redis (reports.py)
    Link      up or down, backoff (link.py)

A master may serve queues of several namespaces of a sharded site (one Redis
slot, perhaps one server, each: runtime.queue.shards) with one set of children.
Each namespace is a `Shard` with its own Link, Reports, Intake and Renewals and
its own registration; the ledger, the slots and the capacity are shared, and
every held job remembers its shard (`Held.shard`): it is renewed and reported
there, and a namespace out of reach stops, and fences, its own jobs only.
`link`, `reports`, `intake` and `renewals` are the first shard's (the only one's,
for a master of one namespace).

Pure: no I/O, no asyncio, no clock: times are monotonic seconds the loop passes
in, and the book imports nothing that loads redis, asyncio or uvloop. Nothing but
the loop writes the book. `invariants()` checks it (tests only).
"""

from __future__ import annotations

import logging
import math
import random
import signal
from collections.abc import Sequence
from typing import assert_never

from runtime import config
from runtime.errors import Condition, RedisCondition
from runtime.master import events, plan, reasons
from runtime.master.capacity import Capacity
from runtime.master.handout import HandOut
from runtime.master.held import (
    HANDOFF_EARLY_S,
    STOP_REPORT_WAIT_S,
    TICK_S,
    WITHDRAW_AFTER_S,
    Mode,
    Where,
)
from runtime.master.intake import Intake
from runtime.master.jobs import JobFlow
from runtime.master.ledger import Ledger
from runtime.master.link import Link
from runtime.master.renewals import Renewals
from runtime.master.reports import Reports
from runtime.master.slots import Slots
from runtime.vocabulary import FailureGroup

log = logging.getLogger(__name__)

REGISTER_EVERY_S = 600.0  # the master's registration (host, pid, queues) is renewed this often


class Shard:
    """One namespace the master serves: its queues, and its parts of the book."""

    def __init__(
        self, index: int, namespace: str, queues: tuple[str, ...], link: Link, reports: Reports
    ) -> None:
        self.index, self.namespace, self.queues = index, namespace, queues
        self.link, self.reports = link, reports
        self.intake: Intake
        self.renewals: Renewals
        self.registered_target: int | None = None  # the children's number Redis was told
        self.registered_at = -math.inf

    def settled(self, held: int) -> bool:
        """Nothing of it left to tell Redis (`held`: jobs of this shard held)."""
        intake = self.intake
        return (
            not held
            and not self.reports.outcomes
            and not intake.exchanging
            and not intake.registered
        )


class Book:
    def __init__(
        self,
        worker: config.WorkerSettings,
        worker_id: str,
        rng: random.Random | None = None,
        shards: Sequence[tuple[str, tuple[str, ...]]] | None = None,
    ) -> None:
        """`shards`: (namespace, its queues) for each namespace served (None: one,
        with every queue of `worker`)."""
        self.worker, self.worker_id = worker, worker_id
        self.actions: list[events.Action] = []  # every part appends here; the loop takes them
        self.slots = Slots()
        served = list(shards or [("", worker.queues)])
        self.ledger = Ledger(self.slots, len(served))
        self.capacity = Capacity(worker, worker_id, self.slots, self.ledger, len(served))
        rng = rng or random.Random()
        self.shards = [
            Shard(
                i,
                ns,
                qs,
                Link(worker_id if len(served) == 1 else f"{worker_id} ns={ns}", rng),
                Reports(),
            )
            for i, (ns, qs) in enumerate(served)
        ]
        sharded = bool(shards)  # shards given: several namespaces
        first = self.shards[0]
        self.flow = JobFlow(
            worker,
            worker_id,
            self.ledger,
            self.slots,
            self.capacity,
            first.reports,
            self.actions,
            [shard.reports for shard in self.shards] if sharded else None,
        )
        self.handing = HandOut(
            worker,
            worker_id,
            self.ledger,
            self.slots,
            self.capacity,
            self.actions,
            self.flow.release,
            [shard.link for shard in self.shards] if sharded else None,
        )
        for shard in self.shards:
            parts = (self.ledger, self.capacity, shard.link, shard.reports, self.actions)
            let_go = self.flow.let_go
            shard.intake = Intake(
                worker, worker_id, *parts, shard.index, shard.queues, let_go=let_go
            )
            shard.renewals = Renewals(
                worker_id, self.ledger, shard.link, self.actions, self.flow.let_go, shard.index
            )
        self.link, self.reports = first.link, first.reports
        self.intake, self.renewals = first.intake, first.renewals
        self.drain_at: float | None = None
        self.stopping_since: float | None = None
        self.checked_at = -math.inf
        self.several = len(self.shards) > 1  # namespaces served (a sharded site's worker)
        self.turn = 0  # the shard that goes first in the next pass, of several

    # --- the public face -------------------------------------------------------------

    def apply(self, event: events.Event, now: float) -> None:  # noqa: PLR0912 - a case an event
        """Takes in one event (mypy checks that every kind has its case)."""
        match event:
            case events.ChildSaid():  # the most common first
                self.flow.on_child_said(event, now)
            case events.Exchanged():
                self.shards[event.shard].intake.on_exchanged(event, now)
            case events.Renewed():
                shard = self.shards[event.shard]
                if shard.renewals.on_renewed(event, now):
                    shard.intake.want_work = True
            case events.WaitEnded():
                shard = self.shards[event.shard]
                shard.intake.on_wait_ended(event, now)
                if event.confirmed is not None:  # renewed as it came: it may start now
                    shard.renewals.on_confirmed(event.confirmed, now)
            case events.ChildExited():
                self.flow.on_child_exited(event, now)
            case events.ExchangeFailed() | events.WaitFailed():
                shard = self.shards[event.shard]
                shard.intake.on_failed(event, now)
                self._redis_failed(shard, event.condition, event.detail, now)
            case events.RenewFailed():
                shard = self.shards[event.shard]
                shard.renewals.renewing = False
                self._redis_failed(shard, event.condition, event.detail, now)
            case events.ChildSpawned():
                self.slots.spawned(event.index, event.pid)
            case events.SpawnFailed():
                log.error("could not fork a child: %s worker=%s", event.error, self.worker_id)
                self.slots.spawn_failed(event.index, now)
            case events.ChildPrinted():
                self.flow.on_child_printed(event, now)
            case events.ChildBroke():
                if (slot := self.slots.get(event.index, event.pid)) is not None:
                    why = f"protocol error from child: {event.error}"
                    self.flow.kill(slot, reasons.Ending(FailureGroup.PROTOCOL_ERROR, why))
            case events.Signalled():
                self._on_signal(event.intent, now)
            case events.ServerReplaced():
                self.actions.extend(self.slots.replaced(event.generation))
            case events.ServerExited():
                self._server_exited(event)
            case events.Rss():
                self.slots.rss(event.by_index)
            case events.Cancelled():
                self.flow.on_cancelled(event, now)
            case _:
                assert_never(event)

    def step(self, now: float) -> None:
        """Decides what to do now: checks on running jobs, children to start or stop,
        jobs to hand out, leases to renew, reports and pops to send, waiting."""
        capacity, shards = self.capacity, self.shards
        for shard in shards:
            intake = shard.intake
            if intake.wake_at is not None and now >= intake.wake_at:
                intake.want_work, intake.wake_at = True, None  # something came due: pop again
        if now - self.checked_at >= TICK_S:
            self.checked_at = now
            self._check_running(now)
            self._withdraw_stuck(now)
            if self.several:
                self._drop_unconfirmed(now)
        accepting = capacity.accepting()  # neither call below changes it
        if not accepting:
            self._stop_leasing(now)
        self.actions += self.slots.reconcile(capacity.target, capacity.mode is Mode.RUN, now)
        if accepting:
            self.handing.hand_out(now)
        if self.several:  # the first to pop takes the room: each shard in its turn
            self.turn = (self.turn + 1) % len(shards)
            shards = shards[self.turn :] + shards[: self.turn]
        for shard in shards:
            intake = shard.intake
            shard.renewals.maybe_renew(now)
            intake.maybe_exchange(now)
            intake.maybe_wait(now)
            self._maybe_register(shard, now)

    def take_actions(self) -> list[events.Action]:
        actions = self.actions[:]  # a copy, then emptied: every part holds this list
        del self.actions[:]
        return actions

    def start_jobs(self, now: float) -> list[events.Action]:
        """Jobs waiting for a child go to the idle ones now (the loop sends them
        before anything else: one send a child); the actions of that alone."""
        if self.ledger.buffer and self.capacity.accepting() and self.slots.idle_count():
            self.handing.hand_out(now)
            return self.take_actions()
        return []

    def next_wake(self, now: float) -> float | None:
        """Seconds until a pass has something to do without news (None: nothing)."""
        capacity, ledger = self.capacity, self.ledger
        dues: list[float | None] = []
        for shard in self.shards:
            intake = shard.intake
            dues += [intake.exchange_at(now), shard.renewals.at(now), intake.wake_at]
            if shard.link.up:
                dues.append(shard.registered_at + REGISTER_EVERY_S)
            elif self.stopping_since is not None:
                dues.append(max(now + TICK_S, self.stopping_since + STOP_REPORT_WAIT_S))
        if self.drain_at is not None and self.drain_at > now:
            dues.append(self.drain_at)
        if ledger.timed:
            dues.append((ledger.held[ledger.timed[0]].start_at or now) - HANDOFF_EARLY_S)
        if capacity.mode is Mode.RUN and len(self.slots) < capacity.target:
            dues.append(self.slots.pause_until(now) or now)
        if capacity.mode is not Mode.RUN or self.slots.any_busy():
            dues.append(self.checked_at + TICK_S)
        first: float | None = None  # every pass: compared in a loop, no list or min()
        for due in dues:
            if due is not None and (first is None or due < first):
                first = due
        if first is None:
            return None
        return first - now if first > now else 0.0

    def done(self, now: float) -> bool:
        """Stopping, and nothing left to do (or Redis has been out of reach too long
        to report what is left: said in the log)."""
        if self.capacity.mode is Mode.RUN or self.slots.any_busy():
            return False
        held = [0] * len(self.shards)
        for h in self.ledger.held.values():
            held[h.shard] += 1
        waiting = [shard for shard in self.shards if not shard.settled(held[shard.index])]
        if not waiting:
            return True
        since = self.stopping_since if self.stopping_since is not None else now
        if all(not shard.link.up for shard in waiting) and now - since >= STOP_REPORT_WAIT_S:
            for shard in waiting:
                log.warning(
                    "exiting with %d reports unsent: Redis is out of reach; their "
                    "leases will run out and the jobs run again worker=%s",
                    held[shard.index],
                    shard.link.worker_id,
                )
            return True
        return False

    def ready(self) -> bool:
        """Every wanted child is up: the master may say READY."""
        return self.slots.ready(self.capacity.target)

    @property
    def start_failure(self) -> str | None:
        """Why a child could not start (its sandbox), if one could not."""
        return self.flow.start_failure

    def rss_wanted(self, now: float) -> list[tuple[int, int]]:
        """(index, pid) of the children whose memory the next check needs, when a
        check is due (then the loop reads them and applies an `Rss` event)."""
        w = self.worker
        if not (w.memory_limit_mib or w.max_memory_per_child_mib):
            return []
        if now - self.checked_at < TICK_S:
            return []
        return [(s.index, s.pid) for s in self.slots.busy() if s.pid is not None]

    def describe(self) -> str:
        capacity = self.capacity
        flags = [capacity.mode.value] if capacity.mode is not Mode.RUN else []
        flags += ["paused"] if capacity.paused else []
        if not self.several:
            flags += [f"redis-down({self.link.condition})"] if not self.link.up else []
        else:
            flags += [
                f"redis-down({shard.namespace}:{shard.link.condition})"
                for shard in self.shards
                if not shard.link.up
            ]
        text = f"queues={','.join(self.worker.queues)} children={len(self.slots)}/"
        text += f"{capacity.target} busy={len(self.slots.busy())}"
        return text + (f" [{' '.join(flags)}]" if flags else "")

    def invariants(self) -> None:
        """Raises AssertionError unless the book is consistent: the ledger's own
        checks, and every job that is reporting has its report waiting or out.
        Walks everything: for the tests, never on the loop's path."""
        self.ledger.invariants()
        owed = [shard.reports.jids() for shard in self.shards]
        for jid, held in self.ledger.held.items():
            if held.where is Where.REPORTING:
                assert jid in owed[held.shard], (
                    f"{jid} is reporting but no report of it waits or is out in its shard"
                )
        for shard in self.shards:
            reports = shard.reports
            assert reports.since is not None or not reports.outcomes, "reports, no since"
            assert shard.intake.exchanging == (reports.sending is not None), "sending"
            assert self.capacity.asking[shard.index] >= 0, "asking"
        assert len(self.capacity.asking) == len(self.shards), "asking"

    # --- the mode --------------------------------------------------------------------

    def _on_signal(self, intent: events.Intent, now: float) -> None:
        log.info("signal received: %s worker=%s", intent.value, self.worker_id)
        Intent, capacity = events.Intent, self.capacity  # noqa: N806 - a short alias
        if intent is Intent.DRAIN and capacity.mode is not Mode.DRAIN:
            capacity.mode, self.drain_at = Mode.DRAIN, now + self.worker.grace_s
        elif intent is Intent.FINISH and capacity.mode is Mode.RUN:
            capacity.mode = Mode.FINISH
        elif intent is Intent.KILL_JOBS:
            for slot in self.slots.busy():
                why = reasons.killed(9, "SIGUSR1 to the master", FailureGroup.KILLED)
                self.flow.kill(slot, why)
        elif intent in (Intent.PAUSE, Intent.RESUME):
            capacity.paused = intent is Intent.PAUSE
            for shard in self.shards:
                shard.intake.want_work = shard.intake.want_work or not capacity.paused
        elif intent is Intent.REPLACE:
            self.actions.append(events.ReplaceServer())
        elif intent in (Intent.GROW, Intent.SHRINK):
            capacity.target = max(0, capacity.target + (1 if intent is Intent.GROW else -1))
        if capacity.mode is not Mode.RUN and self.stopping_since is None:
            self.stopping_since = now

    def _server_exited(self, event: events.ServerExited) -> None:
        """The fork server died (its children with it): a new one, unless stopping."""
        running = self.capacity.mode is Mode.RUN
        then = "; starting a new one" if running else ""
        how = reasons.process_ended(event.code, event.signal)
        log.error("fork server %s%s pid=%d worker=%s", how, then, event.pid, self.worker_id)
        if running:
            self.actions.append(events.ReplaceServer())

    def _stop_leasing(self, now: float) -> None:
        """Not accepting (paused, stopping): pipelined jobs are asked back, jobs leased
        ahead go back to Redis, and no job is handed to us any more."""
        for slot in self.slots.busy():
            self.flow.withdraw(slot, now)
        held_by = self.ledger.held
        ledger = self.ledger
        for jid in [*ledger.confirming, *ledger.buffer, *ledger.timed]:
            self.flow.release(held_by[jid], now)
        for shard in self.shards:
            shard.intake.stop_waiting()

    def _redis_failed(self, shard: Shard, condition: Condition, detail: str, now: float) -> None:
        shard.link.failed(now, condition, detail, self.ledger.shortest_lease())
        if condition == RedisCondition.OOM:  # a full Redis frees what it may, then we wait
            self.actions.append(events.Trim(shard.index))

    def _maybe_register(self, shard: Shard, now: float) -> None:
        """Who this master is goes to Redis (each namespace's) at start, when its
        children's number changes, and every REGISTER_EVERY_S (it expires)."""
        fresh = now - shard.registered_at < REGISTER_EVERY_S
        target = self.capacity.target
        if shard.link.up and (shard.registered_target != target or not fresh):
            shard.registered_target, shard.registered_at = target, now
            self.actions.append(events.Register(target, shard.index))

    # --- checks on running jobs -----------------------------------------------------

    def _check_running(self, now: float) -> None:
        memory_limit = (self.worker.memory_limit_mib or 0) << 20
        grace_s, kill = self.worker.kill_grace_s, self.flow.kill
        for slot in self.slots.busy():
            held = self.ledger.held[slot.running or ""]
            if now >= plan.kill_at(held.lease_until, held.renew_length_s()):
                kill(slot, reasons.UNRENEWED)
            elif held.terminated_at is None and now - held.last_sign > held.leased.timeout_s:
                why = f"timed out after {held.leased.timeout_s:g} s"
                kill(slot, reasons.Ending(FailureGroup.TIMEOUT, why), signal.SIGTERM)
                self.ledger.terminated(held, now)
            elif held.terminated_at is not None and now - held.terminated_at > grace_s:
                if held.killed_at is None and slot.kill is not None:
                    self.ledger.killed(held, now)
                    why = f"killed by signal 9, still running {grace_s:g} s after SIGTERM"
                    slot.kill = reasons.Ending(slot.kill.group, f"{slot.kill.reason}; {why}")
                self.actions.append(events.Kill(slot.index, signal.SIGKILL))
            elif memory_limit and slot.rss_bytes > memory_limit:
                why = f"memory limit {self.worker.memory_limit_mib} MiB"
                kill(slot, reasons.killed(9, why, FailureGroup.MEMORY_LIMIT))
            elif self.drain_at is not None and now >= self.drain_at:
                kill(slot, reasons.SHUTDOWN)

    def _drop_unconfirmed(self, now: float) -> None:
        """A job handed to a namespace now out of reach, whose short first lease ran
        out unconfirmed, is not ours: it never started, Redis gives it to the next
        pop. Dropped, it holds no room the other namespaces' jobs need."""
        held_by, shards = self.ledger.held, self.shards
        for jid in list(self.ledger.confirming):
            held = held_by[jid]
            if now >= held.lease_until and not shards[held.shard].link.up:
                log.warning(
                    "job handed to this master not confirmed, its lease ran out jid=%s "
                    "queue=%s worker=%s",
                    jid,
                    held.leased.queue,
                    shards[held.shard].link.worker_id,
                )
                self.ledger.move(jid, None, now=now)

    def _withdraw_stuck(self, now: float) -> None:
        """Pipelined jobs waiting behind a long-running one go to another child."""
        for slot in self.slots.busy():
            running = self.ledger.held[slot.running or ""]
            if slot.queued and running.running_for(now) > WITHDRAW_AFTER_S:
                self.flow.withdraw(slot, now)
