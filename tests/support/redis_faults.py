"""Real Redis conditions for the fault tests, driven on the server itself.

Each helper takes a plain redis-py client of the server (not a namespaced
`Client`), or the test's own `ServerProcess` where the server is restarted:

    busy(conn, seconds)       a read-only EVAL loop past busy-reply-threshold:
                              other clients get -BUSY until it ends or is killed
    out_of_memory(conn)       maxmemory below used memory, noeviction: -OOM on writes
    settled_used_memory(conn) used_memory once Redis's own frees are done
    readonly(conn)            REPLICAOF a port where nothing listens: -READONLY on
                              writes, data kept; REPLICAOF NO ONE on exit
    restart_with_aof(server)  SIGKILL, then a restart that replays a large AOF
                              slowly: clients see a refused connection, then -LOADING
    flush_scripts(conn)       FUNCTION FLUSH and SCRIPT FLUSH
    corrupt_record(conn, keys, jid, kind)  a job's record rewritten with raw HSET

Demoting or restarting a server ends every test on it: use a private server
(`private_server()`), never the session's shared one.
"""

from __future__ import annotations

import contextlib
import json
import pickle
import shutil
import signal
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import redis

from runtime.queue.embedded import ServerProcess, find_server_binary
from runtime.queue.keys import Keys
from tests.support.waiting import wait_for

BUSY_THRESHOLD_MS = 100
# Loading settings of a private server whose restart takes a while: every key of
# the AOF's RDB preamble costs `key-load-delay` us, and the server answers other
# clients (-LOADING) every `loading-process-events-interval-bytes` bytes.
SLOW_LOAD = "key-load-delay {delay_us}\nloading-process-events-interval-bytes 1024\n"

_SPIN = """
local until_us = tonumber(ARGV[1])
while true do
  local t = redis.call('TIME')
  if tonumber(t[1]) * 1000000 + tonumber(t[2]) >= until_us then
    return 1
  end
end
"""


# --- private servers -----------------------------------------------------------------


@contextlib.contextmanager
def private_server(
    *, appendonly: bool = False, load_delay_us: int = 0, extra: str = ""
) -> Iterator[ServerProcess]:
    """A redis-server of the test's own, stopped and removed on exit; `extra`: more
    lines of its configuration (e.g. "appendfsync always")."""
    directory = Path(f"/tmp/rt-fault-{uuid.uuid4().hex[:8]}")
    extra = (SLOW_LOAD.format(delay_us=load_delay_us) if load_delay_us else "") + "\n" + extra
    server = ServerProcess(find_server_binary(), directory, appendonly=appendonly, extra=extra)
    server.start()
    try:
        yield server
    finally:
        if server.process is not None and server.process.poll() is None:
            server.process.send_signal(signal.SIGCONT)
        server.kill(signal.SIGKILL)
        shutil.rmtree(directory, ignore_errors=True)


def connect(server: ServerProcess, **kwargs: object) -> redis.Redis:
    """A plain client of the server (no namespace), replies as bytes."""
    return redis.Redis(unix_socket_path=str(server.socket), **kwargs)  # type: ignore[arg-type]


def answers(conn: redis.Redis) -> bool:
    """Whether the server answers PING now (not loading, not busy, reachable)."""
    try:
        return bool(conn.ping())
    except redis.exceptions.RedisError:
        return False


# --- BUSY ------------------------------------------------------------------------------


class Busy:
    """A script spinning on its own connection, from `start()` until it ends by
    itself after `seconds` or `end()` kills it. `ended_at` is time.time() then."""

    def __init__(self, conn: redis.Redis, seconds: float) -> None:
        self.conn = conn
        self.seconds = seconds
        pool = conn.connection_pool
        self.pool_args = (pool.connection_class, {**pool.connection_kwargs, "socket_timeout": None})
        self.error: BaseException | None = None
        self.ended_at: float | None = None
        self._thread = threading.Thread(target=self._spin, daemon=True)
        self._saved = _config_get(conn, "busy-reply-threshold", "lua-time-limit")

    def _spin(self) -> None:
        connection_class, kwargs = self.pool_args
        own = redis.Redis(connection_pool=redis.ConnectionPool(connection_class, **kwargs))
        try:
            now_s, now_us = own.time()
            own.eval(_SPIN, 0, now_s * 1_000_000 + now_us + round(self.seconds * 1e6))
        except redis.exceptions.RedisError as err:  # killed: "Script killed by user"
            self.error = err
        finally:
            self.ended_at = time.time()
            own.close()

    def start(self) -> Busy:
        _config_set(self.conn, "busy-reply-threshold", "lua-time-limit", BUSY_THRESHOLD_MS)
        self._thread.start()
        wait_for(self._refused, 10, what="Redis to answer BUSY")
        return self

    def _refused(self) -> bool:
        try:
            self.conn.ping()
        except redis.exceptions.BusyLoadingError:
            return False  # LOADING, not ours
        except redis.exceptions.ResponseError as err:
            return str(err).startswith("BUSY")
        return False

    def end(self) -> float:
        """Kills the script if it still runs; returns when it ended."""
        while self._thread.is_alive():
            with contextlib.suppress(redis.exceptions.ResponseError):  # NOTBUSY: it ended
                self.conn.script_kill()
            self._thread.join(timeout=0.05)
        _config_set(self.conn, "busy-reply-threshold", "lua-time-limit", self._saved)
        assert self.ended_at is not None
        return self.ended_at


@contextlib.contextmanager
def busy(conn: redis.Redis, seconds: float = 30.0) -> Iterator[Busy]:
    """Redis busy (-BUSY) from entry (BUSY already seen) until the script ends
    by itself after `seconds` or, at the latest, on exit (SCRIPT KILL)."""
    spinning = Busy(conn, seconds).start()
    try:
        yield spinning
    finally:
        spinning.end()


def _config_get(conn: redis.Redis, name: str, old_name: str) -> int:
    for key in (name, old_name):
        for value in conn.config_get(key).values():
            return int(str(value))
    raise AssertionError(f"the server knows neither {name} nor {old_name}")


def _config_set(conn: redis.Redis, name: str, old_name: str, value: int) -> None:
    try:
        conn.config_set(name, value)
    except redis.exceptions.ResponseError:  # Redis 6.2
        conn.config_set(old_name, value)


# --- OOM, READONLY -------------------------------------------------------------------


@contextlib.contextmanager
def out_of_memory(conn: redis.Redis) -> Iterator[None]:
    """Writes refused with -OOM (maxmemory below used memory, noeviction); the
    settings restored on exit."""
    saved = {name: _config_value(conn, name) for name in ("maxmemory", "maxmemory-policy")}
    used = int(conn.info("memory")["used_memory"])
    conn.config_set("maxmemory-policy", "noeviction")
    conn.config_set("maxmemory", max(1, used // 2))
    try:
        yield
    finally:
        conn.config_set("maxmemory", saved["maxmemory"])
        conn.config_set("maxmemory-policy", saved["maxmemory-policy"])


def settled_used_memory(conn: redis.Redis) -> int:
    """used_memory once it has stopped falling for half a second (at most 5 s).
    Soon after a run of writes Redis frees some 100s of KB on its own (idle
    clients' query buffers shrunk, the Lua heap's garbage): a limit set a few
    bytes under the first reading can be under-used again a moment later."""
    readings = [int(conn.info("memory")["used_memory"])]
    for _ in range(50):
        time.sleep(0.1)
        readings.append(int(conn.info("memory")["used_memory"]))
        if len(readings) > 5 and min(readings[-6:-1]) - readings[-1] < 8_000:
            break
    return readings[-1]


def _config_value(conn: redis.Redis, name: str) -> str:
    [value] = conn.config_get(name).values()
    return value.decode() if isinstance(value, bytes) else str(value)


@contextlib.contextmanager
def readonly(conn: redis.Redis) -> Iterator[None]:
    """The server demoted to a replica of a port where nothing listens (bound,
    never listening: connections are refused, no sync ever wipes the data), so
    writes get -READONLY; promoted back with REPLICAOF NO ONE on exit."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as hold:
        hold.bind(("127.0.0.1", 0))
        port = hold.getsockname()[1]
        conn.replicaof("127.0.0.1", port)
        try:
            yield
        finally:
            conn.replicaof("NO", "ONE")


# --- restart, scripts ----------------------------------------------------------------


def fill(conn: redis.Redis, keys: int, value_bytes: int = 64, prefix: str = "filler:") -> None:
    """Writes `keys` filler strings (outside any namespace), then rewrites the AOF so
    they sit in its RDB preamble, where `key-load-delay` slows the next load."""
    value = "x" * value_bytes
    script = "for i = 1, tonumber(ARGV[1]) do redis.call('SET', ARGV[2] .. i, ARGV[3]) end"
    done = 0
    while done < keys:
        batch = min(10_000, keys - done)
        conn.eval(script, 0, batch, f"{prefix}{done}:", value)
        done += batch
    conn.bgrewriteaof()
    wait_for(lambda: _rewritten(conn), 60, what="the AOF rewrite to finish")


def _rewritten(conn: redis.Redis) -> bool:
    info = conn.info("persistence")
    return not info["aof_rewrite_in_progress"] and not info["aof_rewrite_scheduled"]


def restart_with_aof(server: ServerProcess) -> float:
    """SIGKILL, then a restart that replays the append-only file; returns when the
    server accepts connections again (it may still be loading). The server needs
    appendonly and, for a load that takes a while, `fill()` and a load delay."""
    assert server.process is not None
    server.kill(signal.SIGKILL)
    server.socket.unlink(missing_ok=True)  # refused, not a stale socket, until it is up
    server.start()
    return time.time()


def wait_loaded(conn: redis.Redis, timeout_s: float = 60.0) -> float:
    """Waits until the server answers PING (done loading); returns time.time() then."""
    wait_for(lambda: answers(conn), timeout_s, what="Redis to finish loading")
    return time.time()


def flush_scripts(conn: redis.Redis) -> None:
    """The server forgets every function and script (as after a restart without them)."""
    with contextlib.suppress(redis.exceptions.ResponseError):  # no FUNCTION before 7.0
        conn.function_flush("SYNC")
    conn.script_flush("SYNC")


# --- corrupt records -----------------------------------------------------------------

Kind = Literal["bytes", "meta", "data", "pickle", "no-newline", "deep"]
KINDS: tuple[Kind, ...] = ("bytes", "meta", "data", "pickle", "no-newline")
DEEP_LEVELS = 1000


def corrupt_record(conn: redis.Redis, keys: Keys, jid: str, kind: Kind) -> bytes:
    """Rewrites the stored record of job `jid` (put normally, so it is queued) with
    raw HSET; returns what was written:

        bytes       non-UTF-8 bytes, no structure at all
        meta        meta that is not JSON, then the real data
        data        the real meta, then data that is not JSON
        pickle      a pickle of a dict (never to be unpickled)
        no-newline  the real meta with no newline and no data
        deep        the real meta, then data nested DEEP_LEVELS lists deep
    """
    key = keys.key("jobs")
    raw = conn.hget(key, jid)
    assert isinstance(raw, bytes), f"no record for {jid}"
    meta, _, data = raw.partition(b"\n")
    if meta.startswith(b"{"):
        json.loads(meta)  # the record was good before
    else:  # or compact (lua/lib/job.lua): a state letter, then fields
        assert meta[:1] in (b"w", b"s", b"W", b"S"), meta
    bad = {
        "bytes": b"\xff\xfe\x80 not a record \xc3\x28\x00",
        "meta": b"{meta: not json\n" + data,
        "data": meta + b"\n{data: not json",
        "pickle": pickle.dumps({"klass": "os:system", "data": ["rm -rf /"]}),
        "no-newline": meta,
        "deep": meta + b"\n" + deep_json(DEEP_LEVELS),
    }[kind]
    conn.hset(key, jid, bad)
    return bad


def deep_json(levels: int) -> bytes:
    """A JSON object `levels` levels deep: {"a":[[[...]]]}."""
    return b'{"a":' + b"[" * (levels - 1) + b"]" * (levels - 1) + b"}"
