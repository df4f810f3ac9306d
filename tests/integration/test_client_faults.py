"""Both clients against real Redis conditions: every failure arrives as a typed
runtime error (RedisTransient with its condition for what passes), the sync
Client rides out short spells on calls safe to repeat, and the master's client
notices a silent link within its command timeout.

Conditions that change the server run on a private server (redis_faults);
link faults go through the fault proxy in front of the session's server."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import AbstractContextManager as ContextManager
from typing import Any, TypeVar

import pytest
import redis
import uvloop

from runtime.errors import (
    ConfigError,
    Error,
    LeaseLost,
    RedisCondition,
    RedisTransient,
    RedisUnavailable,
)
from runtime.queue.aio import MasterClient
from runtime.queue.api.client import Client
from runtime.queue.embedded import ServerProcess
from runtime.queue.faults import classify, from_redis
from runtime.queue.keys import Keys
from runtime.queue.leases import Outcomes
from tests.support import redis_faults
from tests.support.proxy import Proxy

T = TypeVar("T")
J = "tests.integration.jobs:noop"


def namespace() -> str:
    return "t" + uuid.uuid4().hex[:12]


def run(awaitable: Awaitable[T], deadline_s: float = 30.0) -> T:
    async def bounded() -> T:
        return await asyncio.wait_for(awaitable, deadline_s)

    return asyncio.run(bounded())


def run_on_uvloop(awaitable: Awaitable[T], deadline_s: float = 30.0) -> T:
    """As `run`, on the event loop a master runs (uvloop fails differently)."""

    async def bounded() -> T:
        return await asyncio.wait_for(awaitable, deadline_s)

    return uvloop.run(bounded())


async def seen_closed(pool: Any, deadline_s: float = 5.0) -> None:
    """Until every connection idle in `pool` has seen its peer go (its transport is
    closed): the reset reached the client. Called between calls, so the pool's
    connections in use are the ones the client keeps aside (MasterClient._take)."""
    end = time.monotonic() + deadline_s

    def closed(conn: Any) -> bool:
        return conn._writer is None or conn._writer.is_closing()

    while not all(closed(c) for c in [*pool._available_connections, *pool._in_use_connections]):
        assert time.monotonic() < end, "the client never saw the reset"
        await asyncio.sleep(0.01)


@pytest.fixture
def server(own: ServerProcess) -> ServerProcess:
    return own


@pytest.fixture
def proxy(default_server: ServerProcess) -> Iterator[Proxy]:
    with Proxy(str(default_server.socket)) as running:
        yield running


def transient(err: BaseException, condition: RedisCondition) -> bool:
    return isinstance(err, RedisTransient) and err.condition is condition


async def master_call(url: str, ns: str, what: str, **options: Any) -> Any:
    """One call of a fresh master's client; what it raised, else what it returned."""
    aio = MasterClient(url, Keys(ns), "host-1", **options)
    try:
        if what == "connect":
            return await aio.connect()
        if what == "exchange":
            out = Outcomes()
            out.add_complete("j-none", "t")
            return await aio.exchange(out, 1, ["q"], "ordered")
        return await aio.heartbeat({"j-none": "t"})
    except Error as err:
        return err
    finally:
        await aio.close()


# --- server states that pass ------------------------------------------------------------


def test_busy_redis_is_a_busy_condition_for_both_clients(server: ServerProcess) -> None:
    ns = namespace()
    client = Client.from_url(server.url, namespace=ns, retry_for_s=0)
    jid = client.queue("q").put(J)
    with redis_faults.busy(redis_faults.connect(server), seconds=30):
        with pytest.raises(RedisTransient) as refused:
            client.cancel(jid)
        assert refused.value.condition is RedisCondition.BUSY
        assert "(busy)" in str(refused.value)
        for what in ("exchange", "heartbeat"):
            assert transient(run(master_call(server.url, ns, what)), RedisCondition.BUSY)
    assert client.cancel(jid) == [jid]  # refused, not done: nothing changed meanwhile


def test_a_repeatable_call_rides_out_a_short_busy_spell(server: ServerProcess) -> None:
    client = Client.from_url(server.url, namespace=namespace(), retry_for_s=10)
    with redis_faults.busy(redis_faults.connect(server), seconds=0.5):
        jid = client.queue("q").put(J)  # sent during BUSY, retried until it ends
        counts = client.queue("q").counts()
    assert counts["waiting"] == 1
    assert client.get_job(jid) is not None


@pytest.mark.parametrize(
    ("fault", "condition"),
    [
        (redis_faults.out_of_memory, RedisCondition.OOM),
        (redis_faults.readonly, RedisCondition.READONLY),
    ],  # a demoted server
)
def test_a_server_that_refuses_writes_refuses_the_operations_with_its_condition(
    server: ServerProcess, fault: Callable[[Any], ContextManager[None]], condition: RedisCondition
) -> None:
    ns = namespace()
    client = Client.from_url(server.url, namespace=ns, retry_for_s=0.2)
    client.queue("q").put(J)
    with fault(redis_faults.connect(server)):
        with pytest.raises(RedisTransient) as refused:
            client.queue("q").put(J)
        assert refused.value.condition is condition
        # functions are refused whole (none is flagged no-writes); plain reads are served
        assert client.queues() == ["q"] and client.admin.config_get()["heartbeat"] > 0
        for what in ("exchange", "heartbeat"):
            assert transient(run(master_call(server.url, ns, what)), condition)
        lost = run(master_call(server.url, ns, "connect"))  # FUNCTION LOAD refused too
        assert transient(lost, RedisCondition.SCRIPTS) and f"({condition})" in str(lost)
    assert client.queue("q").put(J)


def test_a_server_loading_its_data_is_a_loading_condition() -> None:
    with redis_faults.private_server(appendonly=True, load_delay_us=50) as server:
        conn = redis_faults.connect(server)
        redis_faults.fill(conn, keys=20_000)  # about 1 s of -LOADING
        ns = namespace()
        redis_faults.restart_with_aof(server)
        client = Client.from_url(server.url, namespace=ns, retry_for_s=0)
        with pytest.raises(RedisUnavailable) as refused:
            client.queue("q").counts()
        assert transient(refused.value, RedisCondition.LOADING), refused.value
        patient = Client.from_url(server.url, namespace=ns, retry_for_s=30)
        assert patient.queue("q").counts()["waiting"] == 0  # retried until loaded
        redis_faults.wait_loaded(conn)


def test_a_refused_connection_is_a_connection_condition() -> None:
    url = "redis://user:s3cret@127.0.0.1:1/0"
    client = Client.from_url(url, retry_for_s=0)
    with pytest.raises(RedisTransient) as refused:
        client.queue("q").counts()
    assert refused.value.condition is RedisCondition.CONNECTION
    assert "s3cret" not in str(refused.value) and "user:***@" in str(refused.value)
    found = run(master_call(url, "ns", "connect"))
    assert transient(found, RedisCondition.CONNECTION) and "s3cret" not in str(found)


def test_lost_functions_and_scripts_are_loaded_again_by_both_clients(
    server: ServerProcess,
) -> None:
    ns = namespace()
    client = Client.from_url(server.url, namespace=ns)
    client.queue("q").put(J)

    async def pop_after_flush() -> int:
        aio = MasterClient(server.url, Keys(ns), "host-1")
        try:
            await aio.connect()
            redis_faults.flush_scripts(redis_faults.connect(server))
            done = await aio.exchange(Outcomes(), 1, ["q"], "ordered")
            assert done.popped is not None
            [job] = done.popped.jobs
            redis_faults.flush_scripts(redis_faults.connect(server))
            assert (await aio.heartbeat({job.jid: job.token})).lost == set()
            out = Outcomes()
            out.add_complete(job.jid, job.token)
            redis_faults.flush_scripts(redis_faults.connect(server))
            return len((await aio.exchange(out, None, [], "ordered")).states)
        finally:
            await aio.close()

    assert run(pop_after_flush()) == 1
    redis_faults.flush_scripts(redis_faults.connect(server))
    assert client.queue("q").counts()["running"] == 0


def test_the_grace_call_goes_first_in_the_same_round_trip(server: ServerProcess) -> None:
    ns = namespace()
    client = Client.from_url(server.url, namespace=ns)
    client.queue("q").put(J)

    async def after_outage() -> tuple[int, set[str]]:
        aio = MasterClient(server.url, Keys(ns), "host-1")
        try:
            done = await aio.exchange(Outcomes(), 1, ["q"], "ordered", outage_ms=1500)
            assert done.popped is not None
            [job] = done.popped.jobs
            renewed = await aio.heartbeat({job.jid: job.token}, outage_ms=200)
            return len(done.popped.jobs), renewed.lost
        finally:
            await aio.close()

    assert run(after_outage()) == (1, set())


# --- the link -----------------------------------------------------------------------------


def test_a_silent_link_is_noticed_within_the_command_timeout(
    proxy: Proxy, plain_client: Client
) -> None:
    ns = plain_client.keys.namespace

    async def silent() -> list[Any]:
        aio = MasterClient(proxy.url, Keys(ns), "host-1")  # 5 s by default
        try:
            await aio.connect()
            aio.set_command_timeout(0.3)  # a third of a 0.9 s lease
            proxy.blackhole()
            found = []
            for call in (aio.heartbeat({"j": "t"}), aio.wait_for_work(["q"], 0.5)):
                try:
                    await asyncio.wait_for(call, 4.0)  # far below 5 s: the new timeout held
                except Error as err:
                    found.append(err)
            return found
        finally:
            proxy.passthrough()
            await aio.close()

    found = run(silent())
    assert len(found) == 2 and all(transient(e, RedisCondition.TIMEOUT) for e in found), found


def test_an_idle_blocking_read_ends_with_nothing_and_the_link_stays_good(
    proxy: Proxy, plain_client: Client
) -> None:
    async def idle() -> tuple[Any, Any]:
        aio = MasterClient(proxy.url, plain_client.keys, "host-1", command_timeout_s=0.2)
        try:
            nothing = await aio.wait_for_work(["q"], 0.5)  # longer than the command timeout
            plain_client.queue("q").put(J)
            woken = await aio.wait_for_work(["q"], 5.0)
            return nothing, woken
        finally:
            await aio.close()

    nothing, woken = run(idle())
    assert nothing is None
    assert woken is not None and woken[0] == plain_client.keys.wake("q")


def test_a_reset_during_a_call_is_a_connection_condition_and_the_next_call_reconnects(
    proxy: Proxy, plain_client: Client
) -> None:
    async def reset() -> tuple[Any, Any]:
        aio = MasterClient(proxy.url, plain_client.keys, "host-1")
        try:
            await aio.connect()
            proxy.drop_reply(b"heartbeat_")
            call = asyncio.ensure_future(aio.heartbeat({"j": "t"}))
            await asyncio.sleep(0.2)  # a named window: the request is in flight
            proxy.reset()
            try:
                await call
                first: Any = None
            except Error as err:
                first = err
            return first, await aio.heartbeat({"j": "t"})
        finally:
            await aio.close()

    first, second = run(reset())
    assert transient(first, RedisCondition.CONNECTION), first
    assert second.lost == {"j"}


@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
def test_a_connection_reset_while_idle_is_never_handed_out_again(
    proxy: Proxy, plain_client: Client, loop: str
) -> None:
    """A reset, then quiet: the link is healthy, so the next calls succeed (each on a
    fresh connection), however long the reset connections idled in the pool."""

    async def reset_then_quiet() -> tuple[list[Any], int]:
        aio = MasterClient(proxy.url, plain_client.keys, "host-1")
        try:
            await aio.connect()
            await aio.wait_for_work(["q"], 0.05)  # the blocking connection made too
            proxy.reset()
            await seen_closed(aio.redis.connection_pool)
            await seen_closed(aio.blocking.connection_pool)
            accepted = proxy.stats.accepted
            found: list[Any] = []
            for call in (
                aio.heartbeat({"j": "t"}),
                aio.wait_for_work(["q"], 0.05),
                aio.exchange(Outcomes(), 1, ["q"], "ordered"),
            ):
                try:
                    found.append(await call)
                except Error as err:
                    found.append(err)
            return found, proxy.stats.accepted - accepted
        finally:
            await aio.close()

    found, connected = (run_on_uvloop if loop == "uvloop" else run)(reset_then_quiet())
    assert not [f for f in found if isinstance(f, Error)], found
    assert connected == 2  # one fresh connection per pool


def test_a_write_on_a_connection_reset_under_uvloop_is_a_connection_condition(
    proxy: Proxy,
) -> None:
    """uvloop refuses the write with RuntimeError ("the handler is closed"), not the
    OSError of asyncio's loop: it is the same lost connection, classified so."""

    async def write_after_reset() -> BaseException:
        client = redis.asyncio.Redis.from_url(proxy.url)
        pool = client.connection_pool
        try:
            conn = await pool.get_connection()  # type: ignore[no-untyped-call]
            await pool.release(conn)
            proxy.reset()
            await seen_closed(pool)
            try:
                await conn.send_packed_command([b"*1\r\n$4\r\nPING\r\n"], check_health=False)
            except Exception as err:  # noqa: BLE001 - what the loop raised is the subject
                return err
            raise AssertionError("a write on a reset connection went through")
        finally:
            await client.aclose()

    err = run_on_uvloop(write_after_reset())
    assert isinstance(err, RuntimeError) and "handler is closed" in str(err), repr(err)
    assert from_redis(err)
    assert transient(classify(err, proxy.url), RedisCondition.CONNECTION)
    assert not from_redis(RuntimeError("a bug"))


def test_sent_at_is_taken_after_the_connection_is_up(proxy: Proxy, plain_client: Client) -> None:
    async def slow_link() -> tuple[float, float, float]:
        aio = MasterClient(proxy.url, plain_client.keys, "host-1")
        try:
            proxy.delay(up_ms=300)  # the handshake waits too
            before = time.monotonic()
            renewed = await aio.heartbeat({"j": "t"})
            return before, renewed.sent_at, time.monotonic()
        finally:
            proxy.passthrough()
            await aio.close()

    before, sent_at, after = run(slow_link())
    assert sent_at - before >= 0.25  # the connect and its handshake came first
    assert after - sent_at >= 0.25  # the request itself was delayed too


def test_a_put_whose_reply_was_lost_is_retried_and_answers_its_jid(
    proxy: Proxy, plain_client: Client
) -> None:
    ns = plain_client.keys.namespace
    client = Client.from_url(proxy.url, namespace=ns, retry_for_s=10, socket_timeout=0.5)
    client.queue("q").counts()  # connected, scripts loaded
    proxy.drop_reply(b"put_")
    jid = client.queue("q").put(J, {"n": 1})  # the first try landed; its reply did not
    assert proxy.stats.dropped_replies == 1
    assert plain_client.queue("q").counts()["waiting"] == 1
    assert plain_client.get_job(jid) is not None


def test_a_cancel_whose_reply_was_lost_is_not_sent_again(
    proxy: Proxy, plain_client: Client
) -> None:
    ns = plain_client.keys.namespace
    jid = plain_client.queue("q").put(J)
    client = Client.from_url(proxy.url, namespace=ns, retry_for_s=10, socket_timeout=0.5)
    client.queue("q").counts()
    proxy.drop_reply(b"cancel_")
    with pytest.raises(RedisTransient) as lost:
        client.cancel(jid)
    assert lost.value.condition is RedisCondition.TIMEOUT
    left = plain_client.get_job(jid)  # it was done (its tombstone): only the answer was lost
    assert left is not None and left.state == "cancelled"


def test_reports_with_their_token_are_retried_through_a_lost_reply(
    proxy: Proxy, plain_client: Client
) -> None:
    ns = plain_client.keys.namespace
    plain_client.queue("q").put(J)
    client = Client.from_url(proxy.url, namespace=ns, retry_for_s=10, socket_timeout=0.5)
    [job] = client.queue("q").pop(1)
    proxy.drop_reply(b"complete_")
    assert job.complete() == "complete"  # the repeat with the same token answers done
    with pytest.raises(LeaseLost):
        client.leases.heartbeat(job.worker or "", {job.jid: job.token or ""}, strict=True)


def test_the_master_reads_shared_settings_and_counts_through_the_boundary(
    plain_client: Client,
) -> None:
    plain_client.admin.config_set("size-warning-every", 30)

    async def read() -> tuple[Any, Any, Any]:
        aio = MasterClient(plain_client.url, plain_client.keys, "host-1")
        try:
            unset = await aio.setting("heartbeat")
            try:
                await aio.setting("no-such-setting")
                unknown: Any = None
            except ConfigError as err:
                unknown = err
            return await aio.setting("size-warning-every"), unset, unknown
        finally:
            await aio.close()

    stored, unset, unknown = run(read())
    assert (float(stored), unset) == (30.0, None)
    assert isinstance(unknown, ConfigError)
