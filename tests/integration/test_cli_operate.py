"""The operator's verbs: status with complete and failed (--watch, --json), jobs,
workers, stats with percentiles, unfail --all, queue forget, pause of an unknown
queue, embedded status|stop; each with its bad input (one line, an exit code)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runtime import Client
from runtime.cli import run
from runtime.queue import embedded
from tests.integration.conftest import Invoke
from tests.support.waiting import wait_for


def finish(client: Client, queue: str, jid: str, outcome: str, group: str = "boom.Error") -> None:
    q = client.queue(queue)
    q.put("myapp.jobs:send", {}, jid=jid, retries=0)
    [job] = q.pop(1, worker="host-1")
    if outcome == "complete":
        job.complete()
    else:
        job.fail(group, "Traceback\nboom.Error: it broke")


def test_status_shows_complete_and_failed_with_totals_in_json(
    cli: Invoke, plain_client: Client
) -> None:
    finish(plain_client, "q", "c1", "complete")
    finish(plain_client, "q", "f1", "fail")
    code, out, _ = cli("status")
    header, row = out.splitlines()
    assert code == 0
    assert header.split()[-3:] == ["complete", "failed", "cancelled"]
    assert row.split() == ["q", "0", "0", "0", "0", "0", "0", "1", "1", "0"]
    _, out, _ = cli("status", "--json")
    q = json.loads(out)["q"]
    assert (q["complete"], q["failed"], q["completed_total"], q["failed_total"]) == (1, 1, 1, 1)


@pytest.mark.parametrize(("sigint", "sent"), [("default", signal.SIGINT),
                                              ("ignored", signal.SIGINT),
                                              ("ignored", signal.SIGTERM)])  # fmt: skip
def test_status_watch_redraws_until_interrupted(
    plain_client: Client, sigint: str, sent: signal.Signals
) -> None:
    """Ctrl-C or TERM end a watch, also when it started with SIGINT ignored (a shell
    script's background job inherits that)."""
    env = {**os.environ, "REDIS_URL": plain_client.url,
           "RUNTIME_NAMESPACE": plain_client.keys.namespace}  # fmt: skip
    plain_client.queue("q").put("a.b:c", {})
    handler = signal.SIG_DFL if sigint == "default" else signal.SIG_IGN
    proc = subprocess.Popen(
        [sys.executable, "-c", "from runtime.cli import main; main()", "status", "--watch",
         "0.2", "--json"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, handler) and None,  # noqa: PLW1509
    )  # fmt: skip
    assert proc.stdout is not None
    try:
        lines = [proc.stdout.readline() for _ in range(2)]
        assert [json.loads(line)["q"]["waiting"] for line in lines] == [1, 1]
        proc.send_signal(sent)
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.stderr is not None and proc.stderr.read() == ""


def test_jobs_lists_a_queues_jobs_by_state(cli: Invoke, plain_client: Client) -> None:
    finish(plain_client, "q", "f1", "fail")
    for i in range(3):
        plain_client.queue("q").put("myapp.jobs:send", {"n": i}, jid=f"w{i}")
    code, out, _ = cli("jobs", "q")
    lines = out.splitlines()
    assert code == 0 and lines[0] == "3 waiting in q, showing 1-3"
    assert [line.split()[0] for line in lines[1:]] == ["w2", "w1", "w0"]
    code, out, _ = cli("jobs", "q", "--oldest", "--limit", "2", "--start", "1")
    assert [line.split()[0] for line in out.splitlines()[1:]] == ["w1", "w2"]
    code, out, _ = cli("jobs", "q", "--state", "failed")
    assert "f1" in out and "boom.Error: boom.Error: it broke" in out
    code, out, _ = cli("jobs", "q", "--state", "complete", "--json")
    assert json.loads(out) == {"total": 0, "jobs": []}
    code, out, _ = cli("jobs", "q", "--json", "--limit", "1")
    page = json.loads(out)
    assert page["total"] == 3 and page["jobs"][0]["jid"] == "w2"
    assert page["jobs"][0]["data"] == {"n": 2} and page["jobs"][0]["history"][0]["event"] == "put"


def test_workers_shows_host_pid_queues_concurrency_and_running_jobs(
    cli: Invoke, plain_client: Client
) -> None:
    plain_client.queue("q").put("myapp.jobs:send", {}, jid="r1")
    plain_client.queue("q").pop(1, worker="box-4242")
    plain_client.leases.register_worker("box-4242", host="box", pid=4242, queues=["q", "other"],
                                 concurrency=8)  # fmt: skip
    code, out, _ = cli("workers")
    first, job = out.splitlines()
    assert code == 0
    assert first.startswith("box-4242  host box  pid 4242  queues q,other  concurrency 8  seen ")
    assert first.endswith("1 running")
    assert job.split()[:2] == ["r1", "myapp.jobs:send"] and job.split()[-1] in ("ms", "s")
    code, out, _ = cli("workers", "--json")
    assert json.loads(out)["box-4242"]["running"][0]["klass"] == "myapp.jobs:send"


def test_stats_shows_percentiles_and_millisecond_buckets(cli: Invoke, plain_client: Client) -> None:
    finish(plain_client, "q", "a", "complete")
    code, out, _ = cli("stats", "q")
    assert code == 0 and "p50" in out and "p95" in out and "p99" in out
    assert re.search(r"\n +>= +\d+ ms  1\n", out), out
    code, out, _ = cli("stats", "q", "--json")
    found = json.loads(out)
    assert found["run"]["p50"] is not None and found["run"]["p50"] < 1
    assert all(lower < 1 for lower, _ in found["run"]["histogram"])


def test_unfail_all_moves_every_group_back_to_each_jobs_own_queue(
    cli: Invoke, plain_client: Client
) -> None:
    finish(plain_client, "a", "a1", "fail", group="one.Error")
    finish(plain_client, "b", "b1", "fail", group="one.Error")
    finish(plain_client, "a", "a2", "fail", group="two.Error")
    finish(plain_client, "b", "b2", "fail", group="one.Error")
    code, out, _ = cli("unfail", "--all")
    assert code == 0 and out.strip() == "moved 4 jobs back to their queues"
    assert plain_client.failed() == {}
    states = {j.jid: (j.queue, j.state) for j in plain_client.get_jobs(["a1", "a2", "b1", "b2"])
              if j is not None}  # fmt: skip
    assert states == {"a1": ("a", "waiting"), "a2": ("a", "waiting"), "b1": ("b", "waiting"),
                      "b2": ("b", "waiting")}  # fmt: skip
    assert cli("unfail", "--all")[1].strip() == "moved 0 jobs back to their queues"


def test_unfail_of_one_group_without_a_queue_sends_jobs_home(
    cli: Invoke, plain_client: Client
) -> None:
    finish(plain_client, "a", "a1", "fail")
    finish(plain_client, "b", "b1", "fail")
    finish(plain_client, "a", "a2", "fail")
    code, out, _ = cli("unfail", "boom.Error", "--count", "2")
    assert code == 0 and out.strip() == "moved 2 jobs back to their queues"
    assert [(j.queue, j.state) for j in plain_client.get_jobs(["a1", "b1"]) if j] == [
        ("a", "waiting"), ("b", "waiting"),
    ]  # fmt: skip
    assert plain_client.failed() == {"boom.Error": 1}


def test_queue_forget_and_pause_of_an_unknown_queue(cli: Invoke, plain_client: Client) -> None:
    code, out, err = cli("pause", "typo")
    assert (code, out) == (1, "") and "typo" not in plain_client.queues()
    assert err == ("runtime: error: no queue typo (no queues yet); --create pauses it "
                   "before its first job\n")  # fmt: skip
    assert cli("pause", "--create", "typo") == (0, "paused typo\n", "")
    assert cli("pause", "typo") == (0, "paused typo\n", ""), "a known queue pauses as asked"
    code, out, _ = cli("queue", "forget", "typo")
    assert code == 0 and out.strip() == "forgot typo"
    assert "typo" not in plain_client.queues()
    plain_client.queue("busy").put("a.b:c", {})
    code, out, err = cli("queue", "forget", "busy")
    assert code == 1 and out == ""
    assert err == ("runtime: error: queue busy is not empty (1 waiting); cancel, unfail or "
                   "finish those jobs, and unrecur its recurrences, first\n")  # fmt: skip


@pytest.mark.parametrize(
    ("args", "code", "fragment"),
    [
        (["status", "--watch", "0"], 2, "--watch"),
        (["status", "--watch", "soon"], 2, "--watch"),
        (["status", "a:b"], 2, "queue"),
        (["jobs"], 2, "Missing argument"),
        (["jobs", "q", "--state", "stalled"], 2, "--state"),
        (["jobs", "q", "--limit", "0"], 2, "--limit"),
        (["jobs", "q", "--limit", "1001"], 2, "--limit"),
        (["jobs", "q", "--start", "-1"], 2, "--start"),
        (["jobs", "a b"], 2, "queue"),
        (["workers", "extra"], 2, "unexpected extra argument"),
        (["stats"], 2, "Missing argument"),
        (["stats", "a{b"], 2, "queue"),
        (["stats", "q", "--day", "2026-13-01"], 2, "--day"),
        (["unfail"], 2, "give a GROUP"),
        (["unfail", "--all", "g", "q"], 2, "give no QUEUE"),
        (["unfail", "g", "--count", "0"], 2, "--count"),
        (["unfail", "nogroup"], 1, "no failed jobs in nogroup"),
        (["unfail", "runtime.CorruptJob", "--all"], 2, "cannot run again"),
        (["queue"], 2, "Missing command"),
        (["queue", "forget"], 2, "Missing argument"),
        (["queue", "forget", "never-used"], 1, "no queue never-used"),
        (["queue", "forget", "a:b"], 2, "queue"),
        (["queue", "drop", "q"], 2, "No such command"),
        (["pause", "a b"], 2, "queue"),
        (["resume"], 2, "give a QUEUE or --domain DOMAIN"),
        (["embedded"], 2, "Missing command"),
        (["embedded", "restart"], 2, "No such command"),
        (["metrics"], 2, "--port"),
        (["metrics", "--port", "70000"], 2, "--port"),
    ],
)
def test_bad_input_is_one_line_on_stderr_with_an_exit_code(
    cli: Invoke, plain_client: Client, args: list[str], code: int, fragment: str
) -> None:
    if args[:2] == ["unfail", "runtime.CorruptJob"]:
        finish(plain_client, "q", "x", "fail", group="runtime.CorruptJob")
    got, out, err = cli(*args)
    assert (got, out) == (code, "")
    assert len(err.strip().splitlines()) == 1 and fragment in err, err


# --- the embedded server --------------------------------------------------------------


@pytest.fixture
def state_dir(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    path = Path(f"/tmp/rt-cli-{uuid.uuid4().hex[:8]}")
    monkeypatch.delenv("REDIS_URL", raising=False)
    monkeypatch.setenv("RUNTIME_STATE_DIR", str(path))
    yield path
    pid = embedded.live_server_pid(path)
    if pid is not None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    shutil.rmtree(path, ignore_errors=True)


def test_embedded_status_and_stop(state_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["embedded", "status"]) == 1
    assert capsys.readouterr().out.strip() == f"not running (state directory {state_dir})"
    assert run(["embedded", "stop"]) == 1
    assert capsys.readouterr().err.strip() == (
        f"runtime: error: no embedded server runs in {state_dir}"
    )
    embedded.ensure(state_dir)
    pid = embedded.live_server_pid(state_dir)
    assert pid is not None
    assert run(["embedded", "status"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"running: pid {pid}, socket {state_dir / 'redis.sock'}\nredis ")
    assert "aof 1" in out
    assert run(["embedded", "status", "--json"]) == 0
    facts = json.loads(capsys.readouterr().out)
    assert (facts["pid"], facts["answering"], facts["in_use"]) == (pid, True, True)
    assert run(["embedded", "stop"]) == 0
    assert capsys.readouterr().out.strip() == f"stopped the embedded redis-server (pid {pid})"
    wait_for(lambda: not embedded.replies(state_dir / "redis.sock"), 10, what="the socket closed")
    assert run(["embedded", "status"]) == 1


def test_embedded_stop_refuses_a_server_that_is_not_the_embedded_one(
    state_dir: Path, plain_client: Client, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.setenv("REDIS_URL", plain_client.url)
    assert run(["embedded", "stop"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("runtime: error: a Redis URL is configured") and err.count("\n") == 1
    assert plain_client.conn.now_ms() > 0, "the configured server still runs"
    monkeypatch.delenv("REDIS_URL")
    state_dir.mkdir(parents=True)
    os.symlink(plain_client.url.removeprefix("unix://"), state_dir / "redis.sock")
    assert run(["embedded", "stop"]) == 1
    err = capsys.readouterr().err
    assert "is not one runtime started" in err and err.count("\n") == 1
    assert plain_client.conn.now_ms() > 0


def test_workers_shows_a_real_master_and_its_running_job(
    cli: Invoke, plain_client: Client, start_master: Any
) -> None:
    master = start_master("q,other", "--concurrency", "2")
    plain_client.queue("q").put("tests.integration.jobs:sleep", {"seconds": 30}, jid="long")
    wait_for(lambda: plain_client.get_job("long").state == "running", 30,  # type: ignore[union-attr]
             what="the job running")  # fmt: skip
    code, out, _ = cli("workers")
    first, job = out.splitlines()[:2]
    assert code == 0
    assert first.startswith(f"{socket.gethostname()}-{master.pid}  host {socket.gethostname()}  "
                            f"pid {master.pid}  queues q,other  concurrency 2  seen ")  # fmt: skip
    assert job.split()[:2] == ["long", "tests.integration.jobs:sleep"]
    plain_client.cancel("long")
