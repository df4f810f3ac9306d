"""Jobs handed to idle masters: a put reaches a waiting master without a pop call,
and a job handed to a frozen master is never started once its first lease ran out
(another master runs it; the frozen one's report is refused)."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from runtime import Client
from runtime.queue.embedded import ServerProcess
from tests.integration.conftest import StartMaster
from tests.integration.test_worker_basics import wait_state
from tests.support import redis_faults
from tests.support.master import MasterProcess
from tests.support.waiting import wait_for

J = "tests.integration.jobs"


def _idle(client: Client, queue: str = "q") -> int:
    return int(client.redis.zcard(client.keys.key("idle", queue=queue)))


def test_a_put_reaches_an_idle_master_without_a_pop(
    start_master: StartMaster, plain_client: Client, workdir: Path
) -> None:
    start_master("q", "-c", "2")
    wait_for(lambda: _idle(plain_client) == 1, 10, what="the master to wait on q")
    path = workdir / "runs"
    jid = plain_client.queue("q").put(f"{J}:record", {"path": str(path)})
    wait_state(plain_client, jid, "complete")
    job = plain_client.get_job(jid)
    assert job is not None
    [popped] = [e for e in job.history if e.event == "popped"]
    assert popped.handed, "handed over, not popped by a second round trip"
    assert path.read_text().split()[1] == "1"


def test_a_frozen_master_never_starts_a_handed_job_whose_first_lease_ran_out(
    start_master: StartMaster, plain_client: Client, workdir: Path
) -> None:
    plain_client.admin.config_set("q-heartbeat", 1)  # a first lease of 1 s
    frozen = start_master("q", "-c", "1")
    wait_for(lambda: _idle(plain_client) == 1, 10, what="the master to wait on q")
    frozen.send(signal.SIGSTOP)
    stopped_at = time.time()
    try:
        path = workdir / "runs"
        jid = plain_client.queue("q").put(f"{J}:record", {"path": str(path)})
        job = plain_client.get_job(jid)
        assert job is not None and job.state == "running", "handed to the frozen master"
        wait_for(lambda: time.time() > stopped_at + 1.5, 5, what="the first lease to run out")
        start_master("q", "-c", "1")
        wait_state(plain_client, jid, "complete")
    finally:
        frozen.send(signal.SIGCONT)
    # Woken, the frozen master either reads the stale handoff, whose confirming
    # renewal Redis refuses (the lease is gone), and drops it, or its blocking read
    # timed out during the freeze and the handoff went with that read: either way
    # it never starts the job.
    dropped = f"job leased ahead not started, its lease ran out jid={jid}"
    lost_read = "Redis unavailable (timeout)"
    wait_for(
        lambda: dropped in frozen.log() or lost_read in frozen.log(),
        10,
        what="the stale handoff gone",
    )
    after = plain_client.queue("q").put(f"{J}:noop", {})
    wait_state(plain_client, after, "complete")
    assert [line.split()[1] for line in path.read_text().splitlines()] == ["2"]
    job = plain_client.get_job(jid)
    assert job is not None and [e.event for e in job.history] == [
        "put",
        "popped",
        "lease-lost",
        "popped",
        "completed",
    ]


def test_a_handed_job_whose_confirmation_redis_refuses_never_starts_while_refused(
    own: ServerProcess, workdir: Path
) -> None:
    """The master renews a handed job as its blocking read returns, before the book
    hears of it; Redis refusing that renewal (OOM) must keep the job unstarted for
    as long as it refuses, then it runs once."""
    client = Client.from_url(own.url, namespace="confirm")
    client.admin.config_set("q-heartbeat", 3)  # its first lease: 1 s
    master = MasterProcess(own, "confirm", workdir, "q", "-c", "1").start()
    path = workdir / "runs"
    try:
        wait_for(lambda: _idle(client) == 1, 10, what="the master to wait on q")
        master.send(signal.SIGSTOP)  # the handed job waits in its socket
        jid = client.queue("q").put(f"{J}:record", {"path": str(path)})
        job = client.get_job(jid)
        assert job is not None and job.state == "running", "handed to the master"
        with redis_faults.out_of_memory(redis_faults.connect(own)):
            master.send(signal.SIGCONT)
            wait_for(lambda: "Redis unavailable (oom)" in master.log(), 10, what="a refusal")
            time.sleep(1.5)  # past the first lease, still refused
            refused_until = time.time()
            assert not path.exists(), "started while Redis refused its renewal"
        wait_state(client, jid, "complete", 30)
    finally:
        master.send(signal.SIGCONT)
        master.close()
    [line] = path.read_text().splitlines()
    assert line.split()[0] == jid and float(line.split()[2]) >= refused_until, "ran once, after"


# --- a master that dies while it waits (issue 22) ------------------------------------

START_WITHIN_S = 1.5  # a job handed to a dead master is served by a live one within this


def _registered(client: Client, queues: list[str], masters: int) -> bool:
    return all(_idle(client, q) == masters for q in queues)


def _serve_one_at_a_time(
    client: Client, queues: list[str], per_queue: int, path: Path
) -> list[tuple[str, float]]:
    """Puts `per_queue` jobs on each queue, one at a time, each after the last one
    completed; returns (jid, seconds from its put to its start) for each."""
    starts = []
    for _ in range(per_queue):
        for queue in queues:
            jid = client.queue(queue).put(f"{J}:record", {"path": str(path)})
            wait_state(client, jid, "complete", 30)
            job = client.get_job(jid)
            assert job is not None
            put_s = job.history[0].at_ms / 1000
            [line] = [x.split() for x in path.read_text().splitlines() if x.startswith(jid)]
            starts.append((jid, float(line[2]) - put_s))
    return starts


def _crash_then_serve(
    start_master: StartMaster,
    client: Client,
    workdir: Path,
    queues: list[str],
    masters: int,
    killed: int,
) -> None:
    running = [start_master(",".join(queues), "-c", "1") for _ in range(masters)]
    wait_for(lambda: _registered(client, queues, masters), 10, what="every master waiting")
    for master in running[:killed]:
        master.kill()  # SIGKILL: its registrations stay behind
    live = running[killed:]
    path = workdir / "runs"
    # each dead registration takes one job of its queue: put more than there are
    starts = _serve_one_at_a_time(client, queues, killed + 2, path)
    late = [(jid, round(s, 2)) for jid, s in starts if not 0 <= s < START_WITHIN_S]
    assert late == [], f"started later than {START_WITHIN_S} s after their put"
    lines = path.read_text().splitlines()
    assert len(lines) == len(starts) == len({line.split()[0] for line in lines}), "none ran twice"
    pids = {int(line.split()[4]) for line in lines}
    assert pids <= {pid for m in live for pid in m.children()}, "the live masters ran them all"
    wait_for(lambda: _registered(client, queues, len(live)), 10, what="live masters waiting")


@pytest.mark.slow  # by default: the case below, one queue of three
def test_a_master_killed_while_idle_holds_up_no_job_of_its_queue(
    start_master: StartMaster, plain_client: Client, workdir: Path
) -> None:
    _crash_then_serve(start_master, plain_client, workdir, ["q"], masters=2, killed=1)


def test_a_master_killed_while_idle_holds_up_no_job_of_any_of_its_queues(
    start_master: StartMaster, plain_client: Client, workdir: Path
) -> None:
    _crash_then_serve(start_master, plain_client, workdir, ["a", "b", "c"], masters=2, killed=1)


@pytest.mark.slow  # by default: one of two killed, the same _crash_then_serve
def test_two_of_three_masters_killed_while_idle_hold_up_no_job(
    start_master: StartMaster, plain_client: Client, workdir: Path
) -> None:
    _crash_then_serve(start_master, plain_client, workdir, ["q"], masters=3, killed=2)


def test_a_frozen_master_never_runs_a_handed_job_a_live_master_took(
    start_master: StartMaster, plain_client: Client, workdir: Path
) -> None:
    frozen = start_master("q", "-c", "1")
    wait_for(lambda: _idle(plain_client) == 1, 10, what="the first master to wait on q")
    live = start_master("q", "-c", "1")
    wait_for(lambda: _idle(plain_client) == 2, 10, what="both masters waiting on q")
    frozen.send(signal.SIGSTOP)  # the older registration: the next job is handed to it
    path = workdir / "runs"
    try:
        jid = plain_client.queue("q").put(f"{J}:record", {"path": str(path)})
        job = plain_client.get_job(jid)
        assert job is not None and job.worker is not None and str(frozen.pid) in job.worker
        wait_state(plain_client, jid, "complete", 30)
    finally:
        frozen.send(signal.SIGCONT)
    job = plain_client.get_job(jid)
    assert job is not None
    assert [e.event for e in job.history] == ["put", "popped", "lease-lost", "popped", "completed"]
    [line] = path.read_text().split("\n")[:-1]
    assert float(line.split()[2]) - job.history[0].at_ms / 1000 < START_WITHIN_S
    assert int(line.split()[4]) in live.children()
    # woken, the frozen master drops the stale handoff (or lost it with its read)
    dropped = f"job leased ahead not started, its lease ran out jid={jid}"
    wait_for(
        lambda: dropped in frozen.log() or "Redis unavailable (timeout)" in frozen.log(),
        10,
        what="the stale handoff gone",
    )
    after = plain_client.queue("q").put(f"{J}:record", {"path": str(path)})
    wait_state(plain_client, after, "complete")
    assert [x.split()[0] for x in path.read_text().splitlines()] == [jid, after]
