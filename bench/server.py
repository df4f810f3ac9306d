"""The benchmarks' own redis-server (AOF everysec, unix socket) and the
redis-benchmark reference numbers measured against it."""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import redis

from runtime.queue.embedded import ServerProcess, find_server_binary


@contextmanager
def private_server() -> Iterator[ServerProcess]:
    directory = Path(tempfile.mkdtemp(prefix="rt-bench-", dir="/tmp"))
    server = ServerProcess(find_server_binary(), directory, appendonly=True).start()
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(directory, ignore_errors=True)


def connect(server: ServerProcess) -> redis.Redis:
    return redis.Redis(unix_socket_path=str(server.socket))


def redis_benchmark(server: ServerProcess, clients: int, requests: int) -> dict[str, float]:
    """Requests per second of SET, LPUSH and a trivial EVALSHA (`return 1`)."""
    binary = shutil.which("redis-benchmark")
    if binary is None:
        return {}
    script = "return 1"
    connect(server).script_load(script)
    sha = hashlib.sha1(script.encode(), usedforsecurity=False).hexdigest()
    out: dict[str, float] = {}
    for name, command in (
        ("SET", ["SET", "bench:key", "x" * 100]),
        ("LPUSH", ["LPUSH", "bench:list", "x" * 100]),
        ("EVALSHA", ["EVALSHA", sha, "0"]),
    ):
        done = subprocess.run(
            [binary, "-s", str(server.socket), "-c", str(clients), "-n", str(requests), "-q",
             *command],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        match = re.search(r"([\d.]+) requests per second", done.stdout)
        if match:
            out[name] = float(match.group(1))
    connect(server).delete("bench:key", "bench:list")
    return out
