"""Batches under the combined faults of test_combined_faults.py (`./dev slow`):
1,000 jobs of one batch put through overlapping faults (resets, partitions,
slow links, lost replies, masters frozen and told to replace their children,
Redis killed and restarted from its append-only file). Checks: every job that
landed completes, the batch counts exactly those, and each callback is put
exactly once. RUNTIME_BATCH_FAULT_JOBS sets the number of jobs."""

from __future__ import annotations

import contextlib
import os
import random
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from runtime.errors import Error, JobExists
from runtime.queue.api.batches import BatchStatus
from runtime.queue.embedded import ServerProcess
from tests.integration.test_combined_faults import (  # the same faults, the same rig
    FAULT_EVERY_S,
    MASTERS,
    PUTS_PER_S,
    Schedule,
    _start_fault,
    aof_always,  # noqa: F401 - a fixture used here
)
from tests.support import redis_faults
from tests.support.fault_run import FaultRun
from tests.support.proxy import Proxy
from tests.support.waiting import wait_for

JOBS = int(os.environ.get("RUNTIME_BATCH_FAULT_JOBS", "1000"))
pytestmark = [pytest.mark.slow, pytest.mark.timeout(int(JOBS / PUTS_PER_S) + 600)]
LEDGER = "tests.integration.jobs:ledger"


def _until(what: str, call: Callable[[], object], timeout_s: float = 120) -> object:
    """`call()` retried through faults until it answers something (not None)."""

    def attempt() -> object:
        with contextlib.suppress(Error):
            return call()
        return None

    return wait_for(attempt, timeout_s, interval_s=0.2, what=what)


def test_a_batch_under_combined_faults_counts_exactly_and_calls_back_once(
    aof_always: ServerProcess,  # noqa: F811 - the fixture imported above
    workdir: Path,
) -> None:
    run = FaultRun(aof_always, workdir, namespace="batchfaults")
    proxies = [Proxy(str(aof_always.socket)).start() for _ in range(MASTERS)]
    plan = Schedule(random.Random(31))
    tried: list[str] = []
    acknowledged: list[str] = []
    try:
        for proxy in proxies:
            run.start_masters(1, 2, proxy.url)
        client = run.client
        b = client.batch(
            on_success=("cb", LEDGER, {"kind": "success"}),
            on_complete=("cb", LEDGER, {"kind": "complete"}),
        )
        q = b.queue("q")
        data = {"path": str(run.ledger.path), "seconds": 0.0}
        next_put = next_fault = time.monotonic()
        while len(tried) < JOBS:
            now = time.monotonic()
            plan.due()
            if len(tried) == JOBS // 2 and "redis" not in plan.kinds:  # at least once
                redis_faults.restart_with_aof(run.server)
                plan.count("redis", *range(MASTERS))
            elif now >= next_fault:
                _start_fault(run, proxies, plan)
                next_fault = now + plan.rng.uniform(*FAULT_EVERY_S)
            if now >= next_put:
                data["seconds"] = plan.rng.uniform(0.0, 0.05)
                jid = uuid.uuid4().hex
                tried.append(jid)
                with contextlib.suppress(Error):  # not acknowledged: it may have landed
                    with contextlib.suppress(JobExists):  # an earlier try landed
                        q.put(LEDGER, data, jid=jid, retries=20)
                    acknowledged.append(jid)
                next_put += 1.0 / PUTS_PER_S
            time.sleep(max(0.0, min(next_put, next_fault) - time.monotonic()))
        _until("the batch to close", b.close)
        plan.due(everything=True)
        for proxy in proxies:
            proxy.passthrough()
        run.assert_alive()
        wait_for(lambda: redis_faults.answers(run.conn), 60, what="Redis to answer")

        def settled() -> BatchStatus | None:
            status = client.get_batch(b.bid)
            return status if status is not None and status.settled_ms is not None else None

        status = _until("the batch to settle", settled, 180)
        assert isinstance(status, BatchStatus)
        found = [
            j for at in range(0, len(tried), 1000) for j in client.get_jobs(tried[at : at + 1000])
        ]
        landed = {jid for jid, job in zip(tried, found, strict=True) if job is not None}
        assert set(acknowledged) <= landed
        assert all(job is None or job.state == "complete" for job in found)
        counts = (status.total, status.completed, status.failed, status.pending)
        assert counts == (len(landed), len(landed), 0, 0)
        callbacks = [job.data for job in client.queue("cb").peek(100)]
        assert sorted(str(d["kind"]) for d in callbacks) == ["complete", "success"]
        assert all(d["bid"] == b.bid and d["completed"] == len(landed) for d in callbacks)
        run.ledger.assert_no_overlap()
        run.assert_alive()
        run.assert_no_tracebacks()
        print(f"\nbatch under faults: {len(landed)} jobs landed, faults {plan.kinds}")
    finally:
        plan.due(everything=True)
        run.close()
        for proxy in proxies:
            proxy.stop()
