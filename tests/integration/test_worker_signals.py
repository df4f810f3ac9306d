"""Signals to a real master (Resque's set), and systemd's notify protocol."""

from __future__ import annotations

import re
import signal
import time
from pathlib import Path

from runtime import Client
from tests.integration.conftest import StartMaster
from tests.integration.test_worker_basics import wait_state
from tests.support.master import MasterProcess, wait_gone
from tests.support.waiting import idle, stays, wait_for

J = "tests.integration.jobs"


def running(client: Client, queue: str = "q") -> int:
    return int(client.status(queue)[queue]["running"])


def wait_started(path: Path, n: int) -> None:
    """Waits until n `nap` jobs started in a child ("running" in Redis may be a job
    handed to the master and not yet in a child)."""

    def count() -> int:
        return path.read_text().count(" start") if path.exists() else 0

    wait_for(lambda: count() >= n, 10, what=f"{n} jobs to start")


def test_term_gives_back_jobs_longer_than_the_grace_and_exits_on_time(
    start_master: StartMaster, plain_client: Client, workdir: Path
) -> None:
    master = start_master("q", "-c", "2", "--grace", "1")
    q = plain_client.queue("q")
    path = workdir / "naps"
    jids = [q.put(f"{J}:nap", {"seconds": 30, "path": str(path)}) for _ in range(2)]
    wait_started(path, 2)
    started = time.monotonic()
    master.send(signal.SIGTERM)
    assert master.wait(10) == 0
    assert time.monotonic() - started < 1 + 2
    for jid in jids:
        job = plain_client.get_job(jid)
        assert job is not None and job.state == "waiting"
        assert job.remaining == job.retries and job.history[-1].event == "released"
    assert running(plain_client) == 0 and plain_client.status("q")["q"]["stalled"] == 0
    master.wait_notified("STOPPING=1")
    assert plain_client.admin.workers() == {}


def test_term_lets_short_jobs_finish(
    start_master: StartMaster, plain_client: Client, workdir: Path
) -> None:
    master = start_master("q", "-c", "1", "--grace", "10")
    path = workdir / "naps"
    jid = plain_client.queue("q").put(f"{J}:nap", {"seconds": 0.5, "path": str(path)})
    wait_started(path, 1)
    master.send(signal.SIGINT)
    assert master.wait(10) == 0
    assert plain_client.get_job(jid).state == "complete"  # type: ignore[union-attr]


def test_quit_finishes_running_jobs_then_exits(
    start_master: StartMaster, plain_client: Client, workdir: Path
) -> None:
    master = start_master("q", "-c", "1", "--grace", "0")
    q = plain_client.queue("q")
    path = workdir / "naps"
    jid = q.put(f"{J}:nap", {"seconds": 1.5, "path": str(path)})
    wait_started(path, 1)
    later = q.put(f"{J}:noop", {})
    master.send(signal.SIGQUIT)
    assert master.wait(10) == 0
    assert plain_client.get_job(jid).state == "complete"  # type: ignore[union-attr]
    assert plain_client.get_job(later).state == "waiting", "no new job after QUIT"  # type: ignore[union-attr]


def test_usr1_kills_running_jobs_and_they_are_retried(
    start_master: StartMaster, plain_client: Client, workdir: Path
) -> None:
    master = start_master("q", "-c", "1")
    path = workdir / "naps"
    jid = plain_client.queue("q").put(
        f"{J}:nap", {"seconds": 30, "path": str(path)}, backoff=(60, 60)
    )
    wait_started(path, 1)
    master.send(signal.SIGUSR1)
    wait_state(plain_client, jid, "scheduled")
    job = plain_client.get_job(jid)
    assert job is not None and job.failure is not None
    assert job.failure.group == "runtime.Killed"
    assert job.failure.message.startswith("killed by signal 9 (SIGUSR1 to the master)")
    assert job.remaining == job.retries - 1
    assert master.proc is not None and master.proc.poll() is None


def test_usr2_pauses_leasing_and_cont_resumes(
    start_master: StartMaster, plain_client: Client
) -> None:
    master = start_master("q", "-c", "1")
    master.send(signal.SIGUSR2)
    master.wait_notified("paused")
    jid = plain_client.queue("q").put(f"{J}:noop", {})
    # an absence: a master that leases takes a new job within milliseconds
    stays(lambda: plain_client.get_job(jid).state == "waiting", 0.5, what="not leased")  # type: ignore[union-attr]
    master.send(signal.SIGCONT)
    wait_state(plain_client, jid, "complete")


def test_ttin_and_ttou_change_the_number_of_children(start_master: StartMaster) -> None:
    master = start_master("q", "-c", "1")
    wait_for(lambda: len(master.children()) == 1, 10)
    master.send(signal.SIGTTIN)
    wait_for(lambda: len(master.children()) == 2, 10)
    master.send(signal.SIGTTOU)  # signals of one kind sent at once may merge: one at a time
    wait_for(lambda: len(master.children()) == 1, 10)
    master.send(signal.SIGTTOU)
    wait_for(lambda: len(master.children()) == 0, 10)
    master.send(signal.SIGTTIN)
    wait_for(lambda: len(master.children()) == 1, 10)


def test_hup_replaces_every_child_under_load_losing_and_doubling_nothing(
    start_master: StartMaster, plain_client: Client, workdir: Path
) -> None:
    master = start_master("q", "-c", "2")
    first_server = master.fork_server_pid()
    first_children = set(master.children())
    path = workdir / "runs"
    q = plain_client.queue("q")
    jids = plain_client.put_many(
        q.spec(f"{J}:record", {"path": str(path), "seconds": 0.005}) for _ in range(300)
    )
    wait_for(lambda: running(plain_client) > 0, 10, what="the load to start")
    for hups in range(1, 4):  # one HUP at a time: signals of one kind sent at once may merge
        master.send(signal.SIGHUP)

        def replaced(servers: int = hups + 1) -> bool:
            return len(fork_servers(master)) == servers

        wait_for(replaced, 20, what="a child from a new fork server")
    wait_for(lambda: idle(plain_client.status("q")["q"]), 60)  # one read of both
    ran = [line.split()[0] for line in path.read_text().splitlines()]
    assert sorted(ran) == sorted(jids), "each job ran exactly once"
    assert all(plain_client.get_job(j).state == "complete" for j in jids[:20])  # type: ignore[union-attr]
    wait_for(lambda: master.fork_server_pid() not in (None, first_server), 10)
    assert not first_children & set(master.children())


def fork_servers(master: MasterProcess) -> set[str]:
    """The fork servers that have forked a child that came up, from the master's log."""
    return set(re.findall(r"child ready .* forked by pid=(\d+)", master.log()))


def test_a_killed_master_takes_its_children_with_it(start_master: StartMaster) -> None:
    master = start_master("q", "-c", "2")
    children = master.children()
    server = master.fork_server_pid()
    assert len(children) == 2 and server is not None
    master.kill()
    for pid in [*children, server]:
        wait_gone(pid, 5)


def test_systemd_status_and_watchdog(start_master: StartMaster) -> None:
    master = start_master("q", "-c", "1", env={"WATCHDOG_USEC": "400000"})
    master.wait_notified("READY=1")
    master.wait_notified("STATUS=queues=q children=1/1 busy=0")
    count = sum("WATCHDOG=1" in m for m in master.notifications())
    wait_for(lambda: sum("WATCHDOG=1" in m for m in master.notifications()) >= count + 2, 5)
    master.send(signal.SIGTERM)
    assert master.wait(10) == 0
    master.wait_notified("STOPPING=1")
