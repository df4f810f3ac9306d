"""A master frozen past its leases (SIGSTOP, then SIGCONT): Redis takes its jobs
back (a pop reclaims an expired lease) and may lease one of them to the same
master again, with a new token, while the master still holds it. The book keeps
one record a jid: the earlier lease is lost, the job goes on under the new one
(or the new one goes back, when a child still has the job), and nothing is
reported twice. These are the histories the combined-fault rig met; the state
machine (test_book_states.py) plays many more of them."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace

import pytest

from runtime.children import protocol
from runtime.config import Settings, WorkerSettings
from runtime.master import events
from runtime.master.held import Where
from runtime.master.master import Master
from runtime.queue.leases import Leased, Popped
from tests.unit.test_book import LEASE_S, Rig, leased, of, only, runs


def warm_rig(concurrency: int = 1) -> Rig:
    """Children up, short jobs seen: jobs are leased ahead (prefetch), not pipelined."""
    rig = Rig(concurrency=concurrency, prefetch=3, pipeline=0)
    rig.start()
    rig.book.capacity.jobs_seen, rig.book.capacity.avg_run_s = 10, 0.0005
    return rig


def again(job: Leased, n: int = 2) -> Leased:
    return replace(job, token=f"{job.token}-{n}")


def frozen_then_popped(rig: Rig, *jobs: Leased) -> events.Renew:
    """The master was frozen past every lease: on SIGCONT its blocking read returns,
    the pass renews and pops, and the pop answers with `jobs`. The renewal's
    answer is left to the caller."""
    rig.now += LEASE_S + 1.0
    rig.apply(events.WaitEnded())
    actions = rig.step()
    exchange: events.Exchange = only(actions, events.Exchange)
    renew: events.Renew = only(actions, events.Renew)
    popped = Popped(list(jobs), None, [], None)
    rig.apply(events.Exchanged(exchange.outcomes, exchange.pop, {}, popped, rig.now, rig.now))
    return renew


def test_a_job_leased_ahead_and_leased_again_runs_once_and_stopping_gives_it_back_once() -> None:
    """The crash: b, leased ahead, was leased again while still buffered: it stood
    twice in the buffer under one record; run from the first place, it stayed in
    the second, and stopping gave it back by jid once its record was gone
    (`KeyError: 'b'` in the master's loop)."""
    rig = warm_rig()
    a, b = leased("a", timeout_s=60), leased("b")
    assert runs(rig.lease(a, b)) == [(0, "a")]
    renew = frozen_then_popped(rig, again(b))
    assert list(rig.book.ledger.buffer) == ["b"]
    assert rig.book.ledger.held["b"].leased.token == "tok-b-2"
    rig.apply(events.Renewed(renew.leases, frozenset(renew.leases), rig.now))  # both lost
    assert of(rig.step(), events.Kill), "a's lease is lost: its child is stopped"
    rig.exit(0, sig=9)
    assert rig.where("a") is None, "a lost lease is not given back: Redis would refuse it"
    rig.step()
    rig.spawned(0)
    assert runs(rig.step()) == [(0, "b")]
    rig.apply(events.Signalled(events.Intent.DRAIN))
    actions = rig.step()
    assert runs(actions) == [] and not rig.book.ledger.buffer
    assert rig.where("b") is Where.RUNNING, "running: the drain lets it finish"
    rig.now += 0.01
    rig.say(0, protocol.Done("b"))
    outcomes = rig.book.reports.outcomes
    assert outcomes.complete["b"].token == "tok-b-2" and not outcomes.release


def test_a_job_reported_and_leased_again_keeps_its_new_lease_and_drops_the_old_report() -> None:
    """b's child finished it while the master was frozen past b's lease; the pop
    took b again before that report went: the report of the lost lease is dropped
    (Redis would refuse it) and b goes on under its new lease."""
    rig = warm_rig(concurrency=2)
    a, b = leased("a", timeout_s=60), leased("b")
    assert runs(rig.lease(a, b)) == [(0, "a"), (1, "b")]
    rig.now += LEASE_S + 1.0
    rig.say(1, protocol.Done("b"))
    rig.apply(events.WaitEnded())  # the blocking read returned meanwhile
    assert rig.where("b") is Where.REPORTING
    exchange = only(rig.step(), events.Exchange)
    assert exchange.outcomes.jids("complete") == [], "young: the report waits for the next"
    popped = Popped([again(b)], None, [], None)
    rig.apply(events.Exchanged(exchange.outcomes, exchange.pop, {}, popped, rig.now, rig.now))
    assert rig.where("b") is not Where.REPORTING
    assert not rig.book.reports.outcomes.complete, "the lost lease's report is dropped"
    assert rig.book.ledger.held["b"].leased.token == "tok-b-2"


def test_a_running_job_leased_again_is_stopped_and_its_new_lease_goes_back() -> None:
    """A child still runs a under its lost lease: it is stopped, as for any lease
    lost, and the new lease goes back to Redis unstarted (one record a jid)."""
    rig = warm_rig(concurrency=2)
    a = leased("a", timeout_s=60)
    assert runs(rig.lease(a)) == [(0, "a")]
    frozen_then_popped(rig, again(a))
    held = rig.book.ledger.held["a"]
    assert held.where is Where.RUNNING and held.slot == 0 and held.lost
    assert rig.book.reports.outcomes.release == {"a": "tok-a-2"}
    assert not rig.book.reports.outcomes.started, "not started: no attempt counted"
    assert of(rig.step(), events.Kill)
    rig.exit(0, sig=9)
    assert rig.where("a") is None
    assert rig.book.reports.outcomes.release == {"a": "tok-a-2"}, "the old lease says nothing"


def test_a_report_refused_for_now_holds_back_only_its_own_lease() -> None:
    """a's child broke the protocol (its attempt is retried) and a was leased
    again meanwhile (its new lease goes back): Redis takes the retry and refuses
    the release for now; the retry landed, so a is held no more."""
    rig = warm_rig(concurrency=2)
    a = leased("a", timeout_s=60)
    assert runs(rig.lease(a)) == [(0, "a")]
    rig.apply(events.ChildBroke(0, rig.pids[0], "incomplete frame"))
    frozen_then_popped(rig, again(a))
    rig.exit(0, sig=9)
    rig.apply(events.WaitEnded())
    exchange = only(rig.later(0.01), events.Exchange)
    outcomes = exchange.outcomes
    assert [r.token for r in outcomes.retry] == ["tok-a"] and outcomes.release == {"a": "tok-a-2"}
    unsent = outcomes.only("release")
    states = {"a": "retry"}
    rig.apply(events.Exchanged(outcomes, exchange.pop, states, None, rig.now, rig.now, unsent))
    assert rig.where("a") is None
    assert rig.book.reports.outcomes.release == {"a": "tok-a-2"}, "it goes again"


def test_a_report_of_an_earlier_lease_landing_leaves_the_new_lease_held() -> None:
    """a's report is out when a is handed to the waiting master again (its lease
    ran out before the report reached Redis) and runs at once: the landing of
    the old lease's report is not the landing of the new one's."""
    rig = warm_rig(concurrency=2)
    rig.book.capacity.jobs_seen = 0  # nothing leased ahead: the master waits when idle
    a = leased("a", timeout_s=60)
    rig.lease(a)
    rig.now += 0.01
    rig.say(0, protocol.Done("a"))
    exchange = only(rig.later(0.01), events.Exchange)
    assert exchange.outcomes.complete["a"].token == "tok-a"
    rig.book.intake.offset = 0.0
    handed = replace(again(a), handed=True, expires_us=round((rig.now + 1.0) * 1e6))
    confirmed = events.Renewed({"a": "tok-a-2"}, frozenset(), rig.now)
    rig.apply(events.WaitEnded(handed, "own", True, confirmed=confirmed))
    (index, _), *_ = runs(rig.step())
    rig.now += 0.01
    rig.say(index, protocol.Done("a"))
    assert rig.book.reports.outcomes.complete["a"].token == "tok-a-2"
    rig.apply(events.Exchanged(exchange.outcomes, exchange.pop, {}, None, rig.now, rig.now))
    held = rig.book.ledger.held["a"]
    assert held.where is Where.REPORTING and held.leased.token == "tok-a-2", "held until it lands"


def test_a_bug_taking_in_an_event_is_logged_with_its_traceback_and_the_loop_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Never silent, never the end of the master: the event is skipped, the line
    says which kind with its traceback (once a minute a kind, counted between)."""

    def broken(event: events.Event, now: float) -> None:
        raise KeyError("b")

    async def one_pass() -> bool:
        worker = WorkerSettings(modules=("m",), queues=("q",), concurrency=1)
        master = Master(Settings(namespace="t"), worker, "redis://127.0.0.1:1", "host-1")
        master.book.apply = broken  # type: ignore[method-assign]
        master.events.extend([events.Cancelled("b"), events.Cancelled("c")])
        return master._pass()

    with caplog.at_level(logging.ERROR, logger="runtime.master.master"):
        assert asyncio.run(one_pass()), "the pass went on"
    (record,) = caplog.records
    assert "unexpected KeyError taking in a Cancelled event, skipped" in record.getMessage()
    assert record.exc_info is not None
