"""One bad record stops nothing (issue 11): a job record or its data that does not
decode (raw bytes, meta or data that is not JSON, a pickle, no newline, data
nested a thousand levels deep) is failed as `runtime.CorruptJob`, and the good
jobs queued around it complete, on a master that keeps running.

The records are written with raw HSET over jobs put normally (so they sit in a
queue's lane); the Lua side of the same rule is tested in tests/lua/.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime import Client
from runtime.queue.wire import JobSpec
from tests.integration.conftest import StartMaster
from tests.support import redis_faults
from tests.support.fault_run import J, Ledger
from tests.support.waiting import wait_for

CORRUPT = "runtime.CorruptJob"
KINDS: list[redis_faults.Kind] = [*redis_faults.KINDS, "deep"]


def _failed_as_corrupt(client: Client, jid: str) -> bool:
    """Read raw: get_job need not decode a corrupt record."""
    listed = client.redis.lrange(client.keys.key("failed", group=CORRUPT), 0, -1)
    return jid.encode() in listed


def _complete(client: Client, jids: list[str]) -> bool:
    return all(job is not None and job.state == "complete" for job in client.get_jobs(jids))


def _specs(client: Client, ledger: Ledger, n: int) -> list[JobSpec]:
    q = client.queue("q")
    return [q.spec(f"{J}:ledger", {"path": str(ledger.path), "seconds": 0}) for _ in range(n)]


def _queue_with_a_corrupt_record(
    client: Client, ledger: Ledger, kind: redis_faults.Kind, good_n: int = 3
) -> tuple[list[str], str]:
    """Good jobs, one to corrupt, good jobs; the queue paused while it is written."""
    q = client.queue("q")
    q.pause()
    before = client.put_many(_specs(client, ledger, good_n))
    [bad] = client.put_many(_specs(client, ledger, 1))
    after = client.put_many(_specs(client, ledger, good_n))
    conn = client.redis
    redis_faults.corrupt_record(conn, client.keys, bad, kind)
    q.resume()
    return before + after, bad


@pytest.mark.parametrize("kind", KINDS)
def test_a_corrupt_record_is_failed_and_the_jobs_around_it_complete(
    start_master: StartMaster, plain_client: Client, workdir: Path, kind: redis_faults.Kind
) -> None:
    master = start_master("q", "-c", "2")
    ledger = Ledger(workdir / "ledger")
    good, bad = _queue_with_a_corrupt_record(plain_client, ledger, kind)

    def settled() -> bool:
        assert master.proc is not None and master.proc.poll() is None, master.log()[-3000:]
        return _complete(plain_client, good) and _failed_as_corrupt(plain_client, bad)

    wait_for(settled, 20, what=f"good jobs complete, the {kind} record failed as {CORRUPT}")
    assert plain_client.failed() == {CORRUPT: 1}
    assert bad not in ledger.by_jid(), "the corrupt job never ran"
    fresh = plain_client.queue("q").put(f"{J}:ledger", {"path": str(ledger.path)})
    wait_for(lambda: _complete(plain_client, [fresh]), 10, what="the master to keep leasing")
    assert master.proc is not None and master.proc.poll() is None


def test_a_master_started_on_a_queue_headed_by_corrupt_records_serves_it(
    start_master: StartMaster, plain_client: Client, workdir: Path
) -> None:
    """Every kind at once, at the head of the queue before any master runs."""
    ledger = Ledger(workdir / "ledger")
    bad = plain_client.put_many(_specs(plain_client, ledger, len(KINDS)))
    good = plain_client.put_many(_specs(plain_client, ledger, 3))
    for jid, kind in zip(bad, KINDS, strict=True):
        redis_faults.corrupt_record(plain_client.redis, plain_client.keys, jid, kind)
    master = start_master("q", "-c", "2")

    def settled() -> bool:
        assert master.proc is not None and master.proc.poll() is None, master.log()[-3000:]
        return _complete(plain_client, good) and all(
            _failed_as_corrupt(plain_client, jid) for jid in bad
        )

    wait_for(settled, 20, what=f"good jobs complete, every corrupt record failed as {CORRUPT}")
    assert plain_client.failed() == {CORRUPT: len(KINDS)}
