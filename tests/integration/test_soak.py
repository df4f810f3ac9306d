"""Long fault runs (`./dev slow`): masters under a stream of random faults, and
Redis itself killed and restarted. No job is lost, and two attempts of one job
never overlap in time."""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from runtime import Client
from runtime.errors import RedisUnavailable
from runtime.queue.embedded import ServerProcess, find_server_binary
from tests.integration.test_worker_leases import assert_no_overlap
from tests.support.master import MasterProcess
from tests.support.waiting import wait_for

J = "tests.integration.jobs"
pytestmark = pytest.mark.slow


@pytest.fixture
def aof_server() -> Iterator[ServerProcess]:
    directory = Path(f"/tmp/rt-soak-{uuid.uuid4().hex[:8]}")
    server = ServerProcess(find_server_binary(), directory, appendonly=True).start()
    yield server
    server.stop()
    shutil.rmtree(directory, ignore_errors=True)


def _client(server: ServerProcess, namespace: str) -> Client:
    """A client whose queue `q` has a 2 s heartbeat, so lost leases come back fast."""
    client = Client.from_url(server.url, namespace=namespace)
    client.admin.config_set("q-heartbeat", 2)
    return client


def _master(server: ServerProcess, namespace: str, workdir: Path) -> MasterProcess:
    return MasterProcess(server, namespace, workdir, "q", "-c", "2").start()


def _answers(client: Client) -> bool:
    """False while Redis is still loading its append-only file after a restart."""
    try:
        client.conn.now_ms()
    except RedisUnavailable:
        return False
    return True


def _settled(client: Client, jids: list[str]) -> dict[str, str]:
    states = {}
    for jid in jids:
        job = client.get_job(jid)
        states[jid] = "lost" if job is None else job.state
    return states


def _wait_settled(client: Client, jids: list[str], timeout_s: float) -> dict[str, str]:
    def done() -> bool:
        return all(s in ("complete", "failed") for s in _settled(client, jids).values())

    wait_for(done, timeout_s, what="every job to complete or fail")
    return _settled(client, jids)


def test_soak_children_and_masters_killed_at_random_lose_no_job_and_never_overlap(
    aof_server: ServerProcess, workdir: Path
) -> None:
    client = _client(aof_server, "soak")
    path = workdir / "alive"
    q = client.queue("q")
    rng = random.Random(7)  # a failing run can be replayed
    specs = [
        q.spec(f"{J}:alive", {"seconds": rng.uniform(0.01, 0.3), "path": str(path)}, retries=20)
        for _ in range(600)
    ]
    jids = client.put_many(specs)
    masters = [_master(aof_server, "soak", workdir) for _ in "ab"]
    faults = {"child": 0, "master": 0, "hup": 0}
    try:
        end = time.monotonic() + 40
        while time.monotonic() < end:
            time.sleep(rng.uniform(0.2, 0.8))
            master = rng.choice(masters)
            roll = rng.random()
            children = master.children()
            if roll < 0.7 and children:
                with contextlib.suppress(ProcessLookupError):  # it may have just ended
                    os.kill(rng.choice(children), signal.SIGKILL)
                faults["child"] += 1
            elif roll < 0.85:
                master.kill()
                masters.remove(master)
                masters.append(_master(aof_server, "soak", workdir))
                faults["master"] += 1
            else:
                master.send(signal.SIGHUP)
                faults["hup"] += 1
        states = _wait_settled(client, jids, 180)
    finally:
        for master in masters:
            master.close()
    assert all(faults.values()), faults
    assert "lost" not in states.values()
    assert list(states.values()).count("complete") >= len(jids) - 5, "only repeat crashes fail"
    assert_no_overlap(path)
    client.close()


def test_redis_killed_and_restarted_with_aof_loses_no_job(
    aof_server: ServerProcess, workdir: Path
) -> None:
    client = _client(aof_server, "aof")
    path = workdir / "runs"
    q = client.queue("q")
    jids = client.put_many(
        q.spec(f"{J}:record", {"path": str(path), "seconds": 0.01}) for _ in range(1500)
    )
    master = _master(aof_server, "aof", workdir)

    def ran() -> int:
        return len(path.read_text().splitlines()) if path.exists() else 0

    try:
        wait_for(lambda: ran() >= 200, 60, what="jobs to run")
        aof_server.kill(signal.SIGKILL)
        time.sleep(1.0)
        aof_server.start()  # replays its append-only file
        wait_for(lambda: _answers(client), 60, what="Redis to load its append-only file")
        states = _wait_settled(client, jids, 180)
        assert master.proc is not None and master.proc.poll() is None, "the master rode it out"
    finally:
        master.close()
    assert set(states.values()) == {"complete"}, "no job lost, none failed"
    runs = [line.split()[0] for line in path.read_text().splitlines()]
    assert set(runs) == set(jids)
    repeated = len(runs) - len(set(runs))
    assert repeated <= 40, f"only jobs in flight when Redis died run again ({repeated})"
    client.close()
