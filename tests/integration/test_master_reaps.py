"""A master reaps every process it starts: after reloads (HUP), after its fork
server is killed, after TTIN/TTOU, its children are exactly its live ones (one
fork server) and the fork server's are exactly the live job children; no
zombie is left behind at any level."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from runtime import Client
from tests.integration.conftest import StartMaster
from tests.integration.test_worker_basics import wait_state
from tests.support.master import MasterProcess, alive
from tests.support.waiting import wait_for

J = "tests.integration.jobs"


def children_of(parent: int) -> dict[int, str]:
    """Every child of `parent`, zombies included: pid -> its state letter (Z: zombie)."""
    found = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_bytes()
            except OSError:
                continue
            fields = stat[stat.rfind(b")") + 2 :].split()
            if int(fields[1]) == parent:
                found[int(entry)] = fields[0].decode()
    return found


def only_live_children(master: MasterProcess, jobs: int) -> int | None:
    """The master's one fork server when the master has no other child (no zombie)
    and the fork server has exactly `jobs` children, all alive; else None."""
    kids = children_of(master.pid)
    if len(kids) != 1:
        return None
    [(server, state)] = kids.items()
    grandchildren = children_of(server)
    if state == "Z" or len(grandchildren) != jobs or "Z" in grandchildren.values():
        return None
    return server


def settled(master: MasterProcess, jobs: int, *, after: str, not_server: int | None = None) -> int:
    """Waits until the master's children are exactly its live ones (see above)."""

    def probe() -> int | None:
        server = only_live_children(master, jobs)
        return None if server == not_server else server

    try:
        server = wait_for(probe, 20, what=f"only live children {after}")
    except AssertionError:
        raise AssertionError(
            f"{after}: the master's children are {children_of(master.pid)}"
        ) from None
    assert server is not None
    return server


def test_reloads_leave_no_zombie(start_master: StartMaster, plain_client: Client) -> None:
    master = start_master("q", "-c", "2")
    server = settled(master, 2, after="start")
    for hups in range(1, 4):  # one at a time: signals of one kind sent at once may merge
        master.send(signal.SIGHUP)
        server = settled(master, 2, after=f"HUP {hups}", not_server=server)
    jid = plain_client.queue("q").put(f"{J}:noop", {})
    wait_state(plain_client, jid, "complete")


def test_a_killed_fork_server_is_reaped_and_replaced(
    start_master: StartMaster, plain_client: Client
) -> None:
    master = start_master("q", "-c", "2")
    server = settled(master, 2, after="start")
    os.kill(server, signal.SIGKILL)
    new = settled(master, 2, after="the fork server was killed", not_server=server)
    assert alive(new) and not alive(server)
    assert "fork server" in master.log() and "killed by signal 9" in master.log()
    jid = plain_client.queue("q").put(f"{J}:noop", {})
    wait_state(plain_client, jid, "complete")


def test_ttin_and_ttou_leave_no_zombie(start_master: StartMaster) -> None:
    master = start_master("q", "-c", "1")
    server = settled(master, 1, after="start")
    for sig, jobs in [
        (signal.SIGTTIN, 2),
        (signal.SIGTTIN, 3),
        (signal.SIGTTOU, 2),
        (signal.SIGTTOU, 1),
        (signal.SIGTTOU, 0),
        (signal.SIGTTIN, 1),
    ]:
        master.send(sig)
        assert settled(master, jobs, after=f"{sig.name} to {jobs}") == server
    master.send(signal.SIGHUP)
    settled(master, 1, after="HUP after TTIN/TTOU", not_server=server)
