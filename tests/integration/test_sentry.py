"""Final failures reach Sentry once, tagged and fingerprinted, with secrets
scrubbed; a local HTTP server stands in for Sentry (no network)."""

from __future__ import annotations

import gzip
import json
import signal
import socket
import threading
import time
import zlib
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from runtime import Client
from tests.integration.conftest import StartMaster
from tests.integration.test_worker_basics import wait_state
from tests.support.waiting import stays, wait_for

J = "tests.integration.jobs"


class Collector(ThreadingHTTPServer):
    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.bodies: list[bytes] = []

    @property
    def dsn(self) -> str:
        return f"http://public@127.0.0.1:{self.server_address[1]}/1"

    def events(self) -> list[dict[str, Any]]:
        found = []
        for body in list(self.bodies):
            lines = body.split(b"\n")
            for header, payload in zip(lines[1::2], lines[2::2], strict=False):
                if json.loads(header).get("type") == "event":
                    found.append(json.loads(payload))
        return found


class Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        encoding = self.headers.get("Content-Encoding")
        if encoding == "gzip":
            body = gzip.decompress(body)
        elif encoding == "deflate":
            body = zlib.decompress(body)
        assert isinstance(self.server, Collector)
        self.server.bodies.append(body)
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args: object) -> None:
        pass


class Unresponsive:
    """A Sentry that accepts connections and never answers."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.connections: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def dsn(self) -> str:
        return f"http://public@127.0.0.1:{self.sock.getsockname()[1]}/1"

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections.append(conn)

    def close(self) -> None:
        self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        for conn in self.connections:
            conn.close()


def only_event(sentry: Collector) -> dict[str, Any]:
    """The one event: waits for it, then a while longer for a duplicate (an absence)."""
    wait_for(sentry.events, 10, what="a Sentry event")
    stays(lambda: len(sentry.events()) == 1, 1.0, what="exactly one Sentry event")
    [event] = sentry.events()
    return event


@pytest.fixture
def sentry() -> Iterator[Collector]:
    server = Collector()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()


@pytest.fixture
def hung_sentry() -> Iterator[Unresponsive]:
    server = Unresponsive()
    yield server
    server.close()


def test_a_final_job_failure_is_one_scrubbed_event(
    start_master: StartMaster, plain_client: Client, sentry: Collector
) -> None:
    master = start_master("q", "-c", "1", env={"SENTRY_DSN": sentry.dsn})
    data = {"password": "hunter2", "api_key": "sk-live-123", "note": "plain"}
    jid = plain_client.queue("q").put(f"{J}:fail", data, retries=1, backoff=(0.05, 0.05))
    wait_state(plain_client, jid, "failed")
    event = only_event(sentry)
    assert event["tags"] == {
        "queue": "q",
        "klass": f"{J}:fail",
        "jid": jid,
        "attempt": "2",
        "worker": event["tags"]["worker"],
    }
    assert str(master.pid) in event["tags"]["worker"]
    assert event["fingerprint"] == ["builtins.ValueError"]
    assert event["exception"]["values"][-1]["type"] == "ValueError"
    raw = b"".join(sentry.bodies)
    assert b"hunter2" not in raw and b"sk-live-123" not in raw
    frames = event["exception"]["values"][-1]["stacktrace"]["frames"]
    job_frame = next(f for f in frames if f["function"] == "fail")
    assert job_frame["vars"]["api_key"] == "[Filtered]"
    assert job_frame["vars"]["settings"]["password"] == "[Filtered]"
    assert job_frame["vars"]["settings"]["note"] == "'plain'"


def test_a_crash_seen_by_the_master_is_reported_once(
    start_master: StartMaster, plain_client: Client, sentry: Collector
) -> None:
    start_master("q", "-c", "1", env={"SENTRY_DSN": sentry.dsn})
    jid = plain_client.queue("q").put(f"{J}:crash", {"signal": 9}, retries=0)
    wait_state(plain_client, jid, "failed")
    event = only_event(sentry)
    assert event["fingerprint"] == ["runtime.ChildCrashed"]
    assert event["tags"]["jid"] == jid and event["tags"]["attempt"] == "1"
    assert "killed by signal 9 (SIGKILL)" in event["message"]


def test_retries_are_not_reported(
    start_master: StartMaster, plain_client: Client, sentry: Collector
) -> None:
    start_master("q", "-c", "1", env={"SENTRY_DSN": sentry.dsn})
    jid = plain_client.queue("q").put(f"{J}:fail", {}, retries=3, backoff=(60, 60))
    wait_state(plain_client, jid, "scheduled")
    stays(lambda: sentry.events() == [], 1.0, what="no Sentry event for a retry")


def test_an_unresponsive_sentry_never_stalls_the_master_or_its_leases(
    start_master: StartMaster, plain_client: Client, workdir: Path, hung_sentry: Unresponsive
) -> None:
    plain_client.admin.config_set("q-heartbeat", 1)  # a stalled master would lose this lease
    master = start_master("q", "-c", "2", "--grace", "1", env={"SENTRY_DSN": hung_sentry.dsn})
    q = plain_client.queue("q")
    path = workdir / "alive"
    long = q.put(f"{J}:alive", {"seconds": 3, "path": str(path)})
    wait_for(path.exists, 10, what="the long job to start")
    crashed = q.put(f"{J}:crash", {"signal": 9}, retries=0)
    wait_state(plain_client, crashed, "failed")
    wait_for(lambda: hung_sentry.connections, 10, what="the master's report to reach Sentry")
    job = plain_client.get_job(crashed)
    assert job is not None and job.failure is not None
    assert job.failure.group == "runtime.ChildCrashed"
    assert job.failure.message.startswith("killed by signal 9 (SIGKILL)")
    wait_state(plain_client, long, "complete", 30)
    job = plain_client.get_job(long)
    assert job is not None and job.attempt == 1
    assert [e.event for e in job.history] == ["put", "popped", "completed"], "ran exactly once"
    assert {line.split()[1] for line in path.read_text().splitlines()} == {"1"}
    started = time.monotonic()
    master.send(signal.SIGTERM)
    assert master.wait(10) == 0
    assert time.monotonic() - started < 1 + 2, "the flush at exit is bounded"
