"""Children under another identity (root only): a group alone, a process limit
that holds for an unprivileged user, and a parent-death signal that survives
the switch of user."""

from __future__ import annotations

import grp
import json
import os
import pwd
import signal
from pathlib import Path

import pytest

from runtime import Client
from tests.integration.conftest import StartMaster
from tests.integration.test_worker_basics import wait_state
from tests.support.master import wait_gone
from tests.support.waiting import wait_for

J = "tests.integration.jobs"
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="switching identity needs root")


def nobody_group() -> grp.struct_group:
    return grp.getgrgid(pwd.getpwnam("nobody").pw_gid)


def test_a_group_alone_changes_the_gid_and_drops_supplementary_groups(
    start_master: StartMaster, plain_client: Client, workdir: Path
) -> None:
    group = nobody_group()
    start_master("q", "-c", "1", "--group", group.gr_name)
    path = workdir / "proc.json"
    jid = plain_client.queue("q").put(f"{J}:describe_process", {"path": str(path)})
    wait_state(plain_client, jid, "complete")
    info = json.loads(path.read_text())
    assert (info["uid"], info["gid"], info["groups"]) == (os.getuid(), group.gr_gid, [])


def test_max_processes_limits_an_unprivileged_child(
    start_master: StartMaster, plain_client: Client, workdir: Path
) -> None:
    workdir.chmod(0o777)
    # a child is two tasks of its user (RLIMIT_NPROC counts threads): itself, its reader
    start_master("q", "-c", "1", "--user", "nobody", "--max-processes", "2")
    q = plain_client.queue("q")
    described, forked = workdir / "proc.json", workdir / "fork"
    jids = [
        q.put(f"{J}:describe_process", {"path": str(described)}),
        q.put(f"{J}:try_fork", {"path": str(forked)}),
    ]
    for jid in jids:
        wait_state(plain_client, jid, "complete")
    assert json.loads(described.read_text())["nproc"] == 2
    assert forked.read_text().split() == ["BlockingIOError"], "no process beyond the limit"


def test_children_of_another_user_die_with_their_killed_master(
    start_master: StartMaster, workdir: Path
) -> None:
    workdir.chmod(0o777)
    master = start_master("q", "-c", "2", "--user", "nobody")
    wait_for(lambda: len(master.children()) == 2, 10)
    children, server = master.children(), master.fork_server_pid()
    assert server is not None
    nobody = pwd.getpwnam("nobody").pw_uid
    assert all(os.stat(f"/proc/{pid}").st_uid == nobody for pid in children)
    os.kill(master.pid, signal.SIGKILL)
    for pid in [server, *children]:
        wait_gone(pid, 5)
