"""Pipelining: while jobs are short, a child holds the next one or two behind the
running one. Each job still runs once; a job waiting behind a long one moves to
another child; jobs a dead child never started are not counted as attempts; TERM
gives pipelined jobs back at once."""

from __future__ import annotations

import signal
import time
from pathlib import Path

from runtime import Client
from tests.integration.conftest import StartMaster
from tests.support.waiting import idle, wait_for

J = "tests.integration.jobs"


def _warm_up(client: Client, queue: str, n: int = 300) -> None:
    """Short jobs until the master pipelines (it does once jobs are short on average)."""
    q = client.queue(queue)
    jids = [q.put(f"{J}:noop", {}) for _ in range(n)]
    wait_for(lambda: idle(q.counts()), 30, what="warm-up jobs to finish")
    assert all(client.get_job(j).state == "complete" for j in jids)  # type: ignore[union-attr]


def _records(path: Path) -> list[list[str]]:
    return [line.split() for line in path.read_text().splitlines()] if path.exists() else []


def test_short_jobs_are_pipelined_and_each_runs_once(
    start_master: StartMaster, plain_client: Client, workdir: Path
) -> None:
    master = start_master("q", "-c", "2")
    _warm_up(plain_client, "q")
    path = workdir / "runs"
    q = plain_client.queue("q")
    jids = [q.put(f"{J}:record", {"path": str(path)}) for _ in range(500)]
    wait_for(lambda: len(_records(path)) >= 500, 60, what="500 jobs to run")
    assert "pipelining on" in master.log()
    runs = _records(path)
    assert sorted(r[0] for r in runs) == sorted(jids), "each job ran exactly once"
    assert {r[1] for r in runs} == {"1"}, "no job needed a second attempt"
    wait_for(lambda: q.counts()["running"] == 0, 10, what="the last reports")
    for jid in jids[::50]:
        job = plain_client.get_job(jid)
        assert job is not None and [e.event for e in job.history] == ["put", "popped", "completed"]


def test_a_job_pipelined_behind_a_long_one_moves_to_another_child(
    start_master: StartMaster, plain_client: Client, workdir: Path
) -> None:
    start_master("q", "-c", "2")
    _warm_up(plain_client, "q")
    path = workdir / "runs"
    q = plain_client.queue("q")
    long = q.put(f"{J}:sleep", {"seconds": 6})
    quick = [q.put(f"{J}:record", {"path": str(path)}) for _ in range(40)]
    wait_for(lambda: len(_records(path)) >= 40, 4,
             what="the quick jobs to run while the long one runs")  # fmt: skip
    assert plain_client.get_job(long).state == "running"  # type: ignore[union-attr]
    assert sorted(r[0] for r in _records(path)) == sorted(quick)


def test_jobs_a_dead_child_never_started_are_not_counted_as_attempts(
    start_master: StartMaster, plain_client: Client, workdir: Path
) -> None:
    start_master("q", "-c", "2")
    _warm_up(plain_client, "q")
    path = workdir / "runs"
    q = plain_client.queue("q")
    jids = []
    for i in range(5):
        q.put(f"{J}:crash", {"signal": signal.SIGKILL}, retries=0, jid=f"crash-{i}")
        jids += [q.put(f"{J}:record", {"path": str(path)}) for _ in range(30)]
    wait_for(lambda: len(_records(path)) >= len(jids), 60, what="every quick job to run")
    runs = _records(path)
    assert sorted(r[0] for r in runs) == sorted(jids)
    assert {r[1] for r in runs} == {"1"}, "a job behind a crash kept its first attempt"
    for i in range(5):
        wait_for(lambda i=i: plain_client.get_job(f"crash-{i}").state == "failed", 20,  # type: ignore[union-attr, misc]
                 what="the crashing job to fail")  # fmt: skip


def test_term_gives_pipelined_jobs_back_at_once(
    start_master: StartMaster, plain_client: Client, workdir: Path
) -> None:
    master = start_master("q", "-c", "2", "--grace", "5")
    _warm_up(plain_client, "q")
    path = workdir / "runs"
    q = plain_client.queue("q")
    jids = [q.put(f"{J}:record", {"path": str(path), "seconds": 0.002}) for _ in range(3000)]
    wait_for(lambda: len(_records(path)) >= 200, 30, what="jobs to be running")
    master.send(signal.SIGTERM)
    assert master.wait(10) == 0
    counts = q.counts()
    assert counts["running"] == 0 and counts["stalled"] == 0
    done = {r[0] for r in _records(path)}
    assert len(done) == len(_records(path)), "no job ran twice"
    assert counts["waiting"] == len(jids) - len(done), "every job not run is waiting again"
    back = [j for j in jids if j not in done][:20]
    for jid in back:
        job = plain_client.get_job(jid)
        assert job is not None and job.state == "waiting" and job.remaining == job.retries


def test_a_pipelined_job_never_starts_once_its_frozen_master_lost_the_lease(
    start_master: StartMaster, plain_client: Client, workdir: Path
) -> None:
    plain_client.admin.config_set("q-heartbeat", 1)
    master = start_master("q", "-c", "1")
    _warm_up(plain_client, "q", 100)
    first, ahead = workdir / "first", workdir / "ahead"
    q = plain_client.queue("q")
    [_, later] = plain_client.put_many([
        q.spec(f"{J}:record", {"seconds": 2.0, "path": str(first)}),
        q.spec(f"{J}:alive", {"seconds": 0.3, "path": str(ahead)}),
    ])  # fmt: skip
    wait_for(lambda: q.counts()["running"] == 2, 10, what="the second job held ahead")
    master.send(signal.SIGSTOP)  # the first job outlives its lease: its child stops itself
    stopped_at = time.time()
    try:
        wait_for(lambda: time.time() >= stopped_at + 2.5, 10, what="both leases to run out")
    finally:
        master.send(signal.SIGCONT)
    wait_for(lambda: plain_client.get_job(later).state == "complete", 30,  # type: ignore[union-attr]
             what="the held job to run again")  # fmt: skip
    ran = {line.split()[1] for line in ahead.read_text().splitlines()}
    assert "1" not in ran, "the attempt whose lease ran out never started"
    assert not first.exists(), "the first job was stopped before it could finish"
