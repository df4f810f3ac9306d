"""Combined faults (issue 23, `./dev slow`): three masters of two children, each
behind its own fault proxy, take a steady stream of puts with jids the client
chooses while overlapping faults hit them: resets, partitions shorter and longer
than the lease, slow links, lost replies, masters frozen (SIGSTOP, SIGCONT) and
told to replace their children (HUP), and Redis killed with `appendfsync always`
and restarted from its append-only file.

Checks: every acknowledged put completes, no two attempts of a job overlap, no
master exits or logs a traceback, and each master logs at most two lines (down,
up) per fault that reached it. RUNTIME_COMBINED_S sets the length (default 180 s).
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from runtime.errors import Error, JobExists
from runtime.queue.embedded import ServerProcess
from tests.support import redis_faults
from tests.support.fault_run import DOWN, LEASE_S, UP, FaultRun
from tests.support.proxy import Proxy
from tests.support.waiting import wait_for

DURATION_S = float(os.environ.get("RUNTIME_COMBINED_S", "180"))
pytestmark = [pytest.mark.slow, pytest.mark.timeout(int(DURATION_S) + 300)]
PUTS_PER_S = 40
FAULT_EVERY_S = (1.0, 4.0)  # a new fault starts this often (uniform), whatever still runs
MASTERS = 3


@dataclass
class Schedule:
    """Faults in progress: each with the time it ends and what undoes it."""

    rng: random.Random
    pending: list[tuple[float, Callable[[], None]]] = field(default_factory=list)
    hits: dict[int, int] = field(default_factory=dict)  # master index -> faults that reached it
    kinds: dict[str, int] = field(default_factory=dict)

    def count(self, kind: str, *masters: int) -> None:
        self.kinds[kind] = self.kinds.get(kind, 0) + 1
        for i in masters:
            self.hits[i] = self.hits.get(i, 0) + 1

    def later(self, seconds: float, undo: Callable[[], None]) -> None:
        self.pending.append((time.monotonic() + seconds, undo))

    def due(self, everything: bool = False) -> None:
        now = time.monotonic()
        for item in [p for p in self.pending if everything or p[0] <= now]:
            self.pending.remove(item)
            item[1]()


@pytest.fixture
def aof_always() -> Iterator[ServerProcess]:
    with redis_faults.private_server(appendonly=True, extra="appendfsync always") as server:
        yield server


def _start_fault(run: FaultRun, proxies: list[Proxy], plan: Schedule) -> None:
    rng = plan.rng
    i = rng.randrange(MASTERS)
    proxy, master = proxies[i], run.masters[i]
    kind = rng.choice(
        [
            "reset",
            "reset",
            "flap",
            "partition",
            "partition",
            "delay",
            "drop",
            "stop",
            "hup",
            "redis",
        ]
    )
    if kind == "redis":  # kill -9, then a start that replays the append-only file
        redis_faults.restart_with_aof(run.server)
        plan.count(kind, *range(MASTERS))
        return
    plan.count(kind, i)
    if kind == "reset":
        proxy.reset()
    elif kind == "flap":
        proxy.reset_for(rng.uniform(0.2, 1.0))
    elif kind == "partition":  # shorter or longer than the lease
        proxy.blackhole()
        plan.later(rng.uniform(0.5, 2 * LEASE_S), proxy.passthrough)
    elif kind == "delay":
        proxy.delay(up_ms=150, down_ms=150)  # 300 ms a round trip
        plan.later(rng.uniform(1.0, 4.0), proxy.passthrough)
    elif kind == "drop":
        proxy.drop_reply(b"", (b"FCALL", b"EVALSHA"))
    elif kind == "stop":
        master.send(signal.SIGSTOP)
        plan.later(rng.uniform(0.3, 2 * LEASE_S), lambda: master.send(signal.SIGCONT))
    else:
        master.send(signal.SIGHUP)


def test_overlapping_faults_lose_no_job_overlap_no_attempt_and_log_no_traceback(
    aof_always: ServerProcess, workdir: Path
) -> None:
    run = FaultRun(aof_always, workdir, namespace="combined")
    proxies = [Proxy(str(aof_always.socket)).start() for _ in range(MASTERS)]
    plan = Schedule(random.Random(23))
    acknowledged: list[str] = []
    try:
        for proxy in proxies:
            run.start_masters(1, 2, proxy.url)
        q = run.client.queue("q")
        data = {"path": str(run.ledger.path), "seconds": 0.0}
        end = time.monotonic() + DURATION_S
        next_put = next_fault = time.monotonic()
        while time.monotonic() < end:
            now = time.monotonic()
            plan.due()
            if now >= next_fault:
                _start_fault(run, proxies, plan)
                next_fault = now + plan.rng.uniform(*FAULT_EVERY_S)
            if now >= next_put:
                data["seconds"] = plan.rng.uniform(0.0, 0.05)
                jid = uuid.uuid4().hex
                with contextlib.suppress(Error):  # not acknowledged: not counted
                    with contextlib.suppress(JobExists):  # an earlier try landed, not its reply
                        q.put("tests.integration.jobs:ledger", data, jid=jid, retries=20)
                    acknowledged.append(jid)
                next_put += 1.0 / PUTS_PER_S
            time.sleep(max(0.0, min(next_put, next_fault) - time.monotonic()))
        plan.due(everything=True)
        for proxy in proxies:
            proxy.passthrough()
        healed = time.monotonic()
        run.jids = acknowledged
        run.assert_alive()
        wait_for(lambda: redis_faults.answers(run.conn), 60, what="Redis to answer")
        try:
            run.assert_nothing_lost(timeout_s=120)
        except AssertionError:
            states = run.states()
            stuck = [j for j, st in states.items() if st != "complete"]
            summary = {st: list(states.values()).count(st) for st in set(states.values())}
            raise AssertionError(f"{summary}\n{run.describe(stuck[:5])}") from None
        drained_s = time.monotonic() - healed
        run.assert_alive()
        run.assert_no_tracebacks()
        for i, master in enumerate(run.masters):
            lines = [ln for ln in master.log().splitlines() if DOWN in ln or UP in ln]
            most = 2 * plan.hits.get(i, 0)
            assert len(lines) <= most, f"master {i}: {len(lines)} lines for {most // 2} faults"
        print(
            f"\ncombined faults: {len(acknowledged)} puts acknowledged, 0 lost, "
            f"faults {plan.kinds}, drained {drained_s:.1f} s after healing"
        )
    finally:
        plan.due(everything=True)
        run.close()
        for proxy in proxies:
            proxy.stop()
