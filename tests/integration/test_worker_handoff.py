"""Jobs handed to idle masters: a put reaches a waiting master without a pop call,
and a job handed to a frozen master is never started once its first lease ran out
(another master runs it; the frozen one's report is refused)."""

from __future__ import annotations

import signal
import time
from pathlib import Path

from runtime import Client
from tests.integration.conftest import StartMaster
from tests.integration.test_worker_basics import wait_state
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
    plain_client.config_set("q-heartbeat", 1)  # a first lease of 1 s
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
    # Woken, the frozen master either reads the stale handoff and drops it (then its
    # release is refused), or its blocking read timed out during the freeze and the
    # handoff went with that read: either way it never starts the job.
    dropped = f"job leased ahead not started, its lease ran out jid={jid}"
    refused = f"report refused with LeaseLost, nothing changed jid={jid}"
    lost_read = "Redis unavailable (timeout)"
    wait_for(lambda: (dropped in frozen.log() and refused in frozen.log())
             or lost_read in frozen.log(), 10, what="the stale handoff gone")  # fmt: skip
    after = plain_client.queue("q").put(f"{J}:noop", {})
    wait_state(plain_client, after, "complete")
    assert [line.split()[1] for line in path.read_text().splitlines()] == ["2"]
    job = plain_client.get_job(jid)
    assert job is not None and [e.event for e in job.history] == [
        "put", "popped", "lease-lost", "popped", "completed"
    ]  # fmt: skip
