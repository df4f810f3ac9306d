"""A real master runs real jobs: outcomes, the allow-list, async jobs, the sandbox."""

from __future__ import annotations

import itertools
import json
import os
import pwd
import re
import signal
import socket
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest

from runtime import Client
from tests.integration.conftest import StartMaster
from tests.support.master import MasterProcess, alive, wait_gone
from tests.support.waiting import stays, wait_for

J = "tests.integration.jobs"


def state_of(client: Client, jid: str) -> str | None:
    job = client.get_job(jid)
    return None if job is None else job.state


def wait_state(client: Client, jid: str, state: str, timeout_s: float = 20) -> None:
    wait_for(lambda: state_of(client, jid) == state, timeout_s, what=f"{jid} to be {state}")


def test_jobs_complete_retry_and_fail(
    start_master: StartMaster, plain_client: Client, workdir: Path
) -> None:
    start_master("q", "-c", "2")
    q = plain_client.queue("q")
    path = str(workdir / "out")
    ok = q.put(f"{J}:record", {"path": path})
    again = q.put(f"{J}:retry_once", {"path": path})
    bad = q.put(f"{J}:fail", {"password": "hunter2"}, retries=1, backoff=(0.05, 0.05))
    wait_state(plain_client, ok, "complete")
    wait_state(plain_client, again, "complete")
    wait_state(plain_client, bad, "failed")
    job = plain_client.get_job(bad)
    assert job is not None and job.failure is not None
    assert job.failure.group == "builtins.ValueError"
    assert "Traceback (most recent call last)" in job.failure.message
    assert "failing on purpose" in job.failure.message
    assert [e.event for e in job.history] == ["put", "popped", "retried", "popped", "failed"]
    lines = Path(path).read_text().split("\n")
    assert any(line.startswith(f"{again} 2 done") for line in lines)


def test_a_klass_outside_the_modules_fails_without_being_imported(
    start_master: StartMaster, plain_client: Client, workdir: Path
) -> None:
    start_master("q", "-c", "1")
    marker = workdir / "imported"
    jid = plain_client.queue("q").put("tests.integration.evil:run", {"marker": str(marker)})
    wait_state(plain_client, jid, "failed")
    job = plain_client.get_job(jid)
    assert job is not None and job.failure is not None
    assert job.failure.group == "runtime.KlassNotAllowed"
    assert "klass not allowed" in job.failure.message
    assert job.remaining == job.retries, "not allowed fails at once, no retries"
    assert not marker.exists()
    assert not Path("/tmp/runtime-evil-imported").exists()


def test_async_jobs_run_on_uvloop(
    start_master: StartMaster, plain_client: Client, workdir: Path
) -> None:
    start_master("q", "-c", "1")
    path = workdir / "out"
    jid = plain_client.queue("q").put(f"{J}:async_job", {"path": str(path)})
    wait_state(plain_client, jid, "complete")
    assert path.read_text().split() == [jid, "uvloop"]


def test_children_fork_from_a_clean_point(
    start_master: StartMaster, plain_client: Client, workdir: Path
) -> None:
    master = start_master("q", "-c", "2")
    server = master.fork_server_pid()
    path = workdir / "proc.json"
    jid = plain_client.queue("q").put(f"{J}:describe_process", {"path": str(path)})
    wait_state(plain_client, jid, "complete")
    info = json.loads(path.read_text())
    assert info["ppid"] == server != master.pid, "forked by the fork server, not the master"
    assert info["parent_threads"] == 1, "the fork server has one thread"
    # more forks: a replacement for a crashed child, one more child, a new fork server
    crashed = plain_client.queue("q").put(f"{J}:crash", {"signal": 9}, retries=0)
    wait_state(plain_client, crashed, "failed")
    master.send(signal.SIGTTIN)
    wait_for(lambda: len(master.children()) == 3, 10)
    master.send(signal.SIGHUP)
    wait_for(lambda: len(forks(master)) >= 7, 20, what="three children from a new fork server")
    for parent, threads, loop in forks(master):
        assert parent != master.pid, "the master never forks a child"
        assert (threads, loop) == (1, "none"), "each fork: one thread, no event loop"
    assert len({parent for parent, _, _ in forks(master)}) == 2


def forks(master: MasterProcess) -> list[tuple[int, int, str]]:
    """(forking pid, its threads, its event loop) at each fork, from the master's log."""
    found = re.findall(r"child ready .* forked by pid=(\d+) threads=(\d+) loop=(\w+)", master.log())
    return [(int(pid), int(threads), loop) for pid, threads, loop in found]


def test_the_sandbox(start_master: StartMaster, plain_client: Client, workdir: Path) -> None:
    start_master(
        "q",
        "-c",
        "1",
        "--open-files",
        "64",
        env={"SENTRY_DSN": "http://k@127.0.0.1:9/1", "DB_PASSWORD": "x", "KEEP_ME": "yes"},
    )
    q = plain_client.queue("q")
    first, second = workdir / "one.json", workdir / "two.json"
    jids = [q.put(f"{J}:describe_process", {"path": str(p)}) for p in (first, second)]
    for jid in jids:
        wait_state(plain_client, jid, "complete")
    info = json.loads(first.read_text())
    env = info["env"]
    assert "REDIS_URL" not in env and "SENTRY_DSN" not in env and "DB_PASSWORD" not in env
    assert env["KEEP_ME"] == "yes"
    assert info["cwd"] == info["sandbox"]
    assert info["no_new_privs"] == "1"
    assert info["nofile"] == 64
    fds = info["fds"]
    assert fds.pop("0") == "/dev/null"
    assert fds.pop("1").startswith("pipe:") and fds.pop("2").startswith("pipe:")
    # the master's socket, the eventfd the child's threads take it over with, and
    # the child's own clear_refs (its peak memory reset before each job: close-on-exec)
    assert any(re.fullmatch(r"/proc/\d+/clear_refs", link) for link in fds.values()), fds
    links = sorted(link.split(":")[0] for link in fds.values() if "clear_refs" not in link)
    assert links == ["anon_inode", "socket"], info["fds"]
    assert json.loads(second.read_text())["sandbox_files"] == ["made-by-the-job.txt"]
    assert info["sandbox_files"] == ["made-by-the-job.txt"]


def test_daemons_a_job_spawns_are_killed_after_it(
    start_master: StartMaster, plain_client: Client, workdir: Path
) -> None:
    start_master("q", "-c", "1")
    path = workdir / "pid"
    jid = plain_client.queue("q").put(f"{J}:spawn_daemon", {"path": str(path)})
    wait_state(plain_client, jid, "complete")
    daemon = int(path.read_text())
    wait_gone(daemon, 5)
    assert not alive(daemon)


def test_a_daemon_whose_parent_dies_slowly_is_killed_after_the_job(
    start_master: StartMaster, plain_client: Client, workdir: Path
) -> None:
    """The daemon is the child's to kill only once its parent is dead, which takes a
    while here: killing must wait for the dead, not give up after a few rounds."""
    start_master("q", "-c", "1")
    path = workdir / "pid"
    jid = plain_client.queue("q").put(f"{J}:spawn_daemon_behind_a_slow_death", {"path": str(path)})
    wait_state(plain_client, jid, "complete", timeout_s=30)
    daemon = int(path.read_text())
    wait_gone(daemon, 5)
    assert not alive(daemon)


@pytest.mark.skipif(os.geteuid() != 0, reason="switching users needs root")
def test_children_run_as_the_given_user(
    start_master: StartMaster, plain_client: Client, workdir: Path
) -> None:
    nobody = pwd.getpwnam("nobody")
    workdir.chmod(0o777)
    start_master("q", "-c", "1", "--user", "nobody")
    path = workdir / "proc.json"
    jid = plain_client.queue("q").put(f"{J}:describe_process", {"path": str(path)})
    wait_state(plain_client, jid, "complete")
    info = json.loads(path.read_text())
    assert (info["uid"], info["gid"]) == (nobody.pw_uid, nobody.pw_gid)


def test_children_are_recycled_after_max_jobs(
    start_master: StartMaster, plain_client: Client, workdir: Path
) -> None:
    start_master("q", "-c", "1", "--max-jobs-per-child", "2")
    path = workdir / "runs"
    jids = plain_client.put_many(
        plain_client.queue("q").spec(f"{J}:record", {"path": str(path)}) for _ in range(6)
    )
    for jid in jids:
        wait_state(plain_client, jid, "complete")
    pids = [line.split()[4] for line in path.read_text().splitlines()]
    assert len(pids) == 6 and len(set(pids)) == 3
    assert pids[0] == pids[1] != pids[2] == pids[3] != pids[4] == pids[5]


def test_children_are_recycled_above_max_memory(
    start_master: StartMaster, plain_client: Client, workdir: Path
) -> None:
    start_master("q", "-c", "1", "--max-memory-per-child", "60")
    path = workdir / "runs"
    q = plain_client.queue("q")
    big = q.put(f"{J}:grow_and_record", {"path": str(path), "mib": 120})
    small = q.put(f"{J}:record", {"path": str(path)})
    for jid in (big, small):
        wait_state(plain_client, jid, "complete")
    pids = [line.split()[4] for line in path.read_text().splitlines()]
    assert len(set(pids)) == 2, "the child that grew past the limit was replaced"


def test_the_address_space_limit_gives_a_memory_error(
    start_master: StartMaster, plain_client: Client
) -> None:
    start_master("q", "-c", "1", "--address-space", "400")
    jid = plain_client.queue("q").put(f"{J}:hog_memory", {"mib": 800}, retries=0)
    wait_state(plain_client, jid, "failed")
    job = plain_client.get_job(jid)
    assert job is not None and job.failure is not None
    assert job.failure.group == "builtins.MemoryError"


def test_process_titles_tell_what_each_process_does(
    start_master: StartMaster, plain_client: Client, workdir: Path
) -> None:
    master = start_master("q", "-c", "1")

    def title(pid: int) -> str:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()

    wait_for(lambda: "queues=q children=1/1 busy=0" in title(master.pid), 10)
    assert title(master.pid).startswith("runtime master ")
    [child] = master.children()
    assert title(child) == "runtime child 0: idle"
    jid = plain_client.queue("q").put(f"{J}:sleep", {"seconds": 1})
    wait_for(lambda: f"jid={jid}" in title(child), 10)
    wait_for(lambda: "busy=1" in title(master.pid), 1)  # described every 50 ms at most


def test_a_queue_over_its_size_warning_is_warned_about_once_per_interval(
    start_master: StartMaster, plain_client: Client
) -> None:
    plain_client.admin.config_set("q-size-warning", 2)
    plain_client.admin.config_set("size-warning-every", 1)
    q = plain_client.queue("q")
    for _ in range(3):
        q.put(f"{J}:noop", {}, delay=3600)  # scheduled jobs count, and never run here
    master = start_master("q", "-c", "1")

    def warnings() -> list[str]:
        return [line for line in master.log().splitlines() if "over its size warning" in line]

    wait_for(lambda: len(warnings()) >= 4, 20, what="four size warnings")
    assert "3 jobs > 2 queue=q" in warnings()[0]
    times = [datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f") for line in warnings()]
    gaps = [(later - earlier).total_seconds() for earlier, later in itertools.pairwise(times)]
    assert all(0.99 <= gap < 2 for gap in gaps), f"one warning per second: {gaps}"


def test_runtime_workers_lists_a_live_master_and_its_jobs(
    start_master: StartMaster, plain_client: Client, workdir: Path
) -> None:
    master = start_master("q", "-c", "1", "--grace", "0")
    path = workdir / "alive"
    jid = plain_client.queue("q").put(f"{J}:alive", {"seconds": 30, "path": str(path)})
    wait_for(path.exists, 10)
    env = {**os.environ, "REDIS_URL": master.url, "RUNTIME_NAMESPACE": master.namespace}
    listed = subprocess.run(
        [sys.executable, "-m", "runtime", "workers", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert listed.returncode == 0, listed.stderr
    [(name, info)] = json.loads(listed.stdout).items()
    assert name == f"{socket.gethostname()}-{master.pid}"
    assert info["jobs"] == [jid]
    master.send(signal.SIGTERM)
    assert master.wait(10) == 0
    assert plain_client.admin.workers() == {}, "a master that exits is forgotten"


def test_an_idle_master_only_blocks_waiting_for_work(
    start_master: StartMaster, plain_client: Client
) -> None:
    start_master("q", "-c", "1")
    conn = plain_client.redis

    def blocked() -> bool:
        return any(c.get("cmd") == "blpop" for c in conn.client_list())

    wait_for(blocked, 10, what="the master to block on its queues")
    conn.config_resetstat()
    # an absence: what a polling master would send within three seconds
    stays(blocked, 3.0, interval_s=0.5, what="the master blocked")
    ours = ("info", "config", "client")
    sent = {
        name.removeprefix("cmdstat_"): v["calls"] for name, v in conn.info("commandstats").items()
    }
    # the cancels connection's keepalive: at most one PING in half a minute
    assert sent.pop("ping", 0) <= 1
    # the size watch's first read of its setting (it starts once the master is
    # ready, and may come after the master blocks), on a connection made for it
    assert sent.pop("hget", 0) <= 1 and sent.pop("hello", 0) <= 1
    assert {name: n for name, n in sent.items() if not name.startswith(ours)} == {}
