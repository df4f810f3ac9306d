"""The master's book, driven with plain values: no Redis, no processes, no clock.
Each test replays a short timeline of events and checks the actions that come out
and where each job is."""

from __future__ import annotations

import random
import signal
from typing import Any

import pytest

from runtime.children import protocol
from runtime.config import WorkerSettings
from runtime.errors import RedisCondition
from runtime.master import events, plan, reasons
from runtime.master.book import Book
from runtime.master.held import AHEAD_S, FLUSH_AFTER_S, TICK_S, Mode, Where
from runtime.master.slots import CRASHES_BEFORE_PAUSE, SlotState
from runtime.queue.leases import Leased, Outcomes, Popped

LEASE_S = 3.0


def leased(
    jid: str,
    *,
    lease_s: float = LEASE_S,
    timeout_s: float = 3600,
    remaining: int = 5,
    start_in_s: float | None = None,
) -> Leased:
    return Leased(
        jid=jid,
        token=f"tok-{jid}",
        klass="m:f",
        queue="q",
        data={},
        attempt=1,
        retries=5,
        remaining=remaining,
        lease_s=lease_s,
        timeout_s=timeout_s,
        start_in_s=start_in_s,
    )


class Rig:
    """A book and a clock, with helpers that play the loop's part."""

    def __init__(self, concurrency: int = 1, **options: Any) -> None:
        worker = WorkerSettings(modules=("m",), queues=("q",), concurrency=concurrency, **options)
        self.book = Book(worker, "host-1", random.Random(7))
        self.now = 1000.0
        self.pids: dict[int, int] = {}

    def step(self) -> list[events.Action]:
        self.book.step(self.now)
        self.book.invariants()
        return self.book.take_actions()

    def apply(self, event: events.Event) -> None:
        self.book.apply(event, self.now)
        self.book.invariants()

    def later(self, seconds: float) -> list[events.Action]:
        self.now += seconds
        return self.step()

    def start(self) -> None:
        """Every slot forked and ready."""
        for action in self.step():
            if isinstance(action, events.Spawn):
                self.spawned(action.index)
        assert self.book.ready()

    def spawned(self, index: int) -> None:
        pid = 100 + index + 10 * len(self.pids)
        self.pids[index] = pid
        self.apply(events.ChildSpawned(index, pid))
        self.apply(events.ChildSaid(index, pid, protocol.Ready(pid, 1, 1, False)))

    def lease(self, *jobs: Leased, wake_in_s: float | None = None) -> list[events.Action]:
        """Answers the book's pending exchange with these jobs; returns the next actions."""
        exchange = only(self.step(), events.Exchange)
        popped = Popped(list(jobs), wake_in_s, [], None)
        self.apply(
            events.Exchanged(exchange.outcomes, exchange.pop, {}, popped, self.now, self.now)
        )
        return self.step()

    def say(self, index: int, message: protocol.Message) -> None:
        self.apply(events.ChildSaid(index, self.pids[index], message))

    def exit(self, index: int, code: int | None = None, sig: int | None = None) -> None:
        self.apply(events.ChildExited(index, self.pids[index], code, sig, "some output"))

    def where(self, jid: str) -> Where | None:
        held = self.book.ledger.held.get(jid)
        return None if held is None else held.where


def only(actions: list[events.Action], kind: type[Any]) -> Any:
    found = [a for a in actions if isinstance(a, kind)]
    assert len(found) == 1, f"expected one {kind.__name__} in {actions}"
    return found[0]


def of(actions: list[events.Action], kind: type[Any]) -> list[Any]:
    return [a for a in actions if isinstance(a, kind)]


def runs(actions: list[events.Action]) -> list[tuple[int, str]]:
    return [
        (a.index, a.message.jid)
        for a in of(actions, events.Post)
        if isinstance(a.message, protocol.Run)
    ]


def test_a_leased_job_goes_to_an_idle_child_and_its_completion_is_reported_in_a_batch() -> None:
    rig = Rig()
    rig.start()
    assert runs(rig.lease(leased("a"))) == [(0, "a")]
    assert rig.where("a") is Where.RUNNING
    rig.now += 0.01
    rig.say(0, protocol.Done("a"))
    assert rig.where("a") is Where.REPORTING
    rig.book.intake.want_work = False  # the queue is empty: only the report has to go
    assert not of(rig.step(), events.Exchange), "a report waits a little for company"
    exchange = only(rig.later(FLUSH_AFTER_S), events.Exchange)
    assert exchange.outcomes.jids("complete") == ["a"]
    assert exchange.outcomes.complete["a"][1] == "tok-a"
    rig.apply(
        events.Exchanged(exchange.outcomes, exchange.pop, {"a": "complete"}, None, rig.now, rig.now)
    )
    assert rig.book.ledger.held == {}


def test_reports_go_without_a_pop_while_there_is_no_room_and_the_next_room_pops_at_once() -> None:
    rig = Rig(prefetch=0)
    rig.start()
    rig.lease(leased("a"), leased("b"))  # b waits in the buffer
    rig.now += 0.01
    rig.say(0, protocol.Done("a"))
    assert runs(rig.step()) == [(0, "b")]
    assert rig.book.capacity.room(rig.now) == 0
    exchange = only(rig.later(FLUSH_AFTER_S), events.Exchange)
    assert exchange.outcomes.jids("complete") == ["a"]
    assert exchange.pop is None, "no room: a pop of nothing would cost Redis a call"
    rig.apply(events.Exchanged(exchange.outcomes, None, {"a": "complete"}, None, rig.now, rig.now))
    assert rig.book.intake.want_work, "the next room still pops at once, without a wait"
    rig.now += 0.01
    rig.say(0, protocol.Done("b"))
    assert only(rig.step(), events.Exchange).pop == 1


def test_a_pop_leaves_young_reports_to_a_later_one_that_takes_them_together() -> None:
    rig = Rig(prefetch=0, pipeline=0)
    rig.start()
    rig.lease(leased("a"))
    rig.say(0, protocol.Done("a"))
    pop = only(rig.step(), events.Exchange)
    assert pop.pop == 1 and not pop.outcomes, "the idle child's pop goes at once, alone"
    popped = Popped([leased("b")], None, [], None)
    rig.apply(events.Exchanged(pop.outcomes, pop.pop, {}, popped, rig.now, rig.now))
    assert runs(rig.step()) == [(0, "b")]
    rig.now += FLUSH_AFTER_S / 2
    rig.say(0, protocol.Done("b"))
    exchange = only(rig.step(), events.Exchange)
    assert exchange.pop == 1 and exchange.outcomes.jids("complete") == ["a", "b"]


def test_leases_are_renewed_early_and_the_child_learns_the_new_deadline() -> None:
    rig = Rig()
    rig.start()
    rig.lease(leased("a"))
    assert not of(rig.later(LEASE_S * (plan.RENEW_AFTER - 0.01)), events.Renew)
    renew = only(rig.later(LEASE_S * 0.02), events.Renew)
    assert renew.leases == {"a": "tok-a"} and renew.outage_ms == 0
    rig.apply(events.Renewed(renew.leases, frozenset(), rig.now))
    told = only(rig.step(), events.Post).message
    assert isinstance(told, protocol.Deadline)
    assert told.deadline == pytest.approx(plan.stop_before(rig.now + LEASE_S, LEASE_S))


def test_a_lease_redis_says_is_lost_kills_its_child_and_nothing_is_reported() -> None:
    rig = Rig()
    rig.start()
    rig.lease(leased("a"))
    renew = only(rig.later(LEASE_S * 0.3), events.Renew)
    rig.apply(events.Renewed(renew.leases, frozenset({"a"}), rig.now))
    assert only(rig.step(), events.Kill).signal == signal.SIGKILL
    rig.exit(0, sig=9)
    assert rig.book.ledger.held == {} and not rig.book.reports.outcomes


def test_a_lease_that_cannot_be_renewed_stops_its_job_before_redis_lets_it_go() -> None:
    rig = Rig()
    rig.start()
    rig.lease(leased("a"))
    renew = only(rig.later(LEASE_S * 0.3), events.Renew)
    rig.apply(events.RenewFailed(renew.leases, RedisCondition.TIMEOUT, "no answer", rig.now))
    kills: list[events.Kill] = []
    while not kills:
        kills = of(rig.later(TICK_S), events.Kill)
        for retry in of([*rig.book.take_actions()], events.Renew):
            rig.apply(
                events.RenewFailed(retry.leases, RedisCondition.TIMEOUT, "no answer", rig.now)
            )
        if rig.book.renewals.renewing:
            rig.apply(
                events.RenewFailed({"a": "tok-a"}, RedisCondition.TIMEOUT, "no answer", rig.now)
            )
    assert rig.now >= plan.kill_at(1000.0 + LEASE_S, LEASE_S)
    assert rig.now < 1000.0 + LEASE_S, "killed before the lease runs out in Redis"
    rig.exit(0, sig=9)
    assert rig.book.reports.outcomes.release == {"a": "tok-a"}, "given back, no retry spent"


@pytest.mark.parametrize("late", [False, True])
def test_a_job_leased_ahead_with_less_than_a_tenth_of_its_lease_left_is_given_back_unstarted(
    late: bool,
) -> None:
    """Redis out of reach: b waits in the buffer while its lease cannot be renewed.
    A child frees just before b's latest start (it runs), or just after (it goes back
    to Redis unstarted: no attempt, no retry spent; it would stop itself at once)."""
    rig = Rig(prefetch=0)
    rig.start()
    rig.lease(leased("a"), leased("b"))
    start_before = 1000.0 + LEASE_S * (1 - 0.2 - 0.1)  # a tenth of the lease before its stop
    frees_at = start_before + (0.05 if late else -0.05)
    while rig.now < frees_at:
        for renew in of(rig.later(min(0.05, frees_at - rig.now)), events.Renew):
            rig.apply(events.RenewFailed(renew.leases, RedisCondition.CONNECTION, "reset", rig.now))
    rig.say(0, protocol.Done("a"))
    actions = rig.step()
    if late:
        assert runs(actions) == []
        assert rig.where("b") is Where.REPORTING
        outcomes = rig.book.reports.outcomes
        assert outcomes.release == {"b": "tok-b"} and not outcomes.started
    else:
        assert runs(actions) == [(0, "b")] and rig.where("b") is Where.RUNNING


def test_a_write_refusal_shorter_than_half_a_lease_stops_no_job() -> None:
    rig = Rig()
    rig.start()
    rig.lease(leased("a"))
    refused_until = 1000.0 + LEASE_S * plan.RENEW_AFTER + LEASE_S * 0.5
    for _ in range(int(LEASE_S * 3 / 0.01)):
        actions = rig.later(0.01)
        assert not of(actions, events.Kill)
        for renew in of(actions, events.Renew):
            if rig.now < refused_until:
                rig.apply(events.RenewFailed(renew.leases, RedisCondition.OOM, "OOM", rig.now))
            else:
                rig.apply(events.Renewed(renew.leases, frozenset(), rig.now))
    assert rig.where("a") is Where.RUNNING and rig.book.link.up


def test_an_idle_master_whose_wait_failed_probes_until_redis_answers() -> None:
    rig = Rig()
    rig.start()
    assert only(rig.lease(wake_in_s=None), events.Wait)
    rig.apply(events.WaitFailed(RedisCondition.BUSY, "BUSY", rig.now))
    probe = None
    while probe is None:
        probe = next(iter(of(rig.later(0.05), events.Exchange)), None)
    assert probe.outage_ms > 0
    rig.apply(events.Exchanged(probe.outcomes, probe.pop, {}, Popped([], None), rig.now, rig.now))
    assert rig.book.link.up


def test_a_short_pop_looks_again_when_its_due_time_comes_on_redis_clock_not_after_its_reply() -> (
    None
):
    """wake_in_s counts from Redis's clock when the pop ran, which is no earlier than
    when the pop was sent: the next pop goes that long after the send (a little
    before, AHEAD_S), whenever the reply came in. Counted from the reply, a slow
    one (a loaded host) would make the next pop, and the job due then, late by it."""
    rig = Rig()
    rig.start()
    exchange = only(rig.step(), events.Exchange)
    sent_at = rig.now
    rig.now += 0.05  # the reply comes in 50 ms after the pop went
    popped = Popped([], 1.0, [], None)
    rig.apply(events.Exchanged(exchange.outcomes, exchange.pop, {}, popped, sent_at, rig.now))
    assert only(rig.step(), events.Wait), "a short pop: now it waits"
    rig.now = sent_at + 1.0 - AHEAD_S - 0.001
    assert not of(rig.step(), events.Exchange), "not before its time"
    rig.now = sent_at + 1.0 - AHEAD_S * 0.5
    assert only(rig.step(), events.Exchange).pop, "a pop, when the job comes due"


def test_while_redis_is_down_one_probe_at_a_time_carries_the_outage_and_success_ends_it() -> None:
    rig = Rig()
    rig.start()
    exchange = only(rig.step(), events.Exchange)
    rig.apply(events.ExchangeFailed(exchange.outcomes, RedisCondition.BUSY, "BUSY", rig.now))
    assert not rig.book.link.up
    assert not of(rig.step(), events.Exchange), "backs off"
    probe = None
    while probe is None:
        probe = next(iter(of(rig.later(0.01), events.Exchange)), None)
    assert probe.outage_ms > 0
    assert not of(rig.later(1.0), events.Exchange), "one probe at a time"
    rig.apply(events.Exchanged(probe.outcomes, probe.pop, {}, Popped([], None), rig.now, rig.now))
    assert rig.book.link.up


@pytest.mark.parametrize("condition", [RedisCondition.OOM, RedisCondition.BUSY])
def test_a_full_redis_is_asked_to_trim_retention_before_the_master_waits(
    condition: RedisCondition,
) -> None:
    rig = Rig()
    rig.start()
    exchange = only(rig.step(), events.Exchange)
    rig.apply(events.ExchangeFailed(exchange.outcomes, condition, str(condition), rig.now))
    trims = of(rig.step(), events.Trim)
    assert trims == ([events.Trim(0)] if condition is RedisCondition.OOM else [])


def test_backoff_doubles_to_its_cap_with_jitter_and_shrinks_with_the_shortest_lease() -> None:
    rng = random.Random(3)
    waits = [plan.backoff_s(n, None, rng) for n in range(12)]
    assert all(w <= plan.BACKOFF_CAP_S for w in waits)
    assert waits[-1] >= plan.BACKOFF_CAP_S * 0.75
    assert len(set(waits)) == len(waits), "jittered"
    assert plan.backoff_s(20, 3.0, rng) <= 3.0 * plan.BACKOFF_LEASE_SHARE


def test_a_timed_out_job_gets_sigterm_then_sigkill_after_the_kill_grace() -> None:
    rig = Rig(kill_grace_s=1.0)
    rig.start()
    rig.lease(leased("a", timeout_s=0.5, lease_s=60))
    assert only(rig.later(0.6), events.Kill).signal == signal.SIGTERM
    assert not of(rig.later(0.5), events.Kill)
    assert only(rig.later(0.6), events.Kill).signal == signal.SIGKILL
    rig.exit(0, sig=9)
    group, message = rig.book.reports.outcomes.retry[0][2:4]
    assert group == "runtime.Timeout"
    assert "timed out after 0.5 s; killed by signal 9, still running 1 s after SIGTERM" in message


def test_children_that_keep_dying_pause_spawning_and_the_pause_wakes_the_loop_when_over() -> None:
    rig = Rig()
    rig.start()
    for _ in range(CRASHES_BEFORE_PAUSE):
        rig.exit(0, code=1)
        for spawn in of(rig.step(), events.Spawn):
            rig.spawned(spawn.index)
    assert len(rig.book.slots) == 0, "paused after a run of crashes"
    wake = rig.book.next_wake(rig.now)
    assert wake is not None and 0 < wake <= 2.0, "the loop wakes when the pause ends"
    assert only(rig.later(wake), events.Spawn).index == 0


def test_a_pipelined_job_stuck_behind_a_long_one_is_withdrawn_and_goes_to_another_child() -> None:
    rig = Rig(concurrency=2)
    rig.start()
    capacity = rig.book.capacity
    capacity.jobs_seen, capacity.avg_run_s = 10, 0.0005  # short jobs: pipelining on
    assert runs(rig.lease(leased("a"), leased("b"), leased("c"))) == [(0, "a"), (1, "b"), (0, "c")]
    assert rig.where("c") is Where.PIPELINED
    posts = of(rig.later(TICK_S), events.Post)
    withdraw = [(p.index, p.message.jid) for p in posts if isinstance(p.message, protocol.Withdraw)]
    assert withdraw == [(0, "c")]
    rig.say(1, protocol.Done("b"))
    rig.say(0, protocol.Skipped("c", "withdrawn"))
    assert (1, "c") in runs(rig.step())


def test_jobs_withdrawn_from_a_child_stuck_behind_a_long_one_are_not_sent_to_it_again() -> None:
    """Sent back to the same child, they would be withdrawn again at the next tick,
    and the child would hold several Runs of one job (each round trip for nothing)."""
    rig = Rig()
    rig.start()
    capacity = rig.book.capacity
    capacity.jobs_seen, capacity.avg_run_s = 10, 0.0005  # short jobs: pipelining on
    assert runs(rig.lease(leased("a"), leased("b"), leased("c"))) == [(0, "a"), (0, "b"), (0, "c")]
    posts = of(rig.later(TICK_S), events.Post)
    withdraw = [(p.index, p.message.jid) for p in posts if isinstance(p.message, protocol.Withdraw)]
    assert withdraw == [(0, "b"), (0, "c")]
    rig.say(0, protocol.Skipped("b", "withdrawn"))
    rig.say(0, protocol.Skipped("c", "withdrawn"))
    assert runs(rig.step()) == [], "a is still running: b and c wait for a child"
    assert rig.where("b") is Where.BUFFERED and rig.where("c") is Where.BUFFERED
    rig.say(0, protocol.Done("a"))
    assert runs(rig.step())[:1] == [(0, "c")], "the child is free: they go to it"


def test_term_gives_back_jobs_leased_ahead_then_running_ones_at_the_deadline() -> None:
    rig = Rig(grace_s=1.0)
    rig.start()
    rig.lease(leased("a"), leased("b"))
    rig.apply(events.Signalled(events.Intent.DRAIN))
    first = only(rig.step(), events.Exchange)
    assert rig.book.capacity.mode is Mode.DRAIN
    assert first.outcomes.release == {"b": "tok-b"}, "the one leased ahead goes back at once"
    assert first.pop is None, "a full pop left no registration to withdraw"
    rig.apply(events.Exchanged(first.outcomes, first.pop, {}, None, rig.now, rig.now))
    assert not of(rig.later(0.5), events.Kill)
    assert of(rig.later(0.6), events.Kill)
    rig.exit(0, sig=9)
    exchange = only(rig.step(), events.Exchange)
    assert exchange.outcomes.release == {"a": "tok-a"}
    assert not rig.book.done(rig.now)
    rig.apply(events.Exchanged(exchange.outcomes, exchange.pop, {}, None, rig.now, rig.now))
    assert rig.book.done(rig.now)


def test_a_child_that_dies_holding_a_job_fails_that_attempt_with_its_reason_and_output() -> None:
    rig = Rig()
    rig.start()
    rig.lease(leased("a", remaining=0))
    rig.exit(0, sig=11)
    actions = rig.step() + rig.later(FLUSH_AFTER_S)
    jid, _, group, message, *_ = only(actions, events.Exchange).outcomes.retry[0]
    assert (jid, group) == ("a", "runtime.ChildCrashed")
    assert message.startswith("killed by signal 11 (SIGSEGV)") and "some output" in message
    assert only(actions, events.ReportFailure).tags["jid"] == "a"
    assert only(actions, events.Spawn).index == 0, "replaced at once"


def test_a_child_that_cannot_start_is_a_start_failure_with_its_last_line() -> None:
    rig = Rig()
    spawn = only(rig.step(), events.Spawn)
    rig.apply(events.ChildSpawned(spawn.index, 55))
    rig.apply(events.ChildExited(0, 55, 88, None, "runtime child 0: sandbox step 'uid' failed\n"))
    assert rig.book.start_failure == "runtime child 0: sandbox step 'uid' failed"


def test_a_protocol_error_kills_the_child_and_fails_the_attempt_as_a_protocol_error() -> None:
    rig = Rig()
    rig.start()
    rig.lease(leased("a"))
    rig.apply(events.ChildBroke(0, rig.pids[0], "incomplete frame"))
    assert only(rig.step(), events.Kill).index == 0
    rig.exit(0, sig=9)
    assert rig.book.reports.outcomes.retry[0][2] == "runtime.ProtocolError"


def test_pause_gives_back_what_was_leased_ahead_and_resume_asks_for_work_again() -> None:
    rig = Rig()
    rig.start()
    rig.lease(leased("a"), leased("b"))
    rig.apply(events.Signalled(events.Intent.PAUSE))
    exchange = only(rig.step(), events.Exchange)
    assert exchange.outcomes.release == {"b": "tok-b"} and rig.where("a") is Where.RUNNING
    rig.apply(events.Signalled(events.Intent.RESUME))
    assert rig.book.intake.want_work


def test_prefetch_and_pipelining_follow_the_average_run_time() -> None:
    assert plan.prefetch(0, 4, 0.0, None) == 0, "cold: nothing ahead"
    assert plan.prefetch(10, 4, 0.001, None) == 40
    assert plan.prefetch(10, 4, 0.0001, None) == plan.PREFETCH_MAX
    assert plan.prefetch(10, 4, 0.2, None) == 0, "long jobs: nothing ahead"
    assert plan.pipeline_depth(10, 4, 0.0005, 2) == 2
    assert plan.pipeline_depth(10, 4, 0.003, 2) == 1
    assert plan.pipeline_depth(10, 4, 0.003, 0) == 0
    assert plan.pipeline_room(2, 0, 8, 10) == 1, "never past --max-jobs-per-child"


def test_nothing_ahead_is_fixed_and_never_worked_out_again(monkeypatch: Any) -> None:
    """`--prefetch 0 --pipeline 0`: (0, 0) whatever the jobs take, without asking
    plan.py once a job (a master with nothing ahead passes once or twice a job)."""
    fixed = Rig(concurrency=2, prefetch=0, pipeline=0).book.capacity
    moving = Rig(concurrency=2, prefetch=0).book.capacity
    for took_s in (0.0001, 0.0002, 0.0003, 0.0001):
        for capacity in (fixed, moving):
            capacity.finished(took_s)
    calls: list[str] = []
    real = plan.pipeline_depth

    def counted(*args: Any) -> int:
        calls.append("depth")
        return real(*args)

    monkeypatch.setattr(plan, "pipeline_depth", counted)
    for _ in range(3):
        assert fixed.depth(1000.0) == 0 and fixed.prefetch() == 0
    assert calls == [], "nothing ahead, nothing to work out"
    assert moving.depth(1000.0) == 2 and calls == ["depth"], "the default still follows jobs"


def test_grow_and_shrink_change_the_children() -> None:
    rig = Rig(concurrency=2)
    rig.start()
    rig.apply(events.Signalled(events.Intent.GROW))
    assert only(rig.step(), events.Spawn).index == 2
    rig.spawned(2)
    rig.apply(events.Signalled(events.Intent.SHRINK))
    stop = only(rig.step(), events.Post)
    assert stop.index == 2 and isinstance(stop.message, protocol.Stop)
    assert rig.book.slots.by_index[2].state is SlotState.STOPPING


def handed(
    rig: Rig, jid: str, expires_in_s: float = 1.0, confirmed: events.Renewed | None = None
) -> None:
    """The book waits, and a job is handed to it with a short first lease (with
    `confirmed`: the renewal the blocking read made of it at once, answered)."""
    assert only(rig.lease(wake_in_s=None), events.Wait), "a short pop: now it waits"
    rig.book.intake.offset = rig.now - 500.0  # local monotonic - Redis seconds
    expires_us = int((500 + expires_in_s) * 1e6)
    job = Leased(**{**leased(jid).__dict__, "expires_us": expires_us, "handed": True})
    rig.apply(events.WaitEnded(job, "own", True, confirmed=confirmed))


def test_a_job_handed_while_waiting_starts_once_a_renewal_confirms_it() -> None:
    rig = Rig()
    rig.start()
    handed_at = rig.now
    handed(rig, "h")
    assert rig.book.ledger.held["h"].lease_until == pytest.approx(handed_at + 1.0), (
        "on Redis's clock"
    )
    actions = rig.step()
    assert runs(actions) == [], "not started on its short first lease"
    renew = only(actions, events.Renew)
    assert renew.leases == {"h": "tok-h"}, "renewed at once"
    rig.now += 0.001
    rig.apply(events.Renewed(renew.leases, frozenset(), rig.now))
    assert runs(rig.step()) == [(0, "h")]
    assert rig.book.ledger.held["h"].lease_until == pytest.approx(rig.now + LEASE_S), (
        "a whole lease"
    )


def test_a_confirming_renewal_goes_alone_and_the_pop_follows_its_answer() -> None:
    rig = Rig(concurrency=2)
    rig.start()
    handed(rig, "h")
    actions = rig.step()
    renew = only(actions, events.Renew)
    assert renew.confirms, "the loop starts the job on its answer"
    assert of(actions, events.Exchange) == [], "no pop in Redis ahead of the confirmation"
    rig.apply(events.Renewed(renew.leases, frozenset(), rig.now))
    actions = rig.step()
    assert runs(actions) == [(0, "h")]
    assert only(actions, events.Exchange).pop == 1, "then a pop for the idle child"


def test_jobs_popped_while_a_handed_job_is_confirmed_start_after_it() -> None:
    rig = Rig(concurrency=1, prefetch=4)
    rig.start()
    handed(rig, "h")
    renew = only(rig.step(), events.Renew)
    # a pop that was under way as the job was handed comes back with two more
    popped = Popped([leased("p1"), leased("p2")], None, [], None)
    rig.apply(events.Exchanged(Outcomes(), 4, {}, popped, rig.now, rig.now))
    assert runs(rig.step()) == [], "the handed job was ready first"
    rig.apply(events.Renewed(renew.leases, frozenset(), rig.now))
    assert runs(rig.step())[0] == (0, "h")


def test_a_handed_job_that_cannot_be_confirmed_is_never_started() -> None:
    rig = Rig()
    rig.start()
    handed(rig, "h")
    renew = only(rig.step(), events.Renew)
    rig.apply(events.Renewed(renew.leases, frozenset({"h"}), rig.now + 1.5))  # taken since
    assert runs(rig.step()) == [] and "h" not in rig.book.ledger.held
    assert not rig.book.reports.outcomes, "nothing reported: it is another master's now"


def test_a_handed_job_confirmed_by_the_read_itself_starts_in_the_same_pass() -> None:
    rig = Rig(concurrency=2)
    rig.start()
    sent_at = rig.now + 0.0002  # the renewal went after the read returned
    handed(rig, "h", confirmed=events.Renewed({"h": "tok-h"}, frozenset(), sent_at))
    held = rig.book.ledger.held["h"]
    assert held.where is Where.BUFFERED and held.renewed, "confirmed: it may start"
    assert held.lease_until == pytest.approx(sent_at + LEASE_S), "a whole lease, from its renewal"
    actions = rig.step()
    assert runs(actions) == [(0, "h")]
    assert of(actions, events.Renew) == [], "no second confirmation"
    assert only(actions, events.Exchange).pop == 1, "then a pop for the idle child"


def test_a_handed_job_the_read_found_lost_is_never_started() -> None:
    rig = Rig()
    rig.start()
    handed(rig, "h", confirmed=events.Renewed({"h": "tok-h"}, frozenset({"h"}), rig.now))
    actions = rig.step()
    assert runs(actions) == [] and of(actions, events.Renew) == []
    assert "h" not in rig.book.ledger.held
    assert not rig.book.reports.outcomes, "nothing reported: it is another master's now"


def test_the_read_s_confirmation_leaves_a_renewal_of_the_book_out() -> None:
    rig = Rig(concurrency=2)
    rig.start()
    [job] = runs(rig.lease(leased("a")))
    assert job == (0, "a")
    renew = only(rig.later(LEASE_S / 2), events.Renew)  # a's renewal is out
    assert renew.leases == {"a": "tok-a"}
    rig.book.intake.want_work = False  # a short pop came back: the master waits
    rig.book.intake.waiting = True
    rig.book.intake.offset = rig.now - 500.0
    job_h = Leased(**{**leased("h").__dict__, "expires_us": int(501e6), "handed": True})
    confirmed = events.Renewed({"h": "tok-h"}, frozenset(), rig.now)
    rig.apply(events.WaitEnded(job_h, "own", True, confirmed=confirmed))
    assert runs(rig.step()) == [(1, "h")]
    assert rig.book.renewals.renewing, "a's renewal is still out: none goes beside it"
    rig.apply(events.Renewed(renew.leases, frozenset(), rig.now))
    assert not rig.book.renewals.renewing


def test_the_read_s_confirmation_ends_no_outage_the_book_s_calls_must_report() -> None:
    rig = Rig()
    rig.start()
    assert only(rig.lease(wake_in_s=None), events.Wait), "a short pop: now it waits"
    rig.book.intake.offset = rig.now - 500.0
    # a call fails while the read is out: Redis is out of reach from then
    rig.apply(events.RenewFailed({}, RedisCondition.CONNECTION, "reset", rig.now))
    assert not rig.book.link.up
    rig.now += 0.01
    job = Leased(**{**leased("h").__dict__, "expires_us": int(501e6), "handed": True})
    confirmed = events.Renewed({"h": "tok-h"}, frozenset(), rig.now)
    rig.apply(events.WaitEnded(job, "own", True, confirmed=confirmed))
    assert not rig.book.link.up, "the outage is told to Redis by the book's next call"
    assert rig.where("h") is Where.BUFFERED, "renewed to a whole lease: it may start"


def test_a_token_that_says_look_later_keeps_the_master_waiting_and_pops_then() -> None:
    rig = Rig()
    rig.start()
    assert only(rig.lease(wake_in_s=None), events.Wait), "a short pop: now it waits"
    rig.book.intake.offset = rig.now - 500.0  # local monotonic - Redis seconds
    # a job was handed to another master; its first lease ends at Redis's 501 s
    rig.apply(events.WaitEnded(None, "wake:q", False, int(501 * 1e6)))
    actions = rig.step()
    assert of(actions, events.Exchange) == [] and only(actions, events.Wait), "waits on"
    assert of(rig.later(0.99), events.Exchange) == []
    exchange = only(rig.later(0.02), events.Exchange)
    assert exchange.pop == 1, "pops when that lease ends: a dead master's job is reclaimed"


def test_reasons_say_what_becomes_of_the_job() -> None:
    assert reasons.of_exit(86, None).fate is reasons.Fate.RELEASED
    assert reasons.of_exit(None, 9).fate is reasons.Fate.FAILED
    assert reasons.LOST.fate is reasons.Fate.DROPPED


def test_a_child_killed_with_jobs_pipelined_behind_its_running_one_gives_them_back() -> None:
    """The shortest history the property tests (test_book_states.py) find when a dead
    child's pipelined jobs are left on it: three steps."""
    rig = Rig(concurrency=2)
    rig.start()
    capacity = rig.book.capacity
    capacity.jobs_seen, capacity.avg_run_s = 10, 0.0005  # short jobs: pipelining on
    assert runs(rig.lease(leased("a"), leased("b"), leased("c"))) == [(0, "a"), (1, "b"), (0, "c")]
    rig.apply(events.ChildBroke(0, rig.pids[0], "incomplete frame"))
    assert only(rig.step(), events.Kill).index == 0
    rig.exit(0, sig=9)  # the rig checks the ledger after every event
    assert rig.where("a") is Where.REPORTING
    assert rig.where("c") in (Where.BUFFERED, Where.PIPELINED)
    assert rig.book.ledger.held["c"].slot != 0, "nothing stays on a child that is gone"
