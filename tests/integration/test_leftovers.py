"""No leftovers: whatever a job started (a grandchild in its child's process
group, a double-forked setsid daemon) is gone within seconds of its child's end,
however the child ended: killed from outside, by the master for its memory
limit, its timeout or USR1, by its own crash or exit, or with its master."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from runtime import Client
from tests.integration.conftest import StartMaster
from tests.integration.test_worker_basics import wait_state
from tests.support.master import MasterProcess, alive, wait_gone
from tests.support.waiting import wait_for

H = "tests.integration.hostile_jobs"
MODULES = ("tests.integration.jobs", H)
GONE_WITHIN_S = 5.0


def pids_in(path: Path) -> dict[str, int]:
    """The pids the job wrote (child, grandchild, daemon), once it has."""
    text = wait_for(lambda: path.read_text() if path.exists() else "", 15, what=str(path))
    pids: dict[str, int] = json.loads(text)
    return pids


def started(client: Client, workdir: Path, **data: object) -> tuple[str, dict[str, int]]:
    """Puts a job that leaves processes behind; returns its jid and their pids,
    once they run."""
    path = workdir / "pids.json"
    jid = client.queue("q").put(f"{H}:leave_processes", {"path": str(path), **data}, retries=0)
    pids = pids_in(path)
    assert alive(pids["grandchild"]) and alive(pids["daemon"]), "the job's processes run"
    return jid, pids


def assert_gone(pids: dict[str, int]) -> None:
    for name in ("child", "grandchild", "daemon"):
        wait_gone(pids[name], GONE_WITHIN_S)


def go(workdir: Path) -> dict[str, str]:
    return {"go": str(workdir / "go")}


def test_a_child_killed_from_outside_leaves_nothing_behind(
    start_master: StartMaster, plain_client: Client, workdir: Path
) -> None:
    master = start_master("q", "-c", "1", modules=MODULES)
    _, pids = started(plain_client, workdir)
    os.kill(pids["child"], signal.SIGKILL)
    assert_gone(pids)
    wait_for(lambda: len(master.children()) == 1, 10, what="a new child")


@pytest.mark.parametrize(
    ("then", "group"),
    [("exit", "runtime.ChildCrashed"), ("segfault", "runtime.ChildCrashed")],
)
def test_a_child_that_dies_by_itself_leaves_nothing_behind(
    start_master: StartMaster, plain_client: Client, workdir: Path, then: str, group: str
) -> None:
    start_master("q", "-c", "1", modules=MODULES)
    jid, pids = started(plain_client, workdir, then=then, **go(workdir))
    (workdir / "go").touch()
    wait_state(plain_client, jid, "failed")
    assert_failed(plain_client, jid, group)
    assert_gone(pids)


def test_the_memory_limit_kill_leaves_nothing_behind(
    start_master: StartMaster, plain_client: Client, workdir: Path
) -> None:
    start_master("q", "-c", "1", "--memory-limit", "100", modules=MODULES)
    jid, pids = started(plain_client, workdir, then="hog", mib=300, **go(workdir))
    (workdir / "go").touch()
    wait_state(plain_client, jid, "failed")
    assert_failed(plain_client, jid, "runtime.MemoryLimit")
    assert_gone(pids)


def test_a_timed_out_job_killed_after_ignoring_sigterm_leaves_nothing_behind(
    start_master: StartMaster, plain_client: Client, workdir: Path
) -> None:
    start_master("q", "-c", "1", "--kill-grace", "0.5", modules=MODULES)
    path = workdir / "pids.json"
    jid = plain_client.queue("q").put(
        f"{H}:leave_processes", {"path": str(path), "then": "ignore_term"}, retries=0, timeout=3
    )
    pids = pids_in(path)
    assert alive(pids["daemon"])
    wait_state(plain_client, jid, "failed", 30)
    assert_failed(plain_client, jid, "runtime.Timeout")
    assert_gone(pids)


def test_usr1_to_the_master_leaves_nothing_behind(
    start_master: StartMaster, plain_client: Client, workdir: Path
) -> None:
    master = start_master("q", "-c", "1", modules=MODULES)
    jid, pids = started(plain_client, workdir)
    master.send(signal.SIGUSR1)
    wait_state(plain_client, jid, "failed")
    assert_gone(pids)


def test_a_job_that_returns_leaves_nothing_behind(
    start_master: StartMaster, plain_client: Client, workdir: Path
) -> None:
    start_master("q", "-c", "1", modules=MODULES)
    jid, pids = started(plain_client, workdir, then="return", **go(workdir))
    (workdir / "go").touch()
    wait_state(plain_client, jid, "complete")
    for name in ("grandchild", "daemon"):
        wait_gone(pids[name], GONE_WITHIN_S)
    assert alive(pids["child"]), "the child itself lives on"


@pytest.mark.parametrize(
    "stop",
    [
        pytest.param(lambda m: m.send(signal.SIGTERM), id="TERM"),
        pytest.param(lambda m: os.kill(m.pid, signal.SIGKILL), id="KILL"),
    ],
)
def test_a_master_that_ends_leaves_nothing_behind(
    start_master: StartMaster,
    plain_client: Client,
    workdir: Path,
    stop: Callable[[MasterProcess], None],
) -> None:
    master = start_master("q", "-c", "1", "--grace", "0", modules=MODULES)
    server = master.fork_server_pid()
    assert server is not None
    _, pids = started(plain_client, workdir)
    stop(master)
    assert_gone(pids)
    wait_gone(server, GONE_WITHIN_S)


def assert_failed(client: Client, jid: str, group: str) -> None:
    job = client.get_job(jid)
    assert job is not None and job.failure is not None
    assert job.failure.group == group, job.failure.message
