"""What a job cannot do, with real masters: name something its module only
imported or an attribute of it, lift its CPU limit, or make the OOM killer pick
the master before it."""

from __future__ import annotations

import json
import os
import pwd
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from runtime import Client
from runtime.sandbox.prctl import CAP_SYS_RESOURCE
from tests.integration.conftest import StartMaster
from tests.integration.test_worker_basics import wait_state
from tests.support.master import REPO
from tests.support.waiting import wait_for

J = "tests.integration.jobs"
H = "tests.integration.hostile_jobs"
MODULES = (J, H)


def failure(client: Client, jid: str) -> tuple[str, str]:
    wait_state(client, jid, "failed", 30)
    job = client.get_job(jid)
    assert job is not None and job.failure is not None
    return job.failure.group, job.failure.message


@pytest.mark.parametrize(
    "klass",
    [f"{J}:os.system", f"{J}:os.getcwd", f"{H}:rmtree", f"{H}:json.dumps", f"{J}.os:system"],
)
def test_a_klass_reaching_past_the_module_s_own_callables_fails_at_once(
    start_master: StartMaster, plain_client: Client, klass: str
) -> None:
    start_master("q", "-c", "1", modules=MODULES)
    # a module path that does not exist is merely not found, which is retried (a
    # deployment may lag): no retries, or waiting for the last one takes ~20 s
    not_found = ".os:" in klass
    jid = plain_client.queue("q").put(
        klass, {"path": "/tmp/nothing"}, retries=0 if not_found else 5
    )
    group, message = failure(plain_client, jid)
    assert group in ("runtime.KlassNotAllowed", "runtime.KlassNotFound"), message
    if not not_found:
        assert group == "runtime.KlassNotAllowed" and "klass not allowed" in message
        job = plain_client.get_job(jid)
        assert job is not None and job.remaining == job.retries, "failed at once, no retry"


def test_a_klass_not_found_is_retried_and_its_history_names_the_host(
    start_master: StartMaster, plain_client: Client
) -> None:
    """A job whose callable is missing on this host (a rolling deploy that has not
    reached it yet) is retried, and each attempt's history says where it failed."""
    start_master("q", "-c", "1", modules=MODULES)
    jid = plain_client.queue("q").put(f"{J}:added_in_the_next_release", {}, retries=1)
    group, message = failure(plain_client, jid)
    said = f"not importable on host {socket.gethostname()}: klass not found: {J}:"
    assert group == "runtime.KlassNotFound" and message.splitlines()[-1].startswith(said)
    job = plain_client.get_job(jid)
    assert job is not None
    ended = [(e.event, (e.note or "")[: len(said)]) for e in job.history if e.group]
    assert ended == [("retried", said), ("failed", said)], job.history


def test_an_import_error_in_a_job_module_names_its_file_and_line(
    start_master: StartMaster, plain_client: Client, workdir: Path
) -> None:
    package = workdir / "brokenjobs"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "tasks.py").write_text("import os\n\n\nvalue = not_defined_here\n")
    start_master(
        "q",
        "-c",
        "1",
        "brokenjobs.__init__",
        modules=(J, "brokenjobs"),
        env={"PYTHONPATH": str(workdir)},
    )
    jid = plain_client.queue("q").put("brokenjobs.tasks:run", {}, retries=0)
    group, message = failure(plain_client, jid)
    assert group == "runtime.KlassNotFound"
    assert (
        f"NameError: name 'not_defined_here' is not defined ({package}/tasks.py, line 4)"
        in (message.splitlines()[-1])
    )


def cpu_limit_case(start_master: StartMaster, client: Client, workdir: Path, *args: str) -> None:
    workdir.chmod(0o777)
    start_master("q", "-c", "1", "--cpu-limit", "1", *args, modules=MODULES)
    path = workdir / "cpu.json"
    jid = client.queue("q").put(f"{H}:lift_cpu_limit", {"path": str(path)}, retries=0)
    group, message = failure(client, jid)
    seen = json.loads(path.read_text())
    assert seen["hard"] == seen["soft"] + 1, "SIGKILL one second after SIGXCPU"
    assert seen["soft"] - seen["used"] >= 1, "at least the limit"
    assert (seen["to_unlimited"], seen["hard_up"]) == ("ValueError", "ValueError")
    assert seen["soft_to_hard"] == "raised" and seen["now"] == [seen["hard"], seen["hard"]]
    assert (group, message.splitlines()[0]) == (
        "runtime.CPULimit",
        "killed by signal 24 (CPU limit 1 s)",
    )


def test_a_job_cannot_lift_its_cpu_limit(
    start_master: StartMaster, plain_client: Client, workdir: Path
) -> None:
    cpu_limit_case(start_master, plain_client, workdir)


@pytest.mark.slow  # by default: the same case above, the child as the master's user
@pytest.mark.skipif(os.geteuid() != 0, reason="switching users needs root")
def test_a_job_of_another_user_cannot_lift_its_cpu_limit(
    start_master: StartMaster, plain_client: Client, workdir: Path
) -> None:
    cpu_limit_case(start_master, plain_client, workdir, "--user", "nobody")


def test_every_job_under_a_cpu_limit_gets_a_fresh_child_and_budget(
    start_master: StartMaster, plain_client: Client, workdir: Path
) -> None:
    start_master("q", "-c", "1", "--cpu-limit", "2", "--max-jobs-per-child", "50", modules=MODULES)
    path = workdir / "limits"
    q = plain_client.queue("q")
    for jid in [q.put(f"{H}:cpu_limits", {"path": str(path)}) for _ in range(3)]:
        wait_state(plain_client, jid, "complete")
    rows = [line.split() for line in path.read_text().splitlines()]
    assert len({pid for pid, _, _ in rows}) == 3, "one child per job"
    assert all(int(hard) == int(soft) + 1 and int(soft) >= 2 for _, soft, hard in rows)


def oom_score_adj(pid: int) -> int:
    return int(Path(f"/proc/{pid}/oom_score_adj").read_text())


def test_children_are_the_oom_killer_s_choice_before_their_master(
    start_master: StartMaster, plain_client: Client, workdir: Path
) -> None:
    master = start_master("q", "-c", "1", modules=MODULES)
    [child] = wait_for(master.children, 10)
    base = oom_score_adj(master.pid)
    # a child sets its own score right after the fork: it may be listed before that
    wait_for(lambda: oom_score_adj(child) == min(1000, base + 500), 5, what="the child's score")
    assert oom_score_adj(child) == min(1000, base + 500) > base
    server = master.fork_server_pid()
    assert server is not None and oom_score_adj(server) == base
    Path(f"/proc/{master.pid}/oom_score_adj").write_text("300")
    os.kill(child, 9)
    [fresh] = wait_for(lambda: [c for c in master.children() if c != child], 10)
    wait_for(lambda: oom_score_adj(fresh) == 800, 5, what="above the master's score as it is now")
    path = workdir / "oom"
    jid = plain_client.queue("q").put(f"{H}:oom_score", {"path": str(path)})
    wait_state(plain_client, jid, "complete")
    assert path.read_text() == "800", "the job runs with it"


@pytest.mark.skipif(os.geteuid() != 0, reason="switching users needs root")
def test_children_of_another_user_have_the_raised_oom_score_too(
    start_master: StartMaster, plain_client: Client, workdir: Path
) -> None:
    workdir.chmod(0o777)
    master = start_master("q", "-c", "1", "--user", "nobody", modules=MODULES)
    [child] = wait_for(master.children, 10)
    assert os.stat(f"/proc/{child}").st_uid == pwd.getpwnam("nobody").pw_uid
    assert oom_score_adj(child) == min(1000, oom_score_adj(master.pid) + 500)


def capability_bits(pid: int | str) -> dict[str, int]:
    status = Path(f"/proc/{pid}/status").read_text().splitlines()
    return {
        k: int(v, 16) for k, v in (line.split(":\t") for line in status if line.startswith("Cap"))
    }


def test_children_hold_no_right_to_raise_a_hard_limit(
    start_master: StartMaster, plain_client: Client
) -> None:
    master = start_master("q", "-c", "1", modules=MODULES)
    [child] = wait_for(master.children, 10)
    bits = capability_bits(child)
    for name in ("CapEff", "CapPrm", "CapInh", "CapAmb"):
        assert not bits[name] >> CAP_SYS_RESOURCE & 1, name


def test_dropping_a_capability_removes_it_from_every_set() -> None:
    # CAP_SYS_NICE, which root holds in more places than CAP_SYS_RESOURCE
    script = (
        "from runtime.sandbox.prctl import drop_capability\n"
        "import json, pathlib\n"
        "drop_capability(23)\n"
        "status = pathlib.Path('/proc/self/status').read_text().splitlines()\n"
        "print(json.dumps({l.split(':')[0]: int(l.split()[1], 16) for l in status"
        " if l.startswith('Cap')}))\n"
    )
    before = capability_bits("self")
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, cwd=REPO
    )
    after = json.loads(done.stdout)
    for name in ("CapEff", "CapPrm", "CapInh"):
        assert not after[name] >> 23 & 1, name
    if before["CapEff"] >> 8 & 1:  # CAP_SETPCAP: the bounding set may be lowered too
        assert not after["CapBnd"] >> 23 & 1
    others = ~(1 << 23)
    assert after["CapEff"] & others == before["CapEff"] & others, "nothing else dropped"
