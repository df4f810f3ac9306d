"""What a job's author sees, through a real worker: output in the worker's log and
kept with the job, results, jobs put from a job, Fail and never_retry, progress,
cancelling a running job, the worker's log level in children."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from runtime import Client
from runtime.master.output import BUDGET_BYTES_S
from tests.integration.conftest import StartMaster
from tests.support.waiting import ended, wait_for

J = "tests.integration.jobs"


def test_what_a_job_prints_and_logs_reaches_the_worker_log_and_is_kept_with_it(
    start_master: StartMaster, plain_client: Client
) -> None:
    master = start_master("q", "-c", "1")
    jid = plain_client.queue("q").put(f"{J}:talk", {"word": "hello"})
    job = ended(plain_client, jid)
    log = master.log()
    for text in ("to stdout hello", "to stderr", "a warning from the job", "an info from the job"):
        assert f"{text} jid={jid} klass={J}:talk" in log, text
    assert "WARNING jobs.talk: a warning from the job" in log, "the record keeps its level"
    assert job.state == "complete" and job.result == {"said": "hello"}
    assert "to stdout hello" in job.output and "to stderr" in job.output


def test_output_of_jobs_sent_ahead_to_one_child_is_each_jobs_own(
    start_master: StartMaster, plain_client: Client
) -> None:
    """Short jobs go to a child a step ahead (a pipeline): whose a line is follows
    from the order of the child's messages, with no marker on the pipe."""
    master = start_master("q", "-c", "1")
    q = plain_client.queue("q")
    jids = {q.put(f"{J}:talk", {"word": f"w{i}x"}): f"w{i}x" for i in range(60)}
    log = ""
    for jid, word in jids.items():
        job = ended(plain_client, jid)
        assert job.state == "complete"
        assert f"to stdout {word}" in job.output, (jid, job.output)
        others = [w for w in jids.values() if w != word and f"to stdout {w}\n" in job.output]
        assert not others, (word, others)
    log = master.log()
    for jid, word in jids.items():
        assert f"to stdout {word} jid={jid} klass={J}:talk" in log, word


def test_the_worker_log_level_holds_in_children(
    start_master: StartMaster, plain_client: Client
) -> None:
    master = start_master("q", "-c", "1", env={"RUNTIME_LOG_LEVEL": "WARNING"})
    jid = plain_client.queue("q").put(f"{J}:talk", {})
    ended(plain_client, jid)
    wait_for(lambda: "a warning from the job" in master.log(), 5)
    assert "an info from the job" not in master.log()


@pytest.mark.parametrize(
    "mib",
    [256, pytest.param(1024, marks=[pytest.mark.slow, pytest.mark.timeout(400)], id="1GiB")],
    ids=str,
)
def test_a_job_printing_hundreds_of_megabytes_neither_blocks_nor_floods(
    start_master: StartMaster, plain_client: Client, mib: int
) -> None:
    master = start_master("q", "-c", "1")
    jid = plain_client.queue("q").put(f"{J}:flood", {"mib": mib})
    job = ended(plain_client, jid, 300)
    assert job.state == "complete"
    log = master.log()
    assert "of output not logged" in log
    took_s = (job.history[-1].at_ms - job.history[0].at_ms) / 1000
    assert len(log) < (2 * took_s + 2) * BUDGET_BYTES_S, "about the budget, not the flood"
    assert 60_000 <= len(job.output.encode()) <= 64 * 1024, "the last 64 KiB is kept"
    noop = plain_client.queue("q").put(f"{J}:noop", {})
    assert ended(plain_client, noop).state == "complete"


def test_a_return_value_that_is_not_json_completes_the_job_without_a_result(
    start_master: StartMaster, plain_client: Client
) -> None:
    start_master("q", "-c", "1")
    jid = plain_client.queue("q").put(f"{J}:returns_object", {})
    job = ended(plain_client, jid)
    assert job.state == "complete" and job.result is None
    assert any("not JSON" in json.dumps(e.__dict__, default=str) for e in job.history)


def test_jobs_put_by_a_job_are_committed_with_its_completion_only(
    start_master: StartMaster, plain_client: Client
) -> None:
    start_master("q", "-c", "1")
    ok = plain_client.queue("q").put(f"{J}:put_follow_ups", {"count": 3, "queue": "next"})
    ended(plain_client, ok)
    assert plain_client.queue("next").counts()["waiting"] == 3
    bad = plain_client.queue("q").put(
        f"{J}:put_follow_ups",
        {"count": 2, "queue": "never", "fail": True},
        retries=1,
        backoff=(0.01, 0.01),
    )
    assert ended(plain_client, bad).state == "failed"
    assert plain_client.queue("never").counts()["waiting"] == 0, "failed attempts put nothing"


def test_a_put_with_now_goes_at_once_while_the_job_still_runs(
    start_master: StartMaster, plain_client: Client, workdir: Path
) -> None:
    start_master("q", "-c", "1")
    go = workdir / "go"
    jid = plain_client.queue("q").put(
        f"{J}:put_follow_ups", {"count": 2, "queue": "links", "now": True, "path": str(go)}
    )
    wait_for(lambda: plain_client.queue("links").counts()["waiting"] == 2, 10)
    job = plain_client.get_job(jid)
    assert job is not None and job.state == "running"
    go.touch()
    done = ended(plain_client, jid)
    assert done.state == "complete"
    puts = [e for e in done.history if e.event == "puts"]
    assert sum(e.count or 0 for e in puts) == 2, "the job's history counts its puts"


def test_a_child_holds_no_redis_connection_and_no_credentials(
    start_master: StartMaster, plain_client: Client, workdir: Path
) -> None:
    start_master("q", "-c", "1", env={"SENTRY_DSN": "", "RUNTIME_REDIS_SECRET": "x"})
    path = workdir / "seen"
    ended(plain_client, plain_client.queue("q").put(f"{J}:sees_redis", {"path": str(path)}))
    seen = json.loads(path.read_text())
    assert seen["sockets"] == 1, "only its socket to the master"
    assert seen["env"] == []


def test_fail_fails_at_once_and_never_retry_errors_spend_no_retries(
    start_master: StartMaster, plain_client: Client
) -> None:
    start_master("q", "-c", "1")
    q = plain_client.queue("q")
    failed = ended(plain_client, q.put(f"{J}:fail_fast", {}, retries=5))
    assert failed.state == "failed" and failed.failure is not None
    assert failed.failure.group == "runtime.Fail"
    assert failed.failure.message.startswith("address does not exist")
    assert failed.attempt == 1
    never = ended(plain_client, q.put(f"{J}:lookup", {}, retries=5))
    assert never.state == "failed" and never.attempt == 1
    assert never.failure is not None and never.failure.group == "builtins.KeyError"
    # what docs/writing-jobs.md prints for a JobFailed: the exception's line, for
    # Fail and for any other exception alike (never "Traceback (most recent ...")
    for job in (failed, never):
        assert job.failure is not None
        last = job.failure.message.strip().splitlines()[-1]
        assert last.startswith(("runtime.errors.Fail: address", "KeyError: ")), last


def test_progress_is_stored_on_the_job(start_master: StartMaster, plain_client: Client) -> None:
    start_master("q", "-c", "1")
    job = ended(plain_client, plain_client.queue("q").put(f"{J}:report_progress", {}))
    assert job.progress is not None
    assert (job.progress["done"], job.progress["total"], job.progress["message"]) == (
        10,
        10,
        "step 10",
    )


@pytest.mark.parametrize("children", [1, 2])
def test_cancelling_a_running_job_stops_it_within_a_second(
    start_master: StartMaster, plain_client: Client, workdir: Path, children: int
) -> None:
    master = start_master("q", "-c", str(children))
    path = workdir / "alive"
    jid = plain_client.queue("q").put(f"{J}:alive", {"seconds": 30, "path": str(path)})
    wait_for(path.exists, 10)
    plain_client.cancel(jid)
    cancelled_at = time.time()
    wait_for(lambda: f"cancelled jid={jid}" in master.log(), 5, what="the master to say so")
    time.sleep(0.3)  # its last line is written within the second, then none
    last = float(path.read_text().splitlines()[-1].split()[-1])
    assert last < cancelled_at + 1.0, "the child was stopped within a second"
    log = master.log()
    assert "lease was lost" not in log and "report refused" not in log
    tomb = plain_client.get_job(jid)  # what the master did after: nothing to its tombstone
    assert tomb is not None and tomb.state == "cancelled" and tomb.data == {}
    assert [e.event for e in tomb.history] == ["put", "cancelled"]
    assert tomb.history[-1].worker is not None and tomb.history[-1].by == "api"
