"""Flow control with real masters: a domain's concurrency cap over three masters
(judged by each run's own start and end), slots held by a master killed with
SIGKILL coming back when its leases are reclaimed, a rate and a cap at once,
expiring jobs of a paused queue, a delayed job with a deadline, and debounced
puts. Fair shares are tested at the Lua level (tests/lua/test_fair.py)."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from runtime import Client
from tests.integration.conftest import StartMaster
from tests.support.waiting import wait_for

J = "tests.integration.jobs"


def runs(path: Path) -> list[tuple[str, int, float, float, int]]:
    """The `record` job's lines: (jid, attempt, start, end, pid)."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        jid, attempt, start, end, pid = line.split()
        out.append((jid, int(attempt), float(start), float(end), int(pid)))
    return out


def most_overlapping(spans: list[tuple[float, float]]) -> int:
    """The most spans (start, end) open at one instant."""
    edges = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
    most = now = 0
    for _, step in edges:  # an end sorts before a start at the same instant
        now += step
        most = max(most, now)
    return most


def slots(client: Client, domain: str) -> int:
    raw = client.redis.hget(client.keys.key("domain_slots"), domain)
    return int(raw) if raw is not None else 0


def states(client: Client, jids: list[str]) -> dict[str, int]:
    """How many of the jobs are in each state."""
    found: dict[str, int] = {}
    for jid in jids:
        job = client.get_job(jid)
        state = job.state if job else "gone"
        found[state] = found.get(state, 0) + 1
    return found


def all_complete(client: Client, jids: list[str]) -> bool:
    return states(client, jids) == {"complete": len(jids)}


def wait_ms(client: Client, ms: int) -> None:
    """Waits until Redis's clock has moved `ms` on."""
    until = client.conn.now_ms() + ms
    wait_for(lambda: client.conn.now_ms() >= until, timeout_s=10 + ms / 1000, what=f"{ms} ms")


def popped_ms(client: Client, jid: str) -> int:
    """When the job's (last) lease let it start, by Redis time."""
    job = client.get_job(jid)
    assert job is not None
    popped = [e for e in job.history if e.event == "popped"]
    assert popped, f"{jid} was never popped"
    return popped[-1].starts_at_ms or popped[-1].at_ms


@pytest.mark.slow
def test_a_cap_of_three_holds_over_three_masters_and_free_jobs_pass(
    start_master: StartMaster, plain_client: Client, workdir: Path
) -> None:
    plain_client.set_domain_limit("api.example.com", concurrency=3)
    capped_path, free_path = workdir / "capped.log", workdir / "free.log"
    q = plain_client.queue("q")
    for _ in range(3):  # all nine children wait before the first put
        start_master("q", "--concurrency", "3")
    capped = [
        q.put(f"{J}:record", {"path": str(capped_path), "seconds": 0.2}, domain="api.example.com")
        for _ in range(60)
    ]
    free = [q.put(f"{J}:record", {"path": str(free_path), "seconds": 0.2}) for _ in range(60)]
    wait_for(lambda: all_complete(plain_client, capped + free), timeout_s=120, what="all jobs")
    capped_runs, free_runs = runs(capped_path), runs(free_path)
    assert sorted(r[0] for r in capped_runs) == sorted(capped), "each capped job ran once"
    assert sorted(r[0] for r in free_runs) == sorted(free), "each free job ran once"
    assert {r[1] for r in capped_runs} == {1}, "no capped job spent an attempt waiting"
    assert most_overlapping([(r[2], r[3]) for r in capped_runs]) <= 3
    assert len({r[4] for r in capped_runs}) > 3, "the capped jobs ran in many children"
    last_free_end = max(r[3] for r in free_runs)
    capped_starts = sorted(r[2] for r in capped_runs)
    assert last_free_end < capped_starts[-10], "free jobs were not held behind capped ones"
    assert slots(plain_client, "api.example.com") == 0


def ledger_spans(path: Path) -> dict[tuple[str, int], tuple[float, float]]:
    """The `ledger` job's attempts: (jid, attempt) -> (start, last line's time)."""
    spans: dict[tuple[str, int], tuple[float, float]] = {}
    for line in path.read_text().splitlines():
        jid, attempt, _, _, when = line.split()
        key, t = (jid, int(attempt)), float(when)
        first, last = spans.get(key, (t, t))
        spans[key] = (min(first, t), max(last, t))
    return spans


@pytest.mark.slow
def test_the_slots_of_a_master_killed_with_sigkill_come_back_with_its_leases(
    start_master: StartMaster, plain_client: Client, workdir: Path
) -> None:
    plain_client.admin.config_set("q-heartbeat", 2)
    plain_client.set_domain_limit("db", concurrency=2)
    log = workdir / "ledger.log"
    q = plain_client.queue("q")
    doomed = start_master("q", "--concurrency", "2", "--prefetch", "0")
    long = [q.put(f"{J}:ledger", {"path": str(log), "seconds": 4}, domain="db") for _ in range(2)]
    wait_for(lambda: states(plain_client, long) == {"running": 2}, what="both slots held")
    survivor = start_master("q", "--concurrency", "3", "--prefetch", "0")
    short = [
        q.put(f"{J}:ledger", {"path": str(log), "seconds": 0.3}, domain="db") for _ in range(4)
    ]
    assert slots(plain_client, "db") == 2
    assert states(plain_client, short) == {"throttled": 4}
    doomed.send(signal.SIGKILL)
    doomed.wait()
    wait_for(lambda: slots(plain_client, "db") < 2 or all_complete(plain_client, short),
             timeout_s=2 + 10, what="the dead master's slots")  # fmt: skip
    wait_for(lambda: all_complete(plain_client, long + short), timeout_s=60, what="every job")
    spans = ledger_spans(log)
    assert {jid for jid, _ in spans} == set(long + short)
    assert most_overlapping(list(spans.values())) <= 2, "killed runs count until their last line"
    for jid in long:
        job = plain_client.get_job(jid)
        assert job is not None and job.attempt == 2
        assert "lease-lost" in [e.event for e in job.history]
    assert slots(plain_client, "db") == 0
    survivor.send(signal.SIGTERM)


@pytest.mark.slow
def test_a_rate_and_a_cap_hold_at_once(
    start_master: StartMaster, plain_client: Client, workdir: Path
) -> None:
    plain_client.set_domain_limit("both", rate=5, period=1.0, concurrency=2)
    log = workdir / "runs.log"
    q = plain_client.queue("q")
    jids = [
        q.put(f"{J}:record", {"path": str(log), "seconds": 0.5}, domain="both") for _ in range(12)
    ]
    start_master("q", "--concurrency", "4")
    wait_for(lambda: all_complete(plain_client, jids), timeout_s=60, what="all jobs")
    done = runs(log)
    assert most_overlapping([(r[2], r[3]) for r in done]) <= 2, "the cap"
    starts = sorted(popped_ms(plain_client, jid) for jid in jids)
    assert max(sum(1 for u in starts if t <= u < t + 1000) for t in starts) <= 5, "the rate"


def test_jobs_of_a_paused_queue_expire_instead_of_running_when_it_resumes(
    start_master: StartMaster, plain_client: Client, workdir: Path
) -> None:
    log = workdir / "runs.log"
    q = plain_client.queue("q")
    q.pause()
    start_master("q", "--concurrency", "2")
    jids = [q.put(f"{J}:record", {"path": str(log)}, expires_in=1) for _ in range(20)]
    kid = q.put(f"{J}:record", {"path": str(log)}, depends=[jids[0]])
    wait_ms(plain_client, 2000)
    q.resume()
    wait_for(lambda: plain_client.failed().get("runtime.Expired") == 20, what="the expiries")
    wait_for(lambda: plain_client.failed().get("runtime.DependencyFailed") == 1, what="cascade")
    assert runs(log) == [], "no expired job ran"
    job = plain_client.get_job(kid)
    assert job is not None and job.failure is not None
    assert job.failure.group == "runtime.DependencyFailed"


def test_a_delayed_job_with_a_deadline_runs_at_its_due_time(
    start_master: StartMaster, plain_client: Client, workdir: Path
) -> None:
    log = workdir / "runs.log"
    start_master("q", "--concurrency", "1")
    jid = plain_client.queue("q").put(f"{J}:record", {"path": str(log)}, delay=2, expires_in=1)
    job = plain_client.get_job(jid)
    assert job is not None
    wait_for(lambda: all_complete(plain_client, [jid]), timeout_s=20, what="the delayed job")
    assert popped_ms(plain_client, jid) >= job.put_at_ms + 2000
    assert [r[0] for r in runs(log)] == [jid]


def test_debounced_puts_make_one_run_with_the_last_data(
    start_master: StartMaster, plain_client: Client, workdir: Path
) -> None:
    log = workdir / "runs.log"
    start_master("q", "--concurrency", "1")
    q = plain_client.queue("q")
    got: list[str] = []
    for i in range(5):
        got.append(q.put(f"{J}:record", {"path": str(log), "v": i}, unique_key="doc", debounce=1))
        if i < 4:
            wait_ms(plain_client, 200)
    assert len(set(got)) == 1
    wait_for(lambda: all_complete(plain_client, got[:1]), timeout_s=20, what="the debounced run")
    job = plain_client.get_job(got[0])
    assert job is not None
    last_put_ms = [e for e in job.history if e.event == "debounced"][-1].at_ms
    assert popped_ms(plain_client, got[0]) >= last_put_ms + 1000
    assert job.data["v"] == 4 and job.attempt == 1
    later = q.put(f"{J}:record", {"path": str(log), "v": 5}, unique_key="doc", debounce=1)
    assert later != got[0]
    wait_for(lambda: all_complete(plain_client, [later]), timeout_s=20, what="the second run")
    assert [r[0] for r in runs(log)] == [got[0], later]
