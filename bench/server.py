"""The benchmarks' own redis-server (AOF everysec; a unix socket, and with
`tcp=True` also 127.0.0.1, which its url then names: as deployed) and the
redis-benchmark reference numbers measured against it."""

from __future__ import annotations

import hashlib
import re
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import redis

from runtime.queue.embedded import ServerProcess, find_server_binary


class TcpServer(ServerProcess):
    """A private server that also listens on 127.0.0.1:port; its url is that one."""

    port = 0

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"


def _free_port() -> int:
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        return int(free.getsockname()[1])


@contextmanager
def private_server(tcp: bool = False) -> Iterator[ServerProcess]:
    """A fresh server for one suite; `tcp`: clients and masters reach it over TCP
    loopback (server.url), the harness's own bookkeeping over the socket."""
    directory = Path(tempfile.mkdtemp(prefix="rt-bench-", dir="/tmp"))
    binary = find_server_binary()
    server: ServerProcess
    if tcp:
        port = _free_port()
        listening = TcpServer(
            binary, directory, appendonly=True, extra=f"port {port}\nbind 127.0.0.1"
        )
        listening.port = port
        server = listening
    else:
        server = ServerProcess(binary, directory, appendonly=True)
    server.start()
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
            [
                binary,
                "-s",
                str(server.socket),
                "-c",
                str(clients),
                "-n",
                str(requests),
                "-q",
                *command,
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )
        match = re.search(r"([\d.]+) requests per second", done.stdout)
        if match:
            out[name] = float(match.group(1))
    connect(server).delete("bench:key", "bench:list")
    return out
