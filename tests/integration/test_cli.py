"""The command line: verbs, output, one-line errors and exit codes."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from runtime import Client
from runtime.cli import run
from runtime.queue.embedded import find_server_binary
from tests.integration.conftest import Invoke
from tests.support.clock import FrozenClock
from tests.support.redis_server import RedisServer


def test_put_then_status_and_job(cli: Invoke, plain_client: Client) -> None:
    code, out, _ = cli("put", "emails", "myapp.jobs:send", '{"to": "a@b.c"}', "--tag", "vip")
    assert code == 0
    jid = out.strip()
    assert plain_client.get_job(jid).data == {"to": "a@b.c"}  # type: ignore[union-attr]
    code, out, _ = cli("status")
    assert code == 0
    header, row = out.splitlines()
    assert header.split() == [
        "queue",
        "waiting",
        "throttled",
        "scheduled",
        "running",
        "stalled",
        "depends",
        "complete",
        "failed",
        "cancelled",
    ]
    assert row.split() == ["emails", "1", "0", "0", "0", "0", "0", "0", "0", "0"]
    code, out, _ = cli("job", jid)
    assert code == 0 and "state      waiting" in out and "put" in out and "vip" in out
    code, out, _ = cli("job", jid, "--json")
    assert json.loads(out)["data"] == {"to": "a@b.c"}
    code, out, _ = cli("status", "--json")
    assert json.loads(out)["emails"]["waiting"] == 1


def test_data_from_a_file_and_stdin(
    cli: Invoke, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "d.json"
    path.write_text('{"from": "file"}')
    code, out, _ = cli("put", "q", "a.b:c", f"@{path}")
    assert code == 0
    monkeypatch.setattr(sys, "stdin", __import__("io").StringIO('{"from": "stdin"}'))
    code, out2, _ = cli("put", "q", "a.b:c", "-")
    assert code == 0 and out.strip() != out2.strip()


def test_failed_unfail_cancel_pause_resume(cli: Invoke, plain_client: Client) -> None:
    q = plain_client.queue("q")
    q.put("a.b:c", {}, jid="f1", retries=0)
    [job] = q.pop(1, worker="w")
    job.fail("builtins.ValueError", "Traceback\nValueError: nope")
    code, out, _ = cli("failed")
    assert code == 0 and out.split() == ["1", "builtins.ValueError"]
    code, out, _ = cli("failed", "builtins.ValueError")
    assert "f1" in out and "ValueError: nope" in out
    code, out, _ = cli("unfail", "builtins.ValueError")
    assert code == 0 and out.strip() == "moved 1 jobs back to their queues"
    assert cli("pause", "q")[0] == 0
    assert plain_client.queue("q").pop(1, worker="w") == []
    assert cli("resume", "q")[0] == 0
    code, out, _ = cli("cancel", "f1", "missing")
    assert out.strip() == "cancelled 1 of 2"


def test_config_shows_sets_and_unsets(cli: Invoke) -> None:
    code, out, _ = cli("config")
    assert code == 0 and "heartbeat" in out and "jobs-history-count" in out
    assert cli("config", "emails-heartbeat", "10")[1].strip() == "emails-heartbeat = 10"
    assert cli("config", "emails-heartbeat", "--unset")[1].strip() == "emails-heartbeat = 60"


@pytest.mark.parametrize(
    ("args", "code", "fragment"),
    [
        (["put", "bad:queue", "a.b:c"], 2, "queue name"),
        (["put", "q", "nodots"], 2, "klass"),
        (["put", "q", "a.b:c", "{not json"], 2, "not JSON"),
        (["put", "q", "a.b:c", "[1, 2]"], 2, "JSON object"),
        (["put", "q", "a.b:c", "@/nonexistent/file"], 2, "cannot read"),
        (["put", "q", "a.b:c", "--delay", "nan"], 2, "finite"),
        (["put", "q", "a.b:c", "--delay", "-3"], 2, "finite"),
        (["put", "q", "a.b:c", "--priority", "x"], 2, "priority"),
        (["put", "q", "a.b:c", "--depends", "unknown"], 2, "unknown dependency"),
        (["put", "q"], 2, "Missing argument"),
        (["job", "nope"], 1, "no job nope"),
        (["job", ""], 2, "JID must be"),
        (["job", "a b"], 2, "JID must be"),
        (["unfail", "nogroup"], 1, "no failed jobs"),
        (["config", "bogus", "1"], 2, "unknown setting"),
        (["config", "heartbeat", "0"], 2, "between"),
        (["config", "jobs-history-count", "1.5"], 2, "whole number"),
        (["pause", "a b"], 2, "queue name"),
        (["frobnicate"], 2, "No such command"),
        (["status", "--bogus"], 2, "No such option"),
    ],
)
def test_bad_input_is_one_line_on_stderr_with_an_exit_code(
    cli: Invoke, args: list[str], code: int, fragment: str
) -> None:
    got, out, err = cli(*args)
    assert got == code
    if code:
        assert err.count("\n") == 1 and fragment in err and err.startswith("runtime"), err
        assert "Traceback" not in err + out


NOT_UTF8 = b'{"to": "\xff"}'
TOO_DEEP = b"[" * 100_000 + b"]" * 100_000


@pytest.mark.parametrize(
    ("content", "fragment"),
    [(NOT_UTF8, "is not UTF-8 text: byte 8 is invalid"), (TOO_DEEP, "is nested too deeply")],
)
def test_a_bad_data_file_is_one_line_naming_the_file_and_exit_2(
    cli: Invoke, tmp_path: Path, content: bytes, fragment: str
) -> None:
    path = tmp_path / "data.json"
    path.write_bytes(content)
    for verb in (["put", "q", "a.b:c"], ["recur", "add", "q", "a.b:c", "--every", "60"]):
        code, out, err = cli(*verb, f"@{path}")
        assert (code, out) == (2, "")
        assert err.startswith(f"runtime: error: DATA file {path} {fragment}")
        assert err.count("\n") == 1


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        (NOT_UTF8, "is not UTF-8 text: byte 8 is invalid"),
        (b"x = " + TOO_DEEP, "is nested too deeply"),
    ],
)
def test_a_bad_config_file_is_one_line_naming_the_file_and_exit_2(
    cli: Invoke, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, content: bytes, fragment: str
) -> None:
    path = tmp_path / "runtime.toml"
    path.write_bytes(content)
    monkeypatch.setenv("RUNTIME_CONFIG", str(path))
    code, out, err = cli("status")
    assert (code, out) == (2, "")
    assert err.startswith(f"runtime: error: config file {path} {fragment}")
    assert err.count("\n") == 1


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["frobnicate"], "runtime: error: No such command 'frobnicate'."),
        (["status", "--bogus"], "runtime status: error: No such option '--bogus'."),
        (["recur", "add", "q"], "runtime recur add: error: Missing argument 'KLASS'."),
    ],
)
def test_a_usage_error_names_the_command_once(cli: Invoke, args: list[str], line: str) -> None:
    assert cli(*args) == (2, "", line + "\n")


def test_cancel_of_an_unknown_jid_cancels_the_others_and_exits_1(
    cli: Invoke, plain_client: Client
) -> None:
    plain_client.queue("q").put("a.b:c", {}, jid="known")
    assert cli("cancel", "known", "missing") == (
        1,
        "cancelled 1 of 2\n",
        "runtime: error: no job missing\n",
    )
    known = plain_client.get_job("known")  # its tombstone (docs/semantics.md)
    assert known is not None and known.state == "cancelled"
    assert cli("cancel", "gone-1", "gone-2") == (
        1,
        "cancelled 0 of 2\n",
        "runtime: error: no jobs gone-1, gone-2\n",
    )


def test_a_duplicate_jid_is_refused(cli: Invoke) -> None:
    assert cli("put", "q", "a.b:c", "--jid", "dup")[0] == 0
    code, _, err = cli("put", "q", "a.b:c", "--jid", "dup")
    assert code == 1 and err.count("\n") == 1 and "already exists" in err


def test_unreachable_redis_exits_3_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["--url", "redis://127.0.0.1:1/0", "status"]) == 3
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot reach Redis at redis://127.0.0.1:1/0" in err


@pytest.fixture
def not_redis() -> Iterator[str]:
    """A TCP server that answers like a web server: redis://host:port of it."""
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            with contextlib.suppress(OSError), listener.accept()[0] as conn:
                conn.recv(1024)
                conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield f"redis://127.0.0.1:{listener.getsockname()[1]}/0"
    stop.set()
    listener.close()
    thread.join(timeout=5)


@pytest.mark.parametrize("verb", [["status"], ["config"], ["job", "j1"]])
def test_a_url_that_is_not_redis_exits_3_with_one_line(
    not_redis: str, capsys: pytest.CaptureFixture[str], verb: list[str]
) -> None:
    assert run(["--url", not_redis, *verb]) == 3
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unexpected" not in err
    assert f"the server at {not_redis} does not speak Redis" in err


def test_config_defaults_through_the_client_and_the_cli(cli: Invoke, plain_client: Client) -> None:
    defaults = {"heartbeat": 60, "jobs-history": 604800, "jobs-history-count": 50000}
    values = plain_client.admin.config_get()
    assert {name: values[name] for name in defaults} == defaults
    for name, value in {**defaults, "max-data-bytes": 1 << 20}.items():
        assert cli("config", name)[1] == f"{name} = {value}\n"
    code, out, _ = cli("config")
    shown = {line.split()[0]: line.split()[1] for line in out.splitlines()}
    assert code == 0 and shown["max-data-bytes"] == "1048576" and shown["heartbeat"] == "60"
    assert shown["jobs-history"] == "604800" and shown["jobs-history-count"] == "50000"
    assert cli("config", "domain-period", "0.25")[1] == "domain-period = 0.25\n"


@pytest.fixture(scope="module")
def password_server() -> Iterator[RedisServer]:
    directory = Path(f"/tmp/rt-pw-{uuid.uuid4().hex[:8]}")
    acl = "requirepass s3cret\nuser alice on >wonderland ~* &* +@all"
    server = RedisServer(find_server_binary(), directory, extra=acl)
    server.start()
    yield server
    server.stop()
    shutil.rmtree(directory, ignore_errors=True)


def test_passwords_and_acl_users(
    password_server: RedisServer, capsys: pytest.CaptureFixture[str]
) -> None:
    sock = password_server.socket
    assert run(["--url", f"unix://:s3cret@{sock}", "status"]) == 0
    assert run(["--url", f"unix://alice:wonderland@{sock}", "status"]) == 0
    capsys.readouterr()
    assert run(["--url", f"unix://:wrong@{sock}", "status"]) == 3
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "refused the credentials" in err and "wrong" not in err
    assert run(["--url", f"unix://{sock}", "status"]) == 3
    assert "requires a password" in capsys.readouterr().err


def test_the_installed_command_works_with_no_configuration(tmp_path: Path) -> None:
    state = Path(f"/tmp/rt-cli-{uuid.uuid4().hex[:8]}")
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "RUNTIME_NAMESPACE")}
    env["RUNTIME_STATE_DIR"] = str(state)
    exe = shutil.which("runtime", path=os.path.dirname(sys.executable))
    assert exe is not None
    try:
        put = subprocess.run(
            [exe, "put", "emails", "myapp.jobs:send", '{"n": 1}'],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert put.returncode == 0, put.stderr
        status = subprocess.run(
            [exe, "status"], env=env, capture_output=True, text=True, timeout=60
        )
        assert status.returncode == 0
        assert status.stdout.splitlines()[1].split()[:2] == ["emails", "1"]
        bad = subprocess.run([exe, "put", "emails", "x"], env=env, capture_output=True, text=True)
        assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "Traceback" not in bad.stderr
    finally:
        pid = state / "redis.pid"
        if pid.exists():
            os.kill(int(pid.read_text()), signal.SIGKILL)
        shutil.rmtree(state, ignore_errors=True)


def test_scheduler_verbs(cli: Invoke, plain_client: Client) -> None:
    assert cli("limit", "example.com", "10/1", "--burst", "2")[0] == 0
    code, out, _ = cli("limit")
    assert out.split() == ["example.com", "10/1s", "burst", "2"]
    assert cli("limit", "example.com", "ten")[0] == 2
    assert cli("limit", "example.com", "--clear")[0] == 0 and cli("limit")[1] == ""
    code, out, _ = cli("recur", "add", "q", "a.b:c", '{"k": 1}', "--every", "60", "--id", "r1")
    assert code == 0 and out.startswith("r1: next at ")
    code, out, _ = cli("recur", "list")
    assert out.startswith("r1  q  a.b:c  every 60 s  policy once")
    assert cli("recur", "add", "q", "a.b:c", "--cron", "nonsense")[0] == 2
    assert cli("recur", "add", "q", "a.b:c")[0] == 2
    assert cli("recur", "remove", "r1")[0] == 0 and cli("recur", "remove", "r1")[0] == 1


def test_job_verbs(cli: Invoke, plain_client: Client) -> None:
    q = plain_client.queue("q")
    q.put("a.b:c", {}, jid="a")
    q.put("a.b:c", {}, jid="b")
    assert cli("tag", "a", "red", "blue")[1].split() == ["red", "blue"]
    assert cli("untag", "a", "red")[1].split() == ["blue"]
    _, out, _ = cli("tagged", "blue")
    assert out.splitlines()[0] == "1 jobs tagged blue" and out.splitlines()[1].startswith("a ")
    assert cli("depends", "b", "on", "a")[1].strip() == "depends"
    assert cli("depends", "b", "off", "a")[1].strip() == "waiting"
    assert cli("priority", "b", "-5")[1].strip() == "waiting"
    assert cli("track", "a")[0] == 0
    assert cli("tracked")[1].split()[0] == "a"
    assert cli("track", "a", "--off")[0] == 0 and cli("tracked")[1] == ""
    [job] = q.pop(1, worker="w")
    assert job.jid == "b", "priority -5 first"
    job.fail("g", "m")
    assert cli("retry", "b")[1].strip() == "waiting"
    assert cli("retry", "a")[0] == 1, "a waiting job cannot be retried"


def test_stats_verb(cli: Invoke, plain_client: Client) -> None:
    q = plain_client.queue("q")
    q.put("a.b:c", {}, jid="a")
    q.pop(1, worker="w")[0].complete()
    code, out, _ = cli("stats", "q")
    assert code == 0 and "failures 0, failed 0, retries 0" in out
    assert "wait  1 jobs" in out and "run   1 jobs" in out
    code, out, _ = cli("stats", "q", "--json")
    assert json.loads(out)["run"]["count"] == 1
    assert cli("stats", "q", "--day", "yesterday")[0] == 2


def test_stats_name_their_units_minutes_as_min_not_m(cli: Invoke, plain_client: Client) -> None:
    clock = FrozenClock(plain_client.redis, plain_client.keys)
    assert cli("config", "q-heartbeat", "10000")[0] == 0  # the lease outlasts the run
    q = plain_client.queue("q")
    q.put("a.b:c", {}, jid="a")
    clock.advance(84)
    [job] = q.pop(1, worker="w")
    clock.advance(7500)
    job.complete()
    code, out, _ = cli("stats", "q", "--day", "2027-01-15")
    lines = out.splitlines()
    assert code == 0
    assert lines[1] == "wait  1 jobs, mean 1.4 min, stddev 0 ms"
    assert lines[2] == "      p50 1.5 min, p95 1.9 min, p99 2 min"  # within the bucket
    assert lines[3].split() == [">=", "1", "min", "1"]
    assert lines[4] == "run   1 jobs, mean 2.1 h, stddev 0 ms"
    assert lines[6].split() == [">=", "2", "h", "1"]


def test_events_verb_stops_when_idle(cli: Invoke, plain_client: Client) -> None:
    code, out, _ = cli("events", "--idle", "0.2")
    assert code == 0 and out == ""
