"""Leases under faults: a master killed or frozen, Redis out of reach. Jobs are
never lost, and two attempts of one job never overlap in time."""

from __future__ import annotations

import json
import shutil
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from runtime import Client
from runtime.queue.embedded import ServerProcess, find_server_binary
from tests.integration.conftest import StartMaster
from tests.integration.test_worker_basics import wait_state
from tests.support.master import MasterProcess, wait_gone
from tests.support.waiting import wait_for

J = "tests.integration.jobs"


def attempts(path: Path) -> dict[tuple[str, int], tuple[float, float]]:
    """(jid, attempt) -> (first, last) time an `alive` job wrote."""
    spans: dict[tuple[str, int], tuple[float, float]] = {}
    for line in path.read_text().splitlines():
        jid, attempt, when = line.split()
        key, t = (jid, int(attempt)), float(when)
        first, last = spans.get(key, (t, t))
        spans[key] = (min(first, t), max(last, t))
    return spans


def assert_no_overlap(path: Path) -> dict[tuple[str, int], tuple[float, float]]:
    spans = attempts(path)
    for (jid, attempt), (_, last) in spans.items():
        later = spans.get((jid, attempt + 1))
        if later is not None:
            assert last < later[0], f"attempts {attempt} and {attempt + 1} of {jid} overlap"
    return spans


def test_a_cpu_bound_job_without_heartbeats_keeps_its_lease(
    start_master: StartMaster, plain_client: Client, workdir: Path
) -> None:
    plain_client.admin.config_set("q-heartbeat", 1)
    start_master("q", "-c", "1")
    path = workdir / "spin"
    jid = plain_client.queue("q").put(f"{J}:spin", {"seconds": 3.5, "path": str(path)})
    wait_state(plain_client, jid, "complete", 20)
    job = plain_client.get_job(jid)
    assert job is not None and job.attempt == 1
    assert [e.event for e in job.history] == ["put", "popped", "completed"]
    assert path.read_text().split() == [jid, "1", "done"]


def test_a_killed_master_s_jobs_run_again_elsewhere_once(
    start_master: StartMaster, plain_client: Client, workdir: Path
) -> None:
    plain_client.admin.config_set("q-heartbeat", 1)
    first = start_master("q", "-c", "2")
    path = workdir / "alive"
    jids = [
        plain_client.queue("q").put(f"{J}:alive", {"seconds": 1.5, "path": str(path)})
        for _ in range(2)
    ]
    wait_for(lambda: plain_client.status("q")["q"]["running"] == 2, 10)
    children = first.children()
    first.kill()
    for pid in children:
        wait_gone(pid, 5)
    start_master("q", "-c", "2")
    for jid in jids:
        wait_state(plain_client, jid, "complete", 30)
        job = plain_client.get_job(jid)
        assert job is not None and job.attempt == 2 and job.remaining == job.retries - 1
        events = [e.event for e in job.history]
        assert events == ["put", "popped", "lease-lost", "popped", "completed"]
    assert_no_overlap(path)


def test_a_frozen_master_s_children_stop_themselves_before_the_lease_expires(
    start_master: StartMaster, plain_client: Client, workdir: Path
) -> None:
    plain_client.admin.config_set("q-heartbeat", 1)
    frozen = start_master("q", "-c", "1")
    path = workdir / "alive"
    jid = plain_client.queue("q").put(f"{J}:alive", {"seconds": 4, "path": str(path)})
    wait_for(path.exists, 10)
    frozen.send(signal.SIGSTOP)
    stopped_at = time.time()
    try:
        other = start_master("q", "-c", "1")
        wait_for(lambda: (plain_client.get_job(jid).attempt or 0) >= 2, 20)  # type: ignore[union-attr]
        # frozen for three leases, however long the other master took to start
        wait_for(lambda: time.time() >= stopped_at + 3, 20, what="three leases to pass")
    finally:
        frozen.send(signal.SIGCONT)
    # thawed, the frozen master reports the job with its stale token: refused
    refused = f"report refused with LeaseLost, nothing changed jid={jid}"
    wait_for(lambda: refused in frozen.log(), 10, what="the refusal in the frozen master's log")
    wait_state(plain_client, jid, "complete", 30)
    spans = assert_no_overlap(path)
    first_last = spans[(jid, 1)][1]
    assert first_last < stopped_at + 1.0, "the child stopped itself within its lease"
    assert "job stopped, its lease was lost" in frozen.log()
    job = plain_client.get_job(jid)
    assert job is not None and job.worker is not None and str(other.pid) in job.worker
    assert (job.state, job.attempt) == ("complete", 2)
    events = [e.event for e in job.history]
    assert events == ["put", "popped", "lease-lost", "popped", "completed"], "nothing released"
    assert frozen.proc is not None and frozen.proc.poll() is None, "the master survives"


@pytest.fixture
def own_server() -> Iterator[ServerProcess]:
    directory = Path(f"/tmp/rt-own-{uuid.uuid4().hex[:8]}")
    server = ServerProcess(find_server_binary(), directory).start()
    yield server
    if server.process is not None:
        server.process.send_signal(signal.SIGCONT)
    server.stop()
    shutil.rmtree(directory, ignore_errors=True)


def test_a_master_cut_off_from_redis_stops_its_jobs_before_their_lease_expires(
    own_server: ServerProcess, workdir: Path
) -> None:
    client = Client.from_url(own_server.url, namespace="cutoff")
    client.admin.config_set("q-heartbeat", 1)
    master = MasterProcess(own_server, "cutoff", workdir, "q", "-c", "1").start()
    try:
        path = workdir / "alive"
        jid = client.queue("q").put(f"{J}:alive", {"seconds": 4, "path": str(path)})
        wait_for(path.exists, 10)
        assert own_server.process is not None
        own_server.process.send_signal(signal.SIGSTOP)
        cut_at = time.time()
        time.sleep(3)
        own_server.process.send_signal(signal.SIGCONT)
        wait_state(client, jid, "complete", 30)
        spans = assert_no_overlap(path)
        assert spans[(jid, 1)][1] < cut_at + 1.0, "stopped before the lease could expire"
        assert master.proc is not None and master.proc.poll() is None
    finally:
        master.close()
        client.close()


def test_a_job_leased_ahead_is_not_started_after_its_lease_ran_out(
    start_master: StartMaster, plain_client: Client, workdir: Path
) -> None:
    plain_client.admin.config_set("q-heartbeat", 1)
    # the master's buffer, not a child's pipeline (see test_worker_pipeline.py)
    master = start_master("q", "-c", "1", "--prefetch", "1", "--pipeline", "0")
    q = plain_client.queue("q")
    for jid in [q.put(f"{J}:noop", {}) for _ in range(3)]:  # short jobs: prefetch starts
        wait_state(plain_client, jid, "complete")
    first, ahead = workdir / "first", workdir / "ahead"
    [_, later] = plain_client.put_many(
        [
            q.spec(f"{J}:record", {"seconds": 0.3, "path": str(first)}),
            q.spec(f"{J}:alive", {"seconds": 0.3, "path": str(ahead)}),
        ]
    )
    wait_for(lambda: plain_client.status("q")["q"]["running"] == 2, 10, what="one leased ahead")
    master.send(signal.SIGSTOP)  # the first job ends while its master is frozen ...
    stopped_at = time.time()
    try:
        assert not first.exists(), "frozen while the first job ran"
        # ... and the lease of the job leased ahead runs out
        wait_for(lambda: time.time() >= stopped_at + 2, 10, what="the lease to run out")
    finally:
        master.send(signal.SIGCONT)
    # Woken, the master finds the job leased ahead stale and drops it; or, when the
    # pop that leased it was still on its way when the master froze, that call's
    # read timed out on waking and the job went with its reply: either way its
    # lease runs out in Redis and the next pop leases it afresh.
    dropped = f"job leased ahead not started, its lease ran out jid={later}"
    lost_read = "Redis unavailable (timeout)"
    wait_for(
        lambda: dropped in master.log() or lost_read in master.log(),
        10,
        what="the stale job dropped or gone with its reply",
    )
    wait_state(plain_client, later, "complete", 30)
    assert f"job stopped, its lease was lost jid={later}" not in master.log()
    ran = {int(line.split()[1]) for line in ahead.read_text().splitlines()}
    assert 1 not in ran, "the attempt whose lease ran out never started"


def _take_lease(client: Client, jid: str) -> None:
    """The job's lease changes hands in Redis (as when another master reclaimed it
    after it ran out): its token in the record is no longer the master's. No cancel
    is published, so the master learns it only from its next renewal."""
    key = client.keys.key("jobs")
    raw = client.redis.hget(key, jid)
    assert isinstance(raw, bytes)
    meta, _, data = raw.partition(b"\n")
    fields = json.loads(meta)
    fields["l"] = "stolen" + fields["l"][6:]
    client.redis.hset(key, jid, json.dumps(fields, separators=(",", ":")).encode() + b"\n" + data)


def test_a_lease_reported_lost_kills_the_child_at_once(
    start_master: StartMaster, plain_client: Client, workdir: Path
) -> None:
    plain_client.admin.config_set("q-heartbeat", 3)  # renewals every 0.45 s
    master = start_master("q", "-c", "1")
    path = workdir / "alive"
    jid = plain_client.queue("q").put(f"{J}:alive", {"seconds": 30, "path": str(path)})
    wait_for(path.exists, 10)
    [child] = master.children()
    _take_lease(plain_client, jid)
    taken_at = time.time()
    wait_gone(child, 5)
    last = attempts(path)[(jid, 1)][1]
    assert last < taken_at + 1.5, "killed at the first renewal after the lease went"
    wait_for(lambda: f"job stopped, its lease was lost jid={jid}" in master.log(), 5)
    job = plain_client.get_job(jid)
    assert job is not None and job.state == "running", "nothing reported for it"
    after = plain_client.queue("q").put(f"{J}:noop", {})
    wait_state(plain_client, after, "complete")
