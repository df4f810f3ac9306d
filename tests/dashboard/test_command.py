"""`runtime dashboard`: serves with no configuration (the embedded Redis), prints
the URL it serves, and meets bad input with a one-line error and exit code 2."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from runtime import Client
from runtime.cli import run
from tests.support.master import REPO
from tests.support.topologies import Node, free_port, short_dir

httpx: Any = pytest.importorskip("httpx", reason="httpx is not installed")
pytest.importorskip("starlette", reason="the dashboard extra is not installed")


@pytest.fixture
def on_test_redis(plain_client: Client, monkeypatch: pytest.MonkeyPatch) -> Client:
    monkeypatch.setenv("REDIS_URL", plain_client.url)
    monkeypatch.setenv("RUNTIME_NAMESPACE", plain_client.keys.namespace)
    return plain_client


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--basic-auth", "nocolon"], "basic auth must be given as user:password"),
        (["--url-prefix", "/a b"], "url prefix must be a plain path"),
        (["--port", "70000"], "70000 is not in the range"),
        (
            ["--host", "no.such.host.invalid", "--port", "0"],
            "cannot listen on no.such.host.invalid",
        ),
    ],
)
def test_bad_input_is_one_line_and_exit_code_2(
    on_test_redis: Client, capsys: pytest.CaptureFixture[str], args: list[str], says: str
) -> None:
    assert run(["dashboard", *args]) == 2
    err = capsys.readouterr().err
    assert says in err
    assert err.count("\n") == 1


def test_a_port_in_use_is_one_line(
    on_test_redis: Client, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        assert run(["dashboard", "--port", str(port)]) == 2
    err = capsys.readouterr().err
    assert err == f"runtime: error: cannot listen on 127.0.0.1:{port}: Address already in use\n"


@pytest.fixture
def state_dir() -> Iterator[Path]:
    path = Path(f"/tmp/rt-dash-{uuid.uuid4().hex[:8]}")
    yield path
    pidfile = path / "redis.pid"
    if pidfile.exists():
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pidfile.read_text()), signal.SIGKILL)
    shutil.rmtree(path, ignore_errors=True)


def _disposition(sigint: str) -> Callable[[], None]:
    """How the dashboard's process starts: with SIGINT as a terminal gives it, or
    ignored, as a shell script's background job inherits it."""
    handler = signal.SIG_DFL if sigint == "default" else signal.SIG_IGN

    def set_up() -> None:
        signal.signal(signal.SIGINT, handler)

    return set_up


@pytest.mark.parametrize(("sigint", "sent"), [("default", signal.SIGINT),
                                              ("ignored", signal.SIGINT),
                                              ("ignored", signal.SIGTERM)])  # fmt: skip
def test_it_serves_the_embedded_redis_with_no_configuration_and_prints_its_url(
    state_dir: Path, sigint: str, sent: signal.Signals
) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "RUNTIME_NAMESPACE")}
    env["RUNTIME_STATE_DIR"] = str(state_dir)
    argv = [sys.executable, "-m", "runtime", "dashboard", "--port", "0"]
    proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE, text=True,
                            preexec_fn=_disposition(sigint))  # noqa: PLW1509  # fmt: skip
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("runtime dashboard: http://127.0.0.1:"), line
        url = line.split()[2]
        assert line.rstrip().endswith(f"(metrics: {url}metrics)")
        page = httpx.get(url, timeout=10)
        assert page.status_code == 200
        assert "<h1>Overview</h1>" in page.text
        proc.send_signal(sent)
        assert proc.wait(timeout=15) == 0
        assert proc.stdout.read() == "runtime dashboard: stopped\n"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_it_starts_while_redis_is_down_and_shows_the_outage_until_redis_answers() -> None:
    port = free_port()
    env = {**os.environ, "REDIS_URL": f"redis://127.0.0.1:{port}/0", "RUNTIME_NAMESPACE": "down"}
    argv = [sys.executable, "-m", "runtime", "dashboard", "--port", "0"]
    proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    directory = short_dir("dash-down")
    node = Node(shutil.which("redis-server") or "/usr/bin/redis-server", directory, port)
    try:
        assert proc.stdout is not None and proc.stderr is not None
        warning = proc.stderr.readline()
        assert f"cannot reach Redis at redis://127.0.0.1:{port}/0" in warning, warning
        assert "serving pages that say so until Redis answers" in warning
        url = proc.stdout.readline().split()[2]
        page = httpx.get(url, timeout=10)
        assert page.status_code == 503 and "cannot reach Redis" in page.text
        scrape = httpx.get(url + "metrics", timeout=10)
        assert scrape.status_code == 200 and "runtime_redis_up 0" in scrape.text
        node.start()
        page = httpx.get(url, timeout=10)
        assert page.status_code == 200 and "<h1>Overview</h1>" in page.text
        assert "runtime_redis_up 1" in httpx.get(url + "metrics", timeout=10).text
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            node.stop()
            shutil.rmtree(directory, ignore_errors=True)
