"""The master's one book of held jobs: a record per jid from the moment a pop
leases it until Redis has taken its report, saying where the job is:

    buffered   leased, waiting for a child          timed      leased before its
    pipelined  sent to a child, behind its running  turn; to a child just before it
    running    its child runs it                    reporting  outcome sent, not yet taken

Pure: events come in (`apply`), each pass decides (`step`), and what must be
done goes out as actions (`take_actions`) for the loop to carry out. No I/O,
no asyncio, no clock: times are monotonic seconds the loop passes in. Nothing
but the loop writes the book.
"""

from __future__ import annotations

import logging
import math
import random
import signal
from collections import deque
from typing import Any

from runtime import config
from runtime.children import protocol
from runtime.master import events, plan, reasons
from runtime.master.held import (
    HANDOFF_EARLY_S,
    STOP_REPORT_WAIT_S,
    TICK_S,
    WITHDRAW_AFTER_S,
    Held,
    Mode,
    Where,
)
from runtime.master.intake import Intake
from runtime.master.jobs import JobFlow
from runtime.master.link import Link
from runtime.master.slots import Slot, Slots, SlotState
from runtime.queue.leases import Outcomes
from runtime.vocabulary import FailureGroup

log = logging.getLogger(__name__)

PIPELINING_LOG_EVERY_S = 60.0  # pipelining can flip often under changing load: one line a minute
UNKNOWN = object()  # a cached value not worked out yet
REGISTER_EVERY_S = 600.0  # the master's registration (host, pid, queues) is renewed this often


class Book(Intake, JobFlow):
    def __init__(
        self, worker: config.WorkerSettings, worker_id: str, rng: random.Random | None = None
    ) -> None:
        self.worker = worker
        self.worker_id = worker_id
        self.mode = Mode.RUN
        self.paused = False
        self.target = worker.concurrency
        self.drain_at: float | None = None
        self.stopping_since: float | None = None
        self.held: dict[str, Held] = {}
        self.buffer: deque[str] = deque()
        self.confirming: list[str] = []  # handed to us, started once renewed
        self.timed: list[str] = []  # by start_at
        self.outcomes = Outcomes()
        self.reports_since: float | None = None  # when the oldest unsent report was made
        self.slots = Slots()
        self.link = Link(worker_id, rng or random.Random())
        self.queues = list(worker.queues)
        self.exchanging = self.renewing = self.waiting = False
        self.want_work = True  # the last pop was full, or something woke us since
        self.wake_at: float | None = None  # pop again then (something comes due)
        self.registered = False  # idle on our queues in Redis: jobs may be handed to us
        self.offset: float | None = None  # local monotonic - Redis time (s), conservative
        self.jobs_seen, self.avg_run_s = 0, 0.0
        self.capacity_key: tuple[int, int, float] | None = None
        self.capacity = (0, 0)
        self.pipelining = False
        self.pipelining_logged_at, self.pipelining_flips = -math.inf, 0
        self.now = -math.inf  # the time of the latest event or pass
        self.checked_at = -math.inf
        self.start_failure: str | None = None  # a child could not start (sandbox): why
        self.actions: list[events.Action] = []
        self.cancelled_reports: set[str] = set()  # reports of jobs cancelled meanwhile
        self.registered_target: int | None = None  # the children's number Redis was told
        self.registered_at = -math.inf
        self.renew_due: float | object | None = UNKNOWN

    def take_actions(self) -> list[events.Action]:
        actions, self.actions = self.actions, []
        return actions

    # --- the mode --------------------------------------------------------------------

    def accepting(self) -> bool:
        return self.mode is Mode.RUN and not self.paused

    def _on_signal(self, intent: events.Intent, now: float) -> None:
        log.info("signal received: %s worker=%s", intent.value, self.worker_id)
        Intent = events.Intent  # noqa: N806 - a short alias for the table below
        if intent is Intent.DRAIN and self.mode is not Mode.DRAIN:
            self.mode, self.drain_at = Mode.DRAIN, now + self.worker.grace_s
        elif intent is Intent.FINISH and self.mode is Mode.RUN:
            self.mode = Mode.FINISH
        elif intent is Intent.KILL_JOBS:
            for slot in self.slots.busy():
                self._kill(slot, reasons.killed(9, "SIGUSR1 to the master", FailureGroup.KILLED))
        elif intent in (Intent.PAUSE, Intent.RESUME):
            self.paused = intent is Intent.PAUSE
            self.want_work = self.want_work or not self.paused
        elif intent is Intent.REPLACE:
            self.actions.append(events.ReplaceServer())
        elif intent in (Intent.GROW, Intent.SHRINK):
            self.target = max(0, self.target + (1 if intent is Intent.GROW else -1))
        if self.mode is not Mode.RUN and self.stopping_since is None:
            self.stopping_since = now

    def _stop_leasing(self, now: float) -> None:
        """Not accepting (paused, stopping): pipelined jobs are asked back, jobs leased
        ahead go back to Redis, and no job is handed to us any more."""
        for slot in self.slots.busy():
            self._withdraw(slot, everything=True)
        for jid in [*self.confirming, *self.buffer, *self.timed]:
            self._release(self.held[jid])
        self.confirming.clear()
        self.buffer.clear()
        self.timed.clear()
        if self.waiting:
            self.waiting = False
            self.actions.append(events.StopWaiting())

    # --- events ------------------------------------------------------------------

    def apply(self, event: events.Event, now: float) -> None:
        """Takes in one event."""
        self.now = now
        if isinstance(event, events.ExchangeFailed | events.RenewFailed | events.WaitFailed):
            self._on_redis_failed(event, now)
            return
        handler: Any = {
            events.ChildSaid: self._on_child_said,
            events.Exchanged: self._on_exchanged,
            events.Renewed: self._on_renewed,
            events.WaitEnded: self._on_wait_ended,
            events.ChildExited: self._on_child_exited,
            events.ChildSpawned: self._on_spawned,
            events.SpawnFailed: self._on_spawn_failed,
            events.ChildBroke: self._on_broke,
            events.Signalled: lambda e, t: self._on_signal(e.intent, t),
            events.ServerReplaced: lambda e, t: self.actions.extend(
                self.slots.replaced(e.generation)
            ),
            events.Rss: self._on_rss,
            events.Cancelled: self._on_cancelled,
        }[type(event)]
        handler(event, now)

    def _on_redis_failed(
        self, event: events.ExchangeFailed | events.RenewFailed | events.WaitFailed, now: float
    ) -> None:
        if isinstance(event, events.ExchangeFailed):
            self.exchanging = False
            self.outcomes.merge(event.outcomes)
            self.reports_since = min(self.reports_since or now, event.sent_at)
        elif isinstance(event, events.RenewFailed):
            self.renewing = False
        else:
            self.waiting = False
            self.want_work = True  # the next exchange pops (and probes) instead
        self.link.failed(now, event.condition, event.detail, self._shortest_lease())

    def _on_spawned(self, event: events.ChildSpawned, now: float) -> None:
        slot = self.slots.get(event.index)
        if slot is not None and slot.state is SlotState.SPAWNING:
            slot.pid, slot.state = event.pid, SlotState.STARTING

    def _on_spawn_failed(self, event: events.SpawnFailed, now: float) -> None:
        log.error("could not fork a child: %s worker=%s", event.error, self.worker_id)
        self.slots.by_index.pop(event.index, None)
        self.slots.crashed(now)

    def _on_broke(self, event: events.ChildBroke, now: float) -> None:
        slot = self.slots.get(event.index, event.pid)
        if slot is not None:
            why = f"protocol error from child: {event.error}"
            self._kill(slot, reasons.Ending(FailureGroup.PROTOCOL_ERROR, why))

    def _on_rss(self, event: events.Rss, now: float) -> None:
        for index, rss in event.by_index.items():
            if (slot := self.slots.get(index)) is not None:
                slot.rss_bytes = rss

    # --- each pass ---------------------------------------------------------------

    def step(self, now: float) -> None:
        """Decides what to do now: checks on running jobs, children to start or stop,
        jobs to hand out, leases to renew, reports and pops to send, waiting."""
        self.now = now
        if self.wake_at is not None and now >= self.wake_at:
            self.want_work, self.wake_at = True, None  # something came due: pop again
        if now - self.checked_at >= TICK_S:
            self.checked_at = now
            self._check_running(now)
            self._withdraw_stuck(now)
        if not self.accepting():
            self._stop_leasing(now)
        self.actions += self.slots.reconcile(self.target, self.mode is Mode.RUN, now)
        if self.accepting():
            self.hand_out(now)
        self._maybe_renew(now)
        self._maybe_exchange(now)
        self._maybe_wait()
        self._maybe_register(now)

    def _maybe_register(self, now: float) -> None:
        """Who this master is goes to Redis at start, when its children's number
        changes, and every REGISTER_EVERY_S (the registration expires)."""
        fresh = now - self.registered_at < REGISTER_EVERY_S
        if self.link.up and (self.registered_target != self.target or not fresh):
            self.registered_target, self.registered_at = self.target, now
            self.actions.append(events.Register(self.target))

    def next_wake(self, now: float) -> float | None:
        """Seconds until a pass has something to do without news (None: nothing)."""
        dues = [self._exchange_at(now), self._renew_at(now), self.wake_at]
        if self.drain_at is not None and self.drain_at > now:
            dues.append(self.drain_at)
        if self.timed:
            dues.append((self.held[self.timed[0]].start_at or now) - HANDOFF_EARLY_S)
        if self.mode is Mode.RUN and len(self.slots) < self.target:
            dues.append(self.slots.pause_until(now) or now)
        if self.slots.busy() or self.mode is not Mode.RUN:
            dues.append(self.checked_at + TICK_S)
        if self.link.up:
            dues.append(self.registered_at + REGISTER_EVERY_S)
        if self.stopping_since is not None and not self.link.up:
            dues.append(max(now + TICK_S, self.stopping_since + STOP_REPORT_WAIT_S))
        known = [d for d in dues if d is not None]  # every pass: no generator for min
        return max(0.0, min(known) - now) if known else None

    def ready(self) -> bool:
        """Every wanted child is up: the master may say READY."""
        return self.slots.ready(self.target)

    def done(self, now: float) -> bool:
        """Stopping, and nothing left to do (or Redis has been out of reach too long
        to report what is left: said in the log)."""
        if self.mode is Mode.RUN or self.slots.busy():
            return False
        if not self.held and not self.outcomes and not self.exchanging and not self.registered:
            return True
        since = self.stopping_since if self.stopping_since is not None else now
        if not self.link.up and now - since >= STOP_REPORT_WAIT_S:
            log.warning("exiting with %d reports unsent: Redis is out of reach; their "
                        "leases will run out and the jobs run again worker=%s",
                        len(self.held), self.worker_id)  # fmt: skip
            return True
        return False

    def describe(self) -> str:
        flags = [self.mode.value] if self.mode is not Mode.RUN else []
        flags += ["paused"] if self.paused else []
        flags += [f"redis-down({self.link.condition})"] if not self.link.up else []
        text = f"queues={','.join(self.worker.queues)} children={len(self.slots)}/{self.target}"
        text += f" busy={len(self.slots.busy())}"
        return text + (f" [{' '.join(flags)}]" if flags else "")

    # --- capacity ----------------------------------------------------------------

    def _capacity(self) -> tuple[int, int]:
        """(pipeline depth, prefetch) for the jobs seen so far: computed again only
        when what they depend on changed (they are asked several times a job)."""
        key = (self.jobs_seen, self.target, self.avg_run_s)
        if key != self.capacity_key:
            self.capacity_key = key
            self.capacity = (
                plan.pipeline_depth(*key, self.worker.pipeline),
                plan.prefetch(*key, self.worker.prefetch),
            )
        return self.capacity

    def depth(self) -> int:
        depth = self._capacity()[0]
        if bool(depth) != self.pipelining:
            self.pipelining = bool(depth)
            self.pipelining_flips += 1
            if self.now - self.pipelining_logged_at >= PIPELINING_LOG_EVERY_S:
                more = self.pipelining_flips - 1
                log.info("pipelining %s: jobs take %.2f ms on average%s worker=%s",
                         "on" if depth else "off", self.avg_run_s * 1000,
                         f" ({more} more changes since the last line)" if more else "",
                         self.worker_id)  # fmt: skip
                self.pipelining_logged_at, self.pipelining_flips = self.now, 0
        return depth

    def prefetch(self) -> int:
        return self._capacity()[1]

    def _pipeline_room(self, slot: Slot, depth: int) -> int:
        most = self.worker.max_jobs_per_child
        return plan.pipeline_room(depth, len(slot.queued), slot.jobs_done, most)

    def _slots_free(self) -> int:
        depth = self.depth()
        free = len(self.slots.idle())
        if depth:
            free += sum(self._pipeline_room(s, depth) for s in self.slots.accepting())
        return free

    def room(self) -> int:
        """How many more jobs to lease now."""
        if not self.accepting():
            return 0
        held_ahead = len(self.buffer) + len(self.confirming)
        return max(0, self._slots_free() + self.prefetch() - held_ahead)

    def _urgent_room(self) -> int:
        """`room`, when leasing more is urgent (a child would wait, or the buffer ran
        half empty); else 0. The free slots are counted once."""
        if not self.accepting():
            return 0
        free, prefetch, buffered = self._slots_free(), self.prefetch(), len(self.buffer)
        room = free + prefetch - buffered
        urgent = (buffered == 0 and free > 0) or buffered < (prefetch + 1) // 2
        return room if room > 0 and urgent else 0

    def _shortest_lease(self) -> float | None:
        return min((h.renew_length_s() for h in self.held.values()), default=None)

    # --- renewing leases -----------------------------------------------------------

    def _hold(self, held: Held) -> None:
        """A job leased or handed to us is held from now."""
        self.held[held.jid] = held
        due = held.renew_due_at()
        if self.renew_due is None:
            self.renew_due = due
        elif isinstance(self.renew_due, float):
            self.renew_due = min(self.renew_due, due)

    def _renew_due(self) -> float | None:
        """When the first lease needs renewing, or earlier: worked out from all held
        jobs when unknown (at start, after a renewal), then lowered as jobs come
        (`_hold`), not raised as they go. A due time that has come is worked out
        again before anything is renewed (`_maybe_renew`): scanning every held job
        at each event was a twentieth of the master's time in a drain."""
        if self.renew_due is UNKNOWN:
            self.renew_due = min(
                (h.renew_due_at() for h in self.held.values() if not h.lost), default=None
            )
        return self.renew_due  # type: ignore[return-value]

    def _renew_at(self, now: float) -> float | None:
        due = self._renew_due()
        if due is None or self.renewing:
            return None
        return due if self.link.up else max(due, self.link.retry_at)

    def _maybe_renew(self, now: float) -> None:
        due = self._renew_at(now)
        if due is not None and due <= now:  # a bound: the job it was for may be gone
            self.renew_due = UNKNOWN
            due = self._renew_at(now)
        if due is None or due > now or not self.link.may_call(now):
            return
        leases = {jid: h.leased.token for jid, h in self.held.items() if not h.lost}
        if not leases:
            return
        self.renewing = True
        outage_ms = self.link.outage_ms(now)
        self.link.sending()
        self.actions.append(events.Renew(leases, outage_ms))

    def _on_renewed(self, event: events.Renewed, now: float) -> None:
        self.renewing = False
        self.renew_due = UNKNOWN  # the leases' ends move
        if self.link.succeeded(now, event.sent_at):
            self.want_work = True
        for jid, token in event.leases.items():
            held = self.held.get(jid)
            if held is None or held.leased.token != token or held.where is Where.REPORTING:
                continue
            if jid in event.lost:
                self._lose(held)
                continue
            held.lease_until = event.sent_at + held.leased.lease_s
            held.renewed = True
            if held.where is Where.CONFIRMING:  # a handed job, confirmed: it may start
                held.where = Where.BUFFERED
                self.confirming.remove(jid)
                self.buffer.appendleft(jid)
            elif held.slot is not None:
                deadline = plan.stop_before(held.lease_until, held.renew_length_s())
                self.actions.append(events.Post(held.slot, protocol.Lease(jid, deadline)))

    def _lose(self, held: Held) -> None:
        """Redis says the lease is gone: the job is not ours any more."""
        held.lost = True
        if held.where in (Where.CONFIRMING, Where.BUFFERED, Where.TIMED):  # not started
            log.warning("job leased ahead not started, its lease ran out jid=%s queue=%s "
                        "worker=%s", held.jid, held.leased.queue, self.worker_id)  # fmt: skip
        else:
            log.warning("lease lost jid=%s queue=%s worker=%s", held.jid, held.leased.queue,
                        self.worker_id)  # fmt: skip
        self._let_go(held, reasons.LOST)

    # --- checks on running jobs -----------------------------------------------------

    def _kill(self, slot: Slot, ending: reasons.Ending, sig: int = signal.SIGKILL) -> None:
        """Kills a slot's child, remembering why (the first reason wins)."""
        if slot.kill is None:
            slot.kill = ending
        self.actions.append(events.Kill(slot.index, sig))

    def _check_running(self, now: float) -> None:
        memory_limit = (self.worker.memory_limit_mib or 0) << 20
        for slot in self.slots.busy():
            held = self.held[slot.running or ""]
            if now >= plan.kill_at(held.lease_until, held.renew_length_s()):
                self._kill(slot, reasons.UNRENEWED)
            elif held.terminated_at is None and now - held.last_sign > held.leased.timeout_s:
                why = f"timed out after {held.leased.timeout_s:g} s"
                self._kill(slot, reasons.Ending(FailureGroup.TIMEOUT, why), signal.SIGTERM)
                held.terminated_at = now
            elif held.terminated_at is not None and now - held.terminated_at > self._grace():
                if held.killed_at is None and slot.kill is not None:
                    held.killed_at = now
                    why = f"killed by signal 9, still running {self._grace():g} s after SIGTERM"
                    slot.kill = reasons.Ending(slot.kill.group, f"{slot.kill.reason}; {why}")
                self.actions.append(events.Kill(slot.index, signal.SIGKILL))
            elif memory_limit and slot.rss_bytes > memory_limit:
                why = f"memory limit {self.worker.memory_limit_mib} MiB"
                self._kill(slot, reasons.killed(9, why, FailureGroup.MEMORY_LIMIT))
            elif self.drain_at is not None and now >= self.drain_at:
                self._kill(slot, reasons.SHUTDOWN)

    def _grace(self) -> float:
        return self.worker.kill_grace_s

    def rss_wanted(self) -> list[tuple[int, int]]:
        """(index, pid) of the children whose memory the next check needs."""
        w = self.worker
        if not (w.memory_limit_mib or w.max_memory_per_child_mib):
            return []
        return [(s.index, s.pid) for s in self.slots.busy() if s.pid is not None]

    def _withdraw_stuck(self, now: float) -> None:
        """Pipelined jobs waiting behind a long-running one go to another child."""
        for slot in self.slots.busy():
            running = self.held[slot.running or ""]
            if slot.queued and now - running.sent_at > WITHDRAW_AFTER_S:
                self._withdraw(slot, everything=False)

    def _withdraw(self, slot: Slot, everything: bool) -> None:
        for jid in slot.queued:
            held = self.held[jid]
            if not held.withdrawing:
                held.withdrawing = True
                self.actions.append(events.Post(slot.index, protocol.Withdraw(jid)))
