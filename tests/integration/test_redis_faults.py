"""Masters under ordinary Redis conditions (issue 11): a long script elsewhere
(BUSY), a full Redis (OOM), a demotion and promotion (READONLY), lost functions
and scripts, a restart that loads a large append-only file.

Two masters with jobs running, a private Redis each test. For each condition:
no master exits, one log line per state change, leasing resumes within the
backoff cap + 1 s of its end, no job is lost, attempts never overlap; a refusal
shorter than half a lease runs no job twice (tests/support/fault_run.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import redis_faults
from tests.support.fault_run import LEASE_S, FaultRun
from tests.support.waiting import wait_for

FAULT_S = 1.0  # shorter than half a lease: no lease may run out
LONG_S = FAULT_S + 1.5 * LEASE_S  # long jobs span the fault and a lease after it


def _after(run: FaultRun, fault_end: float, *, must_notice: bool = True) -> None:
    """The checks after a refusal shorter than half a lease."""
    run.assert_alive()
    run.assert_resumes(fault_end)
    run.assert_nothing_lost()
    run.assert_alive()
    run.ledger.assert_ran_once(run.jids)
    run.assert_state_lines(must_notice=must_notice)


def test_a_busy_redis_stops_no_master_and_runs_no_job_twice(run: FaultRun) -> None:
    run.start_masters()
    run.running(LONG_S)
    spinning = redis_faults.Busy(run.conn, seconds=FAULT_S).start()
    wait_for(lambda: redis_faults.answers(run.conn), 10, what="the script to end by itself")
    fault_end = spinning.end()
    _after(run, fault_end)


@pytest.mark.slow
def test_a_busy_redis_killed_by_script_kill_stops_no_master(run: FaultRun) -> None:
    run.start_masters()
    run.running(LONG_S)
    with redis_faults.busy(run.conn, seconds=30) as spinning:
        run.hold(FAULT_S, "BUSY")
    assert spinning.ended_at is not None and spinning.error is not None, "killed, not ended"
    _after(run, spinning.ended_at)


def test_out_of_memory_shorter_than_half_a_lease_runs_no_job_twice(run: FaultRun) -> None:
    run.start_masters()
    run.running(LONG_S)
    with redis_faults.out_of_memory(run.conn):
        run.hold(FAULT_S, "OOM")
    _after(run, run.hold(0, "the end of OOM"))


def test_a_demotion_to_replica_and_back_runs_no_job_twice(run: FaultRun) -> None:
    run.start_masters()
    run.running(LONG_S)
    with redis_faults.readonly(run.conn):
        run.hold(FAULT_S, "READONLY")
    _after(run, run.hold(0, "the promotion"))


@pytest.mark.slow
def test_functions_and_scripts_flushed_under_load_are_loaded_again(run: FaultRun) -> None:
    run.start_masters()
    run.running(LONG_S)
    redis_faults.flush_scripts(run.conn)
    run.hold(FAULT_S / 2, "the first flush")
    redis_faults.flush_scripts(run.conn)
    fault_end = run.hold(FAULT_S / 2, "the second flush")
    _after(run, fault_end, must_notice=False)


@pytest.mark.slow
def test_an_idle_master_rides_out_busy_oom_and_readonly(run: FaultRun) -> None:
    """No jobs held: only the idle master's waiting read and registration meet them."""
    run.start_masters(count=2, children=1)
    with redis_faults.busy(run.conn, seconds=30):
        run.hold(FAULT_S, "BUSY")
    run.assert_resumes(run.hold(0, "the end of BUSY"))
    with redis_faults.out_of_memory(run.conn):
        run.hold(FAULT_S, "OOM")
    run.assert_resumes(run.hold(0, "the end of OOM"))
    with redis_faults.readonly(run.conn):
        run.hold(FAULT_S, "READONLY")
    run.assert_resumes(run.hold(0, "the promotion"))
    run.assert_nothing_lost()
    run.assert_alive()
    run.assert_state_lines(must_notice=False, faults=3)


@pytest.mark.slow
def test_a_restart_that_loads_a_large_aof_loses_no_job(workdir: Path) -> None:
    with redis_faults.private_server(appendonly=True, load_delay_us=50) as server:
        run = FaultRun(server, workdir)
        try:
            redis_faults.fill(run.conn, keys=40_000)  # about 2 s of -LOADING
            run.start_masters()
            run.running(LONG_S)
            redis_faults.restart_with_aof(server)
            fault_end = redis_faults.wait_loaded(run.conn)
            run.assert_alive()
            run.assert_resumes(fault_end)
            run.assert_nothing_lost()  # a job may run again: everysec fsync, lost leases
            run.assert_alive()
            run.assert_state_lines(must_notice=True)
        finally:
            run.close()
