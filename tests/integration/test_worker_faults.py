"""Children that crash, exceed limits, time out or talk garbage: each job is
retried or failed with a readable reason, never lost; the master survives."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from runtime import Client
from runtime.master import output
from tests.integration.conftest import StartMaster
from tests.integration.test_worker_basics import wait_state
from tests.support.master import MasterProcess
from tests.support.waiting import wait_for

J = "tests.integration.jobs"


def final_failure(client: Client, jid: str) -> tuple[str, str]:
    wait_state(client, jid, "failed", 30)
    job = client.get_job(jid)
    assert job is not None and job.failure is not None
    return job.failure.group, job.failure.message


def still_serving(master: MasterProcess, client: Client, workdir: Path) -> None:
    """The master is alive and runs the next job."""
    assert master.proc is not None and master.proc.poll() is None
    jid = client.queue("q").put(f"{J}:record", {"path": str(workdir / "after")})
    wait_state(client, jid, "complete")


@pytest.mark.parametrize(
    ("klass", "data", "group", "reason"),
    [
        (
            "crash",
            {"signal": signal.SIGSEGV},
            "runtime.ChildCrashed",
            "killed by signal 11 (SIGSEGV)",
        ),
        (
            "crash",
            {"signal": signal.SIGKILL},
            "runtime.ChildCrashed",
            "killed by signal 9 (SIGKILL)",
        ),
        ("os_exit", {"code": 3}, "runtime.ChildCrashed", "exited with code 3 before reporting"),
        ("exit_early", {}, "runtime.ChildCrashed", "exited with code 0 before reporting"),
        ("garbage", {}, "runtime.ProtocolError", "protocol error from child"),
    ],
)
def test_a_child_that_dies_fails_its_job_after_its_retries_with_a_reason(
    start_master: StartMaster,
    plain_client: Client,
    workdir: Path,
    klass: str,
    data: dict[str, int],
    group: str,
    reason: str,
) -> None:
    master = start_master("q", "-c", "1")
    jid = plain_client.queue("q").put(f"{J}:{klass}", data, retries=2, backoff=(0.01, 0.01))
    got_group, message = final_failure(plain_client, jid)
    assert got_group == group
    assert message.splitlines()[0].startswith(reason), message
    job = plain_client.get_job(jid)
    assert job is not None
    assert [e.event for e in job.history].count("popped") == 3, "retries + 1 attempts, no more"
    still_serving(master, plain_client, workdir)


def test_a_dead_child_is_noticed_and_replaced_within_a_second(
    start_master: StartMaster, plain_client: Client, workdir: Path
) -> None:
    master = start_master("q", "-c", "1")
    before = set(master.children())
    jid = plain_client.queue("q").put(f"{J}:crash", {"signal": 9}, retries=1, backoff=(30, 30))
    wait_state(plain_client, jid, "scheduled")
    job = plain_client.get_job(jid)
    assert job is not None
    popped, retried = job.history[1].at_ms, job.history[2].at_ms
    assert retried - popped < 1000
    wait_for(lambda: len(master.children()) == 1 and set(master.children()) != before, 5)


def test_the_memory_limit_kills_the_child_with_a_reason(
    start_master: StartMaster, plain_client: Client, workdir: Path
) -> None:
    master = start_master("q", "-c", "1", "--memory-limit", "100")
    jid = plain_client.queue("q").put(f"{J}:hog_memory", {"mib": 300}, retries=0)
    group, message = final_failure(plain_client, jid)
    assert group == "runtime.MemoryLimit"
    assert message.splitlines()[0] == "killed by signal 9 (memory limit 100 MiB)"
    still_serving(master, plain_client, workdir)


@pytest.mark.slow  # by default: test_worker_security's job that tries to lift its limit
def test_the_cpu_limit_kills_the_child_with_a_reason(
    start_master: StartMaster, plain_client: Client, workdir: Path
) -> None:
    start_master("q", "-c", "1", "--cpu-limit", "1")
    jid = plain_client.queue("q").put(f"{J}:burn_cpu", {}, retries=0)
    group, message = final_failure(plain_client, jid)
    assert (group, message.splitlines()[0]) == (
        "runtime.CPULimit",
        "killed by signal 24 (CPU limit 1 s)",
    )


def test_a_job_past_its_timeout_is_terminated_then_killed(
    start_master: StartMaster, plain_client: Client, workdir: Path
) -> None:
    plain_client.admin.config_set("q-timeout", 1)
    master = start_master("q", "-c", "2", "--kill-grace", "0.5")
    q = plain_client.queue("q")
    slow = q.put(f"{J}:sleep", {"seconds": 30}, retries=0)
    # 2 s: time for the job to ignore SIGTERM before it comes, on a loaded host too
    ignores_term = q.put(f"{J}:ignore_term", {}, retries=0, timeout=2)
    group, message = final_failure(plain_client, slow)
    assert (group, message.splitlines()[0]) == ("runtime.Timeout", "timed out after 1 s")
    group, message = final_failure(plain_client, ignores_term)
    assert (group, message.splitlines()[0]) == (
        "runtime.Timeout",
        "timed out after 2 s; killed by signal 9, still running 0.5 s after SIGTERM",
    )
    job = plain_client.get_job(ignores_term)
    assert job is not None
    popped, failed = job.history[1].at_ms, job.history[-1].at_ms
    assert failed - popped >= 2500, "SIGKILL came only after the timeout and the kill grace"
    still_serving(master, plain_client, workdir)


def test_a_job_that_heartbeats_outlives_its_timeout(
    start_master: StartMaster, plain_client: Client
) -> None:
    plain_client.admin.config_set("q-timeout", 0.6)
    start_master("q", "-c", "1")
    jid = plain_client.queue("q").put(f"{J}:beat", {"seconds": 2}, retries=0)
    wait_state(plain_client, jid, "complete")


def test_a_chatty_job_is_capped_and_the_master_keeps_serving(
    start_master: StartMaster, plain_client: Client, workdir: Path
) -> None:
    began = time.monotonic()
    master = start_master("q", "-c", "1")
    jid = plain_client.queue("q").put(f"{J}:chatty", {"lines": 200_000}, retries=0)
    group, message = final_failure(plain_client, jid)
    took_s = time.monotonic() - began
    assert group == "builtins.RuntimeError" and "chatty job failed" in message
    log = master.log()
    assert "THE END" in final_failure(plain_client, jid)[1] or "of output not logged" in log
    # The budget is of bytes per second: the log holds at most what the seconds the
    # job ran allow (a loaded host runs it longer), however much more it printed.
    budget = output.BUDGET_BYTES_S * (took_s + 1) + (256 << 10)
    assert len(log) <= budget, "a chatty child is held to its budget in the master's log"
    still_serving(master, plain_client, workdir)


def test_a_crash_on_every_attempt_ends_failed_not_in_a_loop(
    start_master: StartMaster, plain_client: Client, workdir: Path
) -> None:
    master = start_master("q", "-c", "2")
    jid = plain_client.queue("q").put(f"{J}:crash", {"signal": 6}, retries=3, backoff=(0.01, 0.01))
    _, message = final_failure(plain_client, jid)
    assert message.startswith("killed by signal 6 (SIGABRT)")
    still_serving(master, plain_client, workdir)  # the master has moved on ...
    job = plain_client.get_job(jid)
    assert job is not None and job.state == "failed"  # ... and left the job failed
    assert [e.event for e in job.history].count("popped") == 4, "retries + 1 attempts"


def test_a_dead_child_s_files_are_removed_before_its_slot_runs_again(
    start_master: StartMaster, plain_client: Client, workdir: Path
) -> None:
    start_master("q", "-c", "1")
    path = workdir / "sandbox"
    jid = plain_client.queue("q").put(f"{J}:litter_and_exit", {"path": str(path)}, retries=0)
    final_failure(plain_client, jid)
    sandbox = Path(path.read_text())
    wait_for(lambda: sandbox.is_dir() and not any(sandbox.iterdir()), 5, what="an empty sandbox")


def test_a_master_removes_its_sandboxes_when_it_exits(
    start_master: StartMaster, plain_client: Client, workdir: Path
) -> None:
    master = start_master("q", "-c", "2")
    path = workdir / "sandbox"
    jid = plain_client.queue("q").put(f"{J}:litter_and_exit", {"path": str(path)}, retries=0)
    final_failure(plain_client, jid)
    mine = Path(path.read_text()).parent  # <state dir>/sandboxes/<worker id>
    assert mine.name.endswith(f"-{master.pid}") and mine.is_dir()
    master.send(signal.SIGTERM)
    assert master.wait(10) == 0
    assert not mine.exists(), "the worker's sandboxes are gone"
    assert mine.parent.is_dir(), "the shared sandboxes directory stays"


def test_the_tail_of_a_crashed_child_s_output_is_in_the_reason(
    start_master: StartMaster, plain_client: Client
) -> None:
    start_master("q", "-c", "1")
    jid = plain_client.queue("q").put(f"{J}:last_words", {"lines": 2000}, retries=0)
    group, message = final_failure(plain_client, jid)
    reason, _, output = message.partition("\n--- last output of the child ---\n")
    assert (group, reason) == ("runtime.ChildCrashed", "exited with code 3 before reporting")
    assert output.rstrip().endswith("LAST WORDS before the crash"), "the tail is kept"
    assert "line 0 " not in output and len(output) <= 4096, "the head is not"


def test_a_child_killed_from_outside_has_its_job_retried_with_the_signal(
    start_master: StartMaster, plain_client: Client, workdir: Path
) -> None:
    master = start_master("q", "-c", "1")
    path = workdir / "alive"
    jid = plain_client.queue("q").put(
        f"{J}:alive", {"seconds": 30, "path": str(path)}, retries=1, backoff=(60, 60)
    )
    wait_for(path.exists, 10)
    [child] = master.children()
    os.kill(child, signal.SIGKILL)
    wait_state(plain_client, jid, "scheduled")
    job = plain_client.get_job(jid)
    assert job is not None and job.failure is not None
    assert job.failure.group == "runtime.ChildCrashed"
    assert job.failure.message.startswith("killed by signal 9 (SIGKILL)")
    assert job.remaining == job.retries - 1, "one attempt spent"
    still_serving(master, plain_client, workdir)
