"""The fault rig itself (tests/support/proxy.py, tests/support/redis_faults.py):
each fault really happens to a plain redis-py client, and ends."""

from __future__ import annotations

import json
import threading
import time

import pytest
import redis
from redis.exceptions import ResponseError

from runtime import Client
from runtime.queue.embedded import ServerProcess
from tests.support import redis_faults
from tests.support.proxy import FrameSplitter, Proxy
from tests.support.waiting import stays, wait_for


@pytest.fixture
def server(own: ServerProcess) -> ServerProcess:
    return own


@pytest.fixture
def proxy(own_proxy: Proxy) -> Proxy:
    return own_proxy


def through(proxy: Proxy, timeout_s: float = 2.0) -> redis.Redis:
    """A client through the proxy that does not retry on its own."""
    return redis.Redis.from_url(
        proxy.url,
        socket_timeout=timeout_s,
        socket_connect_timeout=timeout_s,
        retry=redis.retry.Retry(redis.backoff.NoBackoff(), 0),
    )


def test_the_splitter_cuts_requests_and_replies_into_whole_frames() -> None:
    splitter = FrameSplitter()
    stream = b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n+OK\r\n*2\r\n:1\r\n$-1\r\n$5\r\nhello\r\nPING\r\n"
    frames = [f for i in range(len(stream)) for f in splitter.feed(stream[i : i + 1])]
    assert frames == [
        b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n",
        b"+OK\r\n",
        b"*2\r\n:1\r\n$-1\r\n",
        b"$5\r\nhello\r\n",
        b"PING\r\n",
    ]
    assert splitter.buffer == b""


def test_the_proxy_passes_traffic_and_counts_it(proxy: Proxy) -> None:
    conn = through(proxy)
    conn.set("k", "v" * 1000)
    assert conn.get("k") == b"v" * 1000
    assert proxy.stats.accepted == 1 and proxy.stats.open == 1
    assert proxy.stats.bytes_up > 1000 and proxy.stats.bytes_down > 1000
    conn.close()
    wait_for(lambda: proxy.stats.open == 0, 5, what="the link to close")


def test_a_reset_breaks_a_call_in_flight_and_new_connections_work(proxy: Proxy) -> None:
    conn = through(proxy, timeout_s=10)
    errors: list[BaseException] = []

    def wait_in_redis() -> None:
        try:
            conn.blpop(["nothing"], timeout=5)
        except redis.exceptions.RedisError as err:
            errors.append(err)

    waiter = threading.Thread(target=wait_in_redis)
    waiter.start()
    wait_for(lambda: proxy.stats.bytes_up > 0, 5, what="the BLPOP to reach Redis")
    proxy.reset()
    waiter.join(timeout=5)
    assert [type(e) for e in errors] == [redis.exceptions.ConnectionError], errors
    assert "reset" in str(errors[0]).lower() or "closed" in str(errors[0]).lower()
    assert conn.ping(), "a new connection is served"
    assert proxy.stats.resets == 1


def test_a_reset_window_resets_new_connections_until_it_ends(proxy: Proxy) -> None:
    conn = through(proxy)
    assert conn.ping()
    proxy.reset_for(1.0)
    until = time.monotonic() + 1.0
    with pytest.raises(redis.exceptions.ConnectionError):
        conn.ping()
    with pytest.raises(redis.exceptions.ConnectionError):
        conn.ping()  # reconnects, and is reset again
    wait_for(lambda: time.monotonic() > until, 5, what="the window to end")
    assert conn.ping()


def test_a_blackhole_makes_calls_time_out_and_passthrough_heals(proxy: Proxy) -> None:
    conn = through(proxy, timeout_s=0.5)
    assert conn.ping()
    proxy.blackhole()
    with pytest.raises(redis.exceptions.TimeoutError):
        conn.ping()
    with pytest.raises(redis.exceptions.TimeoutError):
        conn.ping()  # a new connection is black-holed too (its handshake succeeds)
    assert proxy.stats.blackholed_bytes > 0
    proxy.passthrough()
    assert conn.ping()


def test_a_delay_holds_each_direction(proxy: Proxy) -> None:
    conn = through(proxy)
    assert conn.ping()
    proxy.delay(up_ms=150, down_ms=150)
    started = time.monotonic()
    assert conn.ping()
    assert time.monotonic() - started >= 0.3
    proxy.passthrough()


def test_a_dropped_reply_leaves_the_write_done_and_the_caller_waiting(
    proxy: Proxy, server: ServerProcess
) -> None:
    conn = through(proxy, timeout_s=0.5)
    direct = redis_faults.connect(server)
    proxy.drop_reply(b"marker-complete")
    assert conn.set("other", "1"), "other requests pass"
    with pytest.raises(redis.exceptions.TimeoutError):
        conn.set("marker-complete", "done")
    assert direct.get("marker-complete") == b"done", "the request reached Redis"
    assert proxy.stats.dropped_replies == 1 and proxy.stats.resets == 0
    assert conn.set("after", "1"), "only one reply is dropped"


def test_a_dropped_reply_in_a_pipeline_drops_only_that_reply(proxy: Proxy) -> None:
    conn = through(proxy, timeout_s=0.5)
    proxy.drop_reply(b"second", commands=(b"SET",))
    proxy.drop_reply(b"never", commands=(b"GET",))  # no GET of it: never dropped
    pipe = conn.pipeline(transaction=False)
    pipe.set("first", "1")
    pipe.set("second", "2")
    pipe.set("third", "3")
    with pytest.raises(redis.exceptions.TimeoutError):
        pipe.execute()
    assert proxy.stats.dropped_replies == 1
    assert conn.mget("first", "second", "third", "never") == [b"1", b"2", b"3", None]


def test_busy_gives_busy_until_the_script_is_killed(server: ServerProcess) -> None:
    conn = redis_faults.connect(server)
    with redis_faults.busy(conn, seconds=30), pytest.raises(ResponseError, match=r"^BUSY"):
        conn.set("k", "v")
    assert conn.set("k", "v")
    assert conn.config_get("busy-reply-threshold") == {"busy-reply-threshold": "5000"}


def test_busy_ends_by_itself_after_its_seconds(server: ServerProcess) -> None:
    conn = redis_faults.connect(server)
    spinning = redis_faults.Busy(conn, seconds=0.5).start()
    wait_for(lambda: redis_faults.answers(conn), 5, what="the script to end by itself")
    assert spinning.end() is not None and spinning.error is None


def test_out_of_memory_refuses_writes_and_is_undone(server: ServerProcess) -> None:
    conn = redis_faults.connect(server)
    with redis_faults.out_of_memory(conn):
        with pytest.raises(redis.exceptions.OutOfMemoryError):
            conn.set("k", "v")
        assert conn.get("k") is None, "reads still work"
    assert conn.set("k", "v")
    assert conn.config_get("maxmemory") == {"maxmemory": "0"}


def test_readonly_refuses_writes_keeps_data_and_is_undone(server: ServerProcess) -> None:
    conn = redis_faults.connect(server)
    conn.set("kept", "yes")
    with redis_faults.readonly(conn):
        with pytest.raises(redis.exceptions.ReadOnlyError):
            conn.set("k", "v")
        # the replica tries to reach its primary meanwhile; no sync may wipe the data
        stays(lambda: conn.get("kept") == b"yes", 1.5, interval_s=0.1, what="the data kept")
    assert conn.set("k", "v")
    assert conn.get("kept") == b"yes", "no sync wiped the data"
    assert conn.info("replication")["role"] == "master"


@pytest.mark.slow
def test_a_restart_with_a_large_aof_is_refused_then_loading_then_back() -> None:
    with redis_faults.private_server(appendonly=True, load_delay_us=50) as server:
        conn = redis_faults.connect(server)
        conn.set("kept", "yes")
        redis_faults.fill(conn, keys=40_000)
        seen: set[str] = set()
        redis_faults.restart_with_aof(server)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                conn.ping()
                break
            except redis.exceptions.BusyLoadingError:
                seen.add("loading")
            except redis.exceptions.ConnectionError:
                seen.add("refused")
            time.sleep(0.01)
        assert "loading" in seen, seen
        assert conn.get("kept") == b"yes"
        assert conn.dbsize() == 40_001


def test_flush_scripts_forgets_functions_and_scripts(server: ServerProcess) -> None:
    conn = redis_faults.connect(server)
    sha = conn.script_load("return 1")
    client = Client.from_url(server.url, namespace="rig")
    client.conn.now_ms()  # loads the library
    assert conn.function_list()
    redis_faults.flush_scripts(conn)
    assert conn.script_exists(sha) == [False]
    assert conn.function_list() == []
    client.close()


@pytest.mark.parametrize("kind", [*redis_faults.KINDS, "deep"])
def test_corrupt_record_rewrites_a_queued_job(server: ServerProcess, kind: str) -> None:
    client = Client.from_url(server.url, namespace="rig")
    jid = client.queue("q").put("tests.integration.jobs:noop", {"n": 1})
    conn = redis_faults.connect(server)
    written = redis_faults.corrupt_record(conn, client.keys, jid, kind)  # type: ignore[arg-type]
    assert conn.hget(client.keys.key("jobs"), jid) == written
    client.close()
    meta, newline, data = written.partition(b"\n")
    if kind == "deep":
        assert meta[:1] == b"w", "a waiting job's own meta (compact: lua/lib/job.lua)"
        assert data.count(b"[") == redis_faults.DEEP_LEVELS - 1
        return
    try:
        decoded = (json.loads(meta), json.loads(data)) if newline else None
    except ValueError:  # not JSON (or not UTF-8)
        decoded = None
    assert decoded is None, "the record does not decode"
