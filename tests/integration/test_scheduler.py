"""The embedded scheduler with real masters: domain rate limits hold across
masters without holding other domains back; recurring jobs spawn once per tick
with several masters and a restart."""

from __future__ import annotations

import itertools
import signal
from pathlib import Path

import pytest

from runtime import Client
from tests.integration.conftest import StartMaster
from tests.integration.test_worker_basics import wait_state
from tests.support.waiting import idle, wait_for

J = "tests.integration.jobs"


def most_in_a_window(times: list[float], period: float) -> int:
    times = sorted(times)
    return max(sum(1 for u in times if t <= u < t + period) for t in times)


def test_domain_limits_hold_across_two_masters_and_never_block_other_domains(
    start_master: StartMaster, plain_client: Client, workdir: Path
) -> None:
    rate, period, burst = 5, 1.0, 1
    plain_client.set_domain_limit("slow.com", rate=rate, period=period, burst=burst)
    q = plain_client.queue("q")
    path = workdir / "starts"
    specs = []
    for i in range(20):
        for domain in ("slow.com", "fast.org"):
            specs.append(q.spec(f"{J}:record", {"path": str(path), "seconds": 0.01},
                                jid=f"{domain}-{i}", domain=domain))  # fmt: skip
    plain_client.put_many(specs)
    start_master("q", "-c", "2")
    start_master("q", "-c", "2")
    for i in range(20):
        wait_state(plain_client, f"slow.com-{i}", "complete", 30)
    starts: dict[str, list[float]] = {"slow.com": [], "fast.org": []}
    for line in path.read_text().splitlines():
        jid, _, start, *_ = line.split()
        starts[jid.rsplit("-", 1)[0]].append(float(start))
    popped = [  # when each pop let the job start (a pop may lease it a little before)
        next(e.starts_at_ms or e.at_ms
             for e in plain_client.get_job(f"slow.com-{i}").history if e.event == "popped")  # type: ignore[union-attr]
        for i in range(20)
    ]  # fmt: skip
    assert most_in_a_window([t / 1000 for t in popped], period) <= rate + burst
    assert most_in_a_window(starts["slow.com"], period - 0.05) <= rate + burst
    assert max(starts["slow.com"]) - min(starts["slow.com"]) > (20 - rate - burst) / rate - 0.5
    # Nothing held back by the throttled domain, told apart without a clock bound
    # (a slow host may start the masters late): the other domain's 20 jobs are
    # all done starting while the throttled one still has five to start, which
    # its limit spreads over a second at least.
    assert max(starts["fast.org"]) < sorted(starts["slow.com"])[-5], "held back by slow.com"
    assert len(starts["fast.org"]) == 20


@pytest.mark.parametrize(  # kill-9 (its registrations left behind) by default, term under slow
    "stop",
    [
        pytest.param(signal.SIGTERM, id="term", marks=pytest.mark.slow),
        pytest.param(signal.SIGKILL, id="kill-9"),
    ],
)
def test_recurring_jobs_spawn_once_per_tick_with_three_masters_and_a_restart(
    start_master: StartMaster, plain_client: Client, workdir: Path, stop: signal.Signals
) -> None:
    path = workdir / "runs"
    every = 0.2
    if stop == signal.SIGKILL:  # the killed master's leases expire soon: its jobs come back
        plain_client.admin.config_set("q-heartbeat", 1)
    plain_client.scheduling.recur("q", f"{J}:record", {"path": str(path)}, every=every, id="r",
                       policy="all")  # fmt: skip
    masters = [start_master("q", "-c", "1") for _ in range(3)]

    def runs() -> int:
        return len(path.read_text().splitlines()) if path.exists() else 0

    wait_for(lambda: runs() >= 6, 15)  # ticks pass while all three pop
    masters[0].send(stop)
    assert masters[0].wait(15) == (0 if stop == signal.SIGTERM else -signal.SIGKILL)
    start_master("q", "-c", "1")
    wait_for(lambda: runs() >= 14, 15)
    plain_client.scheduling.unrecur("r")
    wait_for(lambda: idle(plain_client.status("q")["q"]), 15)  # one read: no job between two
    jids = [line.split()[0] for line in path.read_text().splitlines()]
    again = {j for j in jids if jids.count(j) > 1}
    if stop == signal.SIGTERM:
        assert again == set(), "every job ran once"
    for jid in again:  # only a job the killed master held runs again (at least once)
        job = plain_client.get_job(jid)
        assert job is not None and "lease-lost" in [e.event for e in job.history]
    ticks = sorted(int(jid.rsplit("-", 1)[1]) for jid in set(jids))
    assert len(ticks) >= 12
    gaps = {b - a for a, b in itertools.pairwise(ticks)}
    assert gaps == {round(every * 1000)}, "one job per tick: none missed, none doubled"
