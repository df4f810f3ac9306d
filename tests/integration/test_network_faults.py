"""Masters behind a faulty network (issue 11): connections reset, a flapping
link, a link dead for a while, half-open connections, a partition longer than a
lease, a slow link, a reply lost on its way back.

The masters reach their private Redis through tests/support/proxy.py; the test
reads Redis directly. The checks are those of tests/support/fault_run.py.
"""

from __future__ import annotations

import contextlib
import signal
import time
from pathlib import Path

import pytest

from runtime.master import plan
from runtime.queue.embedded import ServerProcess
from tests.support.fault_run import DOWN, LEASE_S, FaultRun
from tests.support.proxy import Proxy
from tests.support.waiting import wait_for

LONG_S = 1.0 + 1.5 * LEASE_S  # long jobs span a short fault and a lease after it
NOTICE_S = LEASE_S / 3 + 1.0  # a half-open connection is noticed within this
# Connection attempts per master and second of a dead link, over a lease: capped
# exponential backoff from 50 ms makes about 5 per kind of connection in 3 s (a
# master has two or three kinds); a fixed short retry makes several per second.
RECONNECTS_PER_MASTER_S = 5.0
DEAD_LINK_S = 5.0  # the lockstep test's outage: a few backoff steps
LOCKSTEP_S = 0.01  # two attempts closer than this: the same step of the same schedule


@pytest.fixture
def proxy(own_proxy: Proxy) -> Proxy:
    return own_proxy


def _checks(
    run: FaultRun, fault_end: float, *, must_notice: bool, once: list[str] | None = None
) -> None:
    """The common checks; the jobs `once` started only once."""
    run.assert_alive()
    run.assert_resumes(fault_end)
    run.assert_nothing_lost()
    run.assert_alive()
    run.ledger.assert_ran_once(once or [])
    run.assert_state_lines(must_notice=must_notice)


def _noticed_at(run: FaultRun, since: float, timeout_s: float) -> dict[int, float]:
    """When each master's DOWN line first showed in its log (polled), by pid."""
    seen: dict[int, float] = {}

    def all_noticed() -> bool:
        run.assert_alive()
        for master in run.masters:
            if master.pid not in seen and DOWN in master.log():
                seen[master.pid] = time.time() - since
        return len(seen) == len(run.masters)

    with contextlib.suppress(AssertionError):  # the caller asserts on what was seen, with times
        wait_for(all_noticed, timeout_s, what=f"every master to log {DOWN!r}")
    return seen


@pytest.mark.slow  # by default: the idle and busy resets below, each job run once
def test_a_reset_connection_stops_no_master_and_runs_no_job_twice(
    run: FaultRun, proxy: Proxy
) -> None:
    run.start_masters(url=proxy.url)
    run.running(LONG_S)
    proxy.reset()
    run.hold(0.5, "the first reset")
    proxy.reset()
    fault_end = run.hold(0.5, "the second reset")
    assert proxy.stats.resets >= 2 * len(run.masters)
    _checks(run, fault_end, must_notice=False, once=run.jids)


def test_resets_of_idle_and_busy_connections_are_a_connection_condition_never_a_traceback(
    run: FaultRun, proxy: Proxy
) -> None:
    """A reset of connections idle in a master's pool, then of connections carrying
    a stream of short jobs: each master logs at most a line per state change, names
    the outage `connection`, and never reuses a connection the reset closed."""
    run.start_masters(children=2, url=proxy.url)
    run.assert_resumes(time.time())  # each has leased: its pools hold connections
    proxy.reset()  # idle: the pools' connections and the blocking reads
    run.assert_resumes(run.hold(0.2, "the idle reset"))
    run.put("q", 0.005, 300)
    wait_for(lambda: len(run.ledger.runs()) >= 30, 15, what="the short jobs to flow")
    proxy.reset()  # busy: calls in flight and connections between them
    run.hold(0.3, "the first busy reset")
    proxy.reset()
    fault_end = run.hold(0.3, "the second busy reset")
    _checks(run, fault_end, must_notice=False, once=run.jids)
    run.assert_no_tracebacks(conditions=("connection",))


def test_jobs_leased_ahead_are_given_back_unstarted_when_too_little_of_their_lease_is_left(
    run: FaultRun, proxy: Proxy
) -> None:
    """One child runs a long job L; short jobs leased with it wait in the buffer. Just
    after a renewal the master is frozen (SIGSTOP) and the link goes half-open, so no
    lease is renewed again; L ends meanwhile, and the master learns of it only once
    the buffered jobs' latest start (a tenth of the lease before their stop deadline)
    has passed. They are given back unstarted, not started to stop themselves at
    once: each runs once, after the link heals, with no retry spent.

    Nothing hangs on how fast the master or the test runs. The renewal seen in Redis
    may not have reached the master when the link goes (it then holds the one before,
    0.45 s older): L ends long before either one's stop deadline, and the master
    wakes after the latest start the renewal seen in Redis gives, which the master,
    having sent it before Redis ran it, reached no later, whichever one it holds.
    (Before, L ended by the clock within a 0.3 s window after the renewal the test
    saw: a loaded host, or that renewal's reply lost in the half-open link, moved the
    master's deadlines and L stopped itself, to run twice.)"""
    [master] = run.start_masters(1, 1, proxy.url, "--prefetch", "4")
    long, ahead, stop = _leased_ahead(run)
    first = run.client.get_job(long)
    assert first is not None and first.lease_expires_ms is not None

    def renewed() -> bool:
        job = run.client.get_job(long)
        return job is not None and job.lease_expires_ms != first.lease_expires_ms

    wait_for(renewed, 5, interval_s=0.002, what="a renewal of the long job's lease")
    master.send(signal.SIGSTOP)
    try:
        proxy.blackhole()
        job = run.client.get_job(long)  # the last renewal Redis ran (the master sent it before)
        assert job is not None and job.lease_expires_ms is not None
        latest_start = plan.start_before(job.lease_expires_ms / 1000, LEASE_S)  # time.time()
        stop.touch()
        wait_for(lambda: _ended(run, long), 10, what="the long job to end")
        run.hold(latest_start + 0.01 - time.time(), "the frozen master")  # ms-rounded expiry
        proxy.passthrough()  # the master meets its old connections reset, and reconnects
    finally:
        master.send(signal.SIGCONT)
    wait_for(
        lambda: all(jid in _given_back(master.log()) for jid in ahead),
        10,
        what="the jobs leased ahead to be given back",
    )
    run.assert_nothing_lost()
    run.ledger.assert_ran_once([long, *ahead])
    for job in run.client.get_jobs(ahead):
        assert job is not None and job.remaining == 20 and job.attempt == 1, job
        assert "released" in [e.event for e in job.history], job.history


def _leased_ahead(run: FaultRun, tries: int = 5) -> tuple[str, list[str], Path]:
    """The long job L running on the only child, with 4 jobs leased ahead of it, and
    the file that ends L. The master leases ahead only while jobs take under
    plan.PREFETCH_MAX_JOB_S on average, as it measures them: on a loaded host a few
    short jobs may not bring it there, so when none is leased ahead L ends, more
    short jobs run, and it is tried again."""
    for attempt in range(1, tries + 1):
        run.put("q", 0.001, 12)  # short jobs: the master leases ahead from now
        run.settle(15)
        stop = run.workdir / f"stop-long-{attempt}"
        [long] = run.put("q", 0.0, priority=-1, until=stop)
        ahead = run.put("q", 0.5, 4)
        if _started_with_jobs_ahead(run, long, ahead):
            return long, ahead, stop
        if attempt == tries:
            raise AssertionError(f"never leased ahead\n{run.describe([long, *ahead])}")
        stop.touch()
        run.settle(30)
    raise AssertionError("no tries")


def _started_with_jobs_ahead(run: FaultRun, long: str, ahead: list[str]) -> bool:
    wait_for(lambda: run.ledger.started([long]), 10, what="the long job to start")
    leased = lambda: all(j and j.state == "running" for j in run.client.get_jobs(ahead))  # noqa: E731
    with contextlib.suppress(AssertionError):
        wait_for(leased, 5, what="the short jobs to be leased ahead")
        return True
    return False


def _ended(run: FaultRun, jid: str) -> bool:
    return any(r.jid == jid and r.ended for r in run.ledger.runs())


def _given_back(log: str) -> str:
    """The master's lines about jobs leased ahead that it gave back unstarted (with
    too little of their lease left, or none)."""
    signs = ("leased ahead given back unstarted", "leased ahead not started")
    return "\n".join(ln for ln in log.splitlines() if any(s in ln for s in signs))


@pytest.mark.slow
def test_a_flapping_link_fails_no_job(run: FaultRun, proxy: Proxy) -> None:
    run.start_masters(url=proxy.url)
    run.running(LONG_S)
    end = time.monotonic() + LEASE_S
    while time.monotonic() < end:
        proxy.reset()
        run.hold(0.3, "a flap")
    _checks(run, time.time(), must_notice=False)  # every job complete: none failed


@pytest.mark.slow
def test_a_dead_link_is_retried_with_backoff_not_in_a_burst(run: FaultRun, proxy: Proxy) -> None:
    run.start_masters(url=proxy.url)
    run.running(LONG_S)
    accepted, began = proxy.stats.accepted, time.monotonic()
    window_s = LEASE_S
    proxy.reset_for(window_s)
    fault_end = run.hold(window_s, "the dead link")
    attempts = proxy.stats.accepted - accepted
    most = RECONNECTS_PER_MASTER_S * window_s * len(run.masters)
    times = [round(t - began, 2) for t in proxy.stats.accepted_at[accepted:]]
    assert attempts <= most, f"{attempts} connection attempts in {window_s} s, at {times}"
    _checks(run, fault_end, must_notice=True)


def test_a_half_open_connection_is_noticed_within_a_third_of_the_lease(
    run: FaultRun, proxy: Proxy
) -> None:
    run.start_masters(url=proxy.url)
    run.running(LONG_S)
    proxy.blackhole()
    started = time.time()
    seen = _noticed_at(run, started, NOTICE_S + 2.0)
    proxy.passthrough()
    fault_end = time.time()
    late = {pid: round(at, 2) for pid, at in seen.items() if at > NOTICE_S}
    missing = [m.pid for m in run.masters if m.pid not in seen]
    assert not missing and not late, f"noticed after (s): {late}; never noticed: {missing}"
    _checks(run, fault_end, must_notice=True)


@pytest.mark.slow
def test_idle_masters_behind_a_half_open_connection_resume_after_it_heals(
    run: FaultRun, proxy: Proxy
) -> None:
    """Their waiting reads sit on connections that stay silently dead after the
    network heals (a firewall forgot the flow): only new connections work."""
    run.start_masters(children=1, url=proxy.url)
    run.assert_resumes(time.time())  # each has leased once
    proxy.blackhole()
    run.hold(2 * NOTICE_S, "the half-open link")
    proxy.passthrough(stale="dead")
    _checks(run, time.time(), must_notice=False)


@pytest.mark.slow
def test_a_slow_link_runs_no_job_twice(run: FaultRun, proxy: Proxy) -> None:
    run.start_masters(url=proxy.url)
    run.running(LONG_S)
    proxy.delay(up_ms=150, down_ms=150)
    run.hold(2.0, "the slow link")
    proxy.passthrough()
    _checks(run, time.time(), must_notice=False, once=run.jids)


def test_a_lost_reply_to_a_completion_runs_the_job_only_once(run: FaultRun, proxy: Proxy) -> None:
    run.start_masters(url=proxy.url)
    run.running(LONG_S, short_n=20)
    proxy.drop_reply(b"complete", commands=(b"FCALL", b"FCALL_RO"))  # the function, by name
    wait_for(lambda: proxy.stats.dropped_replies == 1, 10, what="a completion's reply dropped")
    fault_end = time.time()
    [request] = proxy.stats.dropped_requests
    reported = [jid for jid in run.jids if jid.encode() in request]
    assert reported, "the dropped request completed jobs of ours"
    _checks(run, fault_end, must_notice=False, once=run.jids)


@pytest.mark.slow
def test_after_a_partition_longer_than_a_lease_a_job_done_meanwhile_is_not_run_again(
    run: FaultRun, proxy: Proxy
) -> None:
    """Post-outage grace: the job finished while Redis was out of reach; its master
    reports it when the network heals, before any other master may run it again."""
    run.start_masters(url=proxy.url)
    long = [jid for i in range(len(run.masters)) for jid in run.put(f"m{i}", 2 * LEASE_S)]
    graced = [jid for i in range(len(run.masters)) for jid in run.put(f"m{i}", 1.0)]
    wait_for(lambda: run.ledger.started(long + graced), 15, what="the jobs to start")
    proxy.blackhole()
    outage_s = 2.5 * LEASE_S
    wait_for(
        lambda: {r.jid for r in run.ledger.runs() if r.ended} >= set(graced),
        5,
        what="the graced jobs to finish during the outage",
    )
    run.hold(outage_s - 1.0, "the partition")
    proxy.passthrough()
    fault_end = time.time()
    after = [jid for i in range(len(run.masters)) for jid in run.put(f"m{i}", 1.5 * LEASE_S)]
    # the long jobs fenced themselves during the outage: they run again
    _checks(run, fault_end, must_notice=True, once=graced + after)


@pytest.mark.slow
def test_two_masters_reconnecting_after_an_outage_do_not_retry_in_lockstep(
    run: FaultRun, own: ServerProcess
) -> None:
    """Each master behind its own proxy, both links dead at once: their connection
    attempts after the first are not all within LOCKSTEP_S of the other's."""
    with Proxy(str(own.socket)) as first, Proxy(str(own.socket)) as second:
        for proxy in (first, second):
            run.start_masters(count=1, url=proxy.url)
        run.running(LONG_S)
        began = time.monotonic()
        first.reset_for(DEAD_LINK_S)
        second.reset_for(DEAD_LINK_S)
        fault_end = run.hold(DEAD_LINK_S, "the dead links")
        a, b = ([t for t in p.stats.accepted_at if t >= began] for p in (first, second))
        assert len(a) >= 3 and len(b) >= 3, f"each master kept trying: {len(a)}, {len(b)}"
        nearest = [min(abs(t - u) for u in b) for t in a[1:]]
        assert max(nearest) > LOCKSTEP_S, f"in lockstep: {[round(d, 4) for d in nearest]}"
        _checks(run, fault_end, must_notice=True)
