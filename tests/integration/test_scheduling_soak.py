"""A randomized scheduling soak (`./dev slow`, issue 18): three masters on one
TCP Redis serve four queues while queues are paused and resumed, a domain is
rate-limited, a recurrence ticks, and masters are stopped (TERM), killed
(SIGKILL) and restarted; jobs are put with a delay right after another job of
the same queue completed. Every delayed job whose attempt no fault touched
is leased within 0.5 s of its due time, 95 % of them start within 50 ms of it,
and none starts before it.

The share is for the host, not the scheduler: the suite shares its machine, and
on a loaded one (traced at a load of 8 to 12 on 2 cores) every master that knew
a due time fired its own timer late at the same moment, 40 to 300 ms, and Redis
ran their pops late too (up to 0.28 s), and children started jobs late (up to
0.5 s after their master sent them). A scheduling fault leases one job later
than any of that (a wake-up lost, a hand-off to a dead master: the masters'
fallback, 1 s here) or makes many late (a next due time computed wrong).

SCHEDULING_SOAK_S sets how long the faults go on (default 60 s; the issue's
run is 120)."""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from runtime import Client
from runtime.errors import WaitTimeout
from runtime.queue.embedded import ServerProcess, find_server_binary
from tests.support.master import MasterProcess
from tests.support.waiting import wait_for

J = "tests.integration.jobs"
QUEUES = ("a", "b", "c", "d")  # d is paused and resumed: its jobs are not timed
TIMED = ("a", "b", "c")
DELAY_S = 1.0
ON_TIME_S = 0.05
ON_TIME_SHARE = 0.95  # of the delayed jobs no fault touched (the rest: a loaded host)
LATE_S = 0.5  # none leased later: below the masters' fallback (their idle wait, 1 s here)
SOAK_S = float(os.environ.get("SCHEDULING_SOAK_S", "60"))
# the soak, then up to 60 s for the last delayed jobs, then the checks
pytestmark = [pytest.mark.slow, pytest.mark.timeout(int(SOAK_S) + 150)]


class TcpServer(ServerProcess):
    port = 0

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"


@pytest.fixture
def tcp_server() -> Iterator[TcpServer]:
    directory = Path(f"/tmp/rt-sched-{uuid.uuid4().hex[:8]}")
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    server = TcpServer(
        find_server_binary(), directory, appendonly=True, extra=f"port {port}\nbind 127.0.0.1"
    )
    server.port = port
    server.start()
    yield server
    server.stop()
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def started() -> Iterator[list[MasterProcess]]:
    """Every master the soak starts, stopped at the end (before its Redis): one left
    running would retry that Redis for good, a load on every test after it."""
    masters: list[MasterProcess] = []
    yield masters
    for master in masters:
        master.close()


def _master(
    server: TcpServer, namespace: str, workdir: Path, started: list[MasterProcess]
) -> MasterProcess:
    master = MasterProcess(server, namespace, workdir, ",".join(QUEUES), "-c", "2", url=server.url)
    started.append(master)
    return master.start()


def _faults(
    server: TcpServer,
    client: Client,
    namespace: str,
    workdir: Path,
    masters: list[MasterProcess],
    started: list[MasterProcess],
    rng: random.Random,
    until: float,
    stopped: threading.Event,
    journal: list[str],
) -> None:
    """One fault at a time, each followed by a restart: at least two masters serve.
    Each fault is noted in `journal` (time.time(), what, which master)."""
    while time.monotonic() < until and not stopped.is_set():
        time.sleep(rng.uniform(1.0, 3.0))
        fault = rng.choice(["term", "kill", "pause", "limit"])
        if fault in ("term", "kill"):
            index = rng.randrange(len(masters))
            victim = masters[index]
            journal.append(f"{time.time():.3f} {fault} {victim.pid}")
            if fault == "term":
                victim.send(signal.SIGTERM)
                victim.wait()
            else:
                victim.kill()
            masters[index] = _master(server, namespace, workdir, started)
            journal.append(f"{time.time():.3f} started {masters[index].pid}")
        elif fault == "pause":
            d = client.queue("d")
            journal.append(f"{time.time():.3f} pause d")
            d.pause()
            d.put(f"{J}:noop", {}, delay=rng.uniform(0.1, 2.0))
            time.sleep(rng.uniform(0.5, 2.0))
            d.resume()
            journal.append(f"{time.time():.3f} resume d")
        else:
            journal.append(f"{time.time():.3f} limit")
            client.set_domain_limit("slow.example", rate=rng.choice([2, 5, 20]), period=1.0)


def test_delayed_jobs_start_on_time_through_pauses_limits_recurrences_and_master_faults(
    tcp_server: TcpServer, workdir: Path, started: list[MasterProcess]
) -> None:
    soak_s = SOAK_S
    namespace = f"sched-{uuid.uuid4().hex[:8]}"
    client = Client.from_url(tcp_server.url, namespace=namespace)
    for queue in QUEUES:
        client.admin.config_set(f"{queue}-heartbeat", 2)  # a killed master's leases come back soon
    client.set_domain_limit("slow.example", rate=5, period=1.0)
    client.scheduling.recur("c", f"{J}:noop", {}, every=1.0)
    masters = [_master(tcp_server, namespace, workdir, started) for _ in range(3)]
    seed = int(os.environ.get("SCHEDULING_SOAK_SEED", "0")) or random.randrange(1, 2**31)
    print(f"scheduling soak: SCHEDULING_SOAK_SEED={seed}")  # shown with a failure: run it again
    rng = random.Random(seed)
    path = workdir / "runs"
    stopped = threading.Event()
    journal: list[str] = []
    until = time.monotonic() + soak_s
    chaos = threading.Thread(
        target=_faults,
        args=(
            tcp_server,
            client,
            namespace,
            workdir,
            masters,
            started,
            rng,
            until,
            stopped,
            journal,
        ),
    )
    chaos.start()
    delayed: list[str] = []
    try:
        while time.monotonic() < until:
            queue = rng.choice(TIMED)
            q = client.queue(queue)
            if rng.random() < 0.3:
                q.put(f"{J}:noop", {}, domain="slow.example")
            first = q.put(f"{J}:record", {"path": str(path)})
            try:
                client.wait(first, timeout=30)
            except WaitTimeout:
                ran = first in path.read_text() if path.exists() else False
                raise AssertionError(
                    f"not complete after 30 s: {_describe(client, first)} ran={ran}"
                ) from None
            delayed.append(q.put(f"{J}:record", {"path": str(path)}, delay=DELAY_S))
            time.sleep(rng.uniform(0.0, 0.3))
    finally:
        stopped.set()
        chaos.join()
    try:
        wait_for(
            lambda: all(_state(client, jid) == "complete" for jid in delayed),
            60,
            what="every delayed job complete",
        )
    except AssertionError:  # say which, where they are and what happened to them
        stuck = [jid for jid in delayed if _state(client, jid) != "complete"]
        recorded = {
            ln.split()[0] for ln in (path.read_text() if path.exists() else "").splitlines()
        }
        raise AssertionError(
            "not complete after 60 s: "
            + "; ".join(f"{_describe(client, j)} ran={j in recorded}" for j in stuck)
        ) from None
    starts = {line.split()[0]: float(line.split()[2]) for line in path.read_text().splitlines()}
    late, early, disturbed = [], [], 0
    notes: list[str] = []  # for each late job: who popped it, the faults around it
    for jid in delayed:
        job = client.get_job(jid)
        assert job is not None
        if any(e.event in ("lease-lost", "released") for e in job.history):
            disturbed += 1  # its master was killed or stopped holding it
            continue
        due_s = job.history[0].at_ms / 1000 + DELAY_S
        start_s = starts[jid]
        if start_s < due_s - 0.001:  # due times are whole milliseconds
            early.append((jid, round(start_s - due_s, 3)))
        elif start_s > due_s + ON_TIME_S:
            [popped] = [e for e in job.history if e.event == "popped"]
            leased_s = (popped.starts_at_ms or popped.at_ms) / 1000 - due_s  # the pop's part
            late.append((jid, round(start_s - due_s, 3), round(leased_s, 3), popped.handed))
            faults = [f for f in journal if due_s - 5 <= float(f.split()[0]) <= start_s]
            notes.append(f"{jid} due {due_s:.3f} popped by {popped.worker}; faults: {faults}")
    assert early == [], "started before their due time"
    timed = len(delayed) - disturbed
    said = f"(of {len(delayed)}, {disturbed} disturbed): {late}\n" + "\n".join(notes)
    assert all(leased <= LATE_S for _, _, leased, _ in late), f"leased {LATE_S} s late {said}"
    assert len(late) <= timed * (1 - ON_TIME_SHARE), f"late by more than {ON_TIME_S} s {said}"
    assert disturbed < len(delayed) / 2


def _describe(client: Client, jid: str) -> str:
    """A job's state and its last events."""
    job = client.get_job(jid)
    if job is None:
        return f"{jid} gone"
    events = [(e.event, e.at_ms, e.worker, e.handed) for e in job.history][-6:]
    return f"{jid} {job.state} worker={job.worker} {events}"


def _state(client: Client, jid: str) -> str | None:
    job = client.get_job(jid)
    return None if job is None else job.state
