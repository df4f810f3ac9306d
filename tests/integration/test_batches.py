"""Batches through real masters: jobs that add to their batch (ctx.batch.put),
failures retried until on_success fires, and a master killed mid-batch. The
callbacks go to a queue no master serves, so each one put stays there."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from runtime import Client
from runtime.queue.api.batches import BatchStatus
from tests.integration.batch_jobs import B
from tests.integration.conftest import StartMaster
from tests.support.waiting import wait_for

MODULES = ("tests.integration.jobs", "tests.integration.batch_jobs")
SUCCESS = ("cb", f"{B}:nap", {"kind": "success"})
COMPLETE = ("cb", f"{B}:nap", {"kind": "complete"})


def callbacks(client: Client) -> list[dict[str, object]]:
    return [job.data for job in client.queue("cb").peek(100)]


def settled(client: Client, bid: str, timeout_s: float = 60) -> BatchStatus:
    def done() -> BatchStatus | None:
        status = client.get_batch(bid)
        return status if status is not None and status.settled_ms is not None else None

    found = wait_for(done, timeout_s, interval_s=0.05, what=f"batch {bid} to settle")
    assert found is not None
    return found


@pytest.mark.parametrize("now", [False, True], ids=["with-completion", "at-once"])
def test_jobs_a_batch_job_adds_keep_it_open_until_they_end(
    start_master: StartMaster, plain_client: Client, now: bool
) -> None:
    start_master("q", "-c", "2", modules=MODULES)
    b = plain_client.batch(on_success=SUCCESS, on_complete=COMPLETE)
    parent = b.queue("q").put(f"{B}:grow", {"children": 3, "seconds": 0.3, "now": now})
    b.close()
    seen_total = 0
    deadline = time.monotonic() + 60
    while True:  # polled every 50 ms: pending never negative, no callback before the end
        # the callbacks read first: a batch settles (puts them and records their
        # jids, in one call) at any moment, so a status read after them that
        # records no callback proves none had been put when they were read
        put_already = callbacks(plain_client)
        status = plain_client.get_batch(b.bid)
        assert status is not None
        assert status.pending >= 0 and status.total >= seen_total
        seen_total = status.total
        if status.success_jid or status.complete_jid:
            break
        assert put_already == []
        assert time.monotonic() < deadline, status
        time.sleep(0.05)
    status = settled(plain_client, b.bid)
    assert (status.total, status.completed, status.failed, status.pending) == (4, 4, 0, 0)
    jobs = [j for j in plain_client.get_jobs([parent]) if j]
    assert jobs and jobs[0].state == "complete"
    children = [ev.jids for ev in jobs[0].history if ev.event == "puts"]
    ended = plain_client.get_jobs([jid for jids in children for jid in jids])
    assert len(ended) == 3 and all(j is not None and j.state == "complete" for j in ended)
    fired = plain_client.get_job(status.success_jid or "")
    assert fired is not None
    last_end = max(j.history[-1].at_ms for j in ended if j)
    assert fired.put_at_ms >= last_end, "the callback came after the jobs it added ended"
    kinds = sorted(str(d["kind"]) for d in callbacks(plain_client))
    assert kinds == ["complete", "success"]


def test_failed_jobs_fire_on_complete_then_on_success_once_they_are_retried(
    start_master: StartMaster, plain_client: Client, workdir: Path
) -> None:
    start_master("q", "-c", "2", modules=MODULES)
    flag = workdir / "succeed"
    b = plain_client.batch(on_success=SUCCESS, on_complete=COMPLETE)
    specs = [b.queue("q").spec(f"{B}:nap", {}) for _ in range(45)]
    specs += [b.queue("q").spec(f"{B}:fail_unless", {"path": str(flag)}) for _ in range(5)]
    b.put_many(specs)
    b.close()
    status = settled(plain_client, b.bid)
    assert (status.completed, status.failed, status.success_jid) == (45, 5, None)
    [fired] = callbacks(plain_client)
    assert fired == {"kind": "complete", "bid": b.bid, "total": 50, "completed": 45, "failed": 5}
    flag.touch()
    assert plain_client.retry_batch(b.bid) == 5
    wait_for(lambda: len(callbacks(plain_client)) == 2, 60, what="on_success")
    status = settled(plain_client, b.bid)
    assert (status.completed, status.failed) == (50, 0)
    kinds = sorted(str(d["kind"]) for d in callbacks(plain_client))
    assert kinds == ["complete", "success"], "on_complete fired once only"


def test_a_master_killed_mid_batch_leaves_exact_counts_and_one_callback_each(
    start_master: StartMaster, plain_client: Client
) -> None:
    plain_client.admin.config_set("heartbeat", 2)
    first = start_master("q", "-c", "4", modules=MODULES)
    b = plain_client.batch(on_success=SUCCESS, on_complete=COMPLETE)
    b.put_many([b.queue("q").spec(f"{B}:nap", {"seconds": 0.4}, retries=20) for _ in range(40)])
    b.close()

    def some_done_some_running() -> bool:
        status = plain_client.get_batch(b.bid)
        running = plain_client.queue("q").counts()["running"]
        return status is not None and status.completed >= 4 and bool(running)

    wait_for(some_done_some_running, 60, interval_s=0.02, what="the batch to be under way")
    first.send(signal.SIGKILL)
    first.wait()
    start_master("q", "-c", "4", modules=MODULES)
    status = settled(plain_client, b.bid, timeout_s=120)
    assert (status.total, status.completed, status.failed, status.pending) == (40, 40, 0, 0)
    kinds = sorted(str(d["kind"]) for d in callbacks(plain_client))
    assert kinds == ["complete", "success"]
