"""The application's asyncio client (runtime.AsyncClient, issue 29) against real
Redis: what Client does, awaited; a wait that is the same plan as Client.wait
(one table for both); a wait that sends a handful of commands, not a poll;
cancelled waits that give their connections back; an outage that fails fast
and a client that goes on once Redis is back; a thousand coroutines putting
and awaiting jobs of a running worker while a 1 ms ticker runs."""

from __future__ import annotations

import asyncio
import signal
import threading
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
import uvloop

from runtime import AsyncClient, Client, JobExists, NoSuchJob, RedisUnavailable
from runtime.errors import BadArgument, Error, WrongState
from runtime.queue.adriver import Slots
from runtime.queue.api.holder import Lease
from runtime.queue.embedded import ServerProcess
from runtime.vocabulary import JobState
from tests.integration import typed_jobs
from tests.support.master import MasterProcess
from tests.support.waiting import wait_for

T = TypeVar("T")
J = "tests.integration.jobs:noop"
W = "host-1"


def namespace() -> str:
    return "t" + uuid.uuid4().hex[:12]


def run(work: Callable[[], Awaitable[T]], deadline_s: float = 60.0, loop: str = "asyncio") -> T:
    """Runs a coroutine function on a fresh event loop (asyncio's or uvloop's),
    bounded by a deadline so a hang fails the test instead of stalling it."""

    async def bounded() -> T:
        return await asyncio.wait_for(work(), deadline_s)

    return uvloop.run(bounded()) if loop == "uvloop" else asyncio.run(bounded())


def outcome(call: Callable[[], Any]) -> tuple[Any, ...]:
    try:
        return ("returned", call())
    except Error as err:
        return ("raised", type(err).__name__, str(err))


def registered(client: Client, jid: str, waiters: int) -> bool:
    """`waiters` waiters registered on the job (wait.lua counts them in meta.wn)."""
    job = client.redis.hget(client.keys.key("jobs"), jid)
    return job is not None and f'"wn":{waiters}'.encode() in job


# --- what Client does, awaited ---------------------------------------------------------


def test_an_async_client_puts_reads_and_cancels_as_client_does(plain_client: Client) -> None:
    ns, url = plain_client.keys.namespace, plain_client.url

    async def work() -> None:
        async with AsyncClient.from_url(url, namespace=ns) as ac:
            q = ac.queue("mail")
            jid = await q.put(J, {"to": "a"}, priority=3, tags=["x"], delay=60, retries=2)
            job = await ac.get_job(jid)
            assert job is not None and (job.queue, job.priority, job.state) == (
                "mail",
                3,
                "scheduled",
            )
            assert list(job.tags) == ["x"] and job.data == {"to": "a"}
            same = await q.put(J, {"to": "b"}, unique_key="k1")
            assert await q.put(J, {"to": "c"}, unique_key="k1") == same
            many = await ac.put_many([q.spec(J, {"n": i}) for i in range(3)])
            found = await ac.get_jobs([*many, "nope"])
            assert [j.data["n"] if j else None for j in found] == [0, 1, 2, None]
            assert (await ac.status("mail"))["mail"]["waiting"] == 4
            mine, theirs = (await ac.status())["mail"], plain_client.status()["mail"]
            assert {k: v for k, v in mine.items() if k != "oldest_waiting_ms"} == {
                k: v for k, v in theirs.items() if k != "oldest_waiting_ms"
            }
            assert await ac.queues() == ["mail"]
            assert await ac.cancel(many[0], "nope") == [many[0]]
            tomb = await ac.get_job(many[0])  # what a cancel leaves (docs/semantics.md)
            assert tomb is not None and tomb.state == JobState.CANCELLED
            with pytest.raises(JobExists):
                await q.put(J, {}, jid=many[1])
            with pytest.raises(BadArgument):
                await q.put(J, {}, priority="high")  # type: ignore[arg-type]
            assert await ac.failed() == {}

    run(work)
    assert plain_client.get_job(plain_client.queue("mail").peek(1)[0].jid) is not None


def test_typed_jobs_put_through_an_async_client_checked_as_put(plain_client: Client) -> None:
    ns, url = plain_client.keys.namespace, plain_client.url

    async def work() -> str:
        async with AsyncClient.from_url(url, namespace=ns) as ac:
            with pytest.raises(BadArgument, match="name"):
                await typed_jobs.greet.using(ac).aput(nme="x", path="/tmp/x")  # type: ignore[call-arg]
            with pytest.raises(WrongState, match="aput"):
                typed_jobs.greet.using(ac).put(name="x", path="/tmp/x")
            return await typed_jobs.greet.using(ac).options(priority=2).aput(name="x", path="/p")

    jid = run(work)
    job = plain_client.get_job(jid)
    assert job is not None and job.klass == typed_jobs.greet.klass and job.priority == 2
    assert job.data == {"name": "x", "path": "/p"} and job.queue == "typed"
    with pytest.raises(WrongState, match="AsyncClient"):
        run(lambda: typed_jobs.greet.using(plain_client).aput(name="x", path="/p"))


def test_shards_is_taken_by_runtime_never_passed_to_redis(plain_client: Client) -> None:
    ns = plain_client.keys.namespace
    with Client.from_url(plain_client.url, namespace=ns, shards="") as client:
        assert client.queue("q").put(J) and client.status()["q"]["waiting"] == 1

    async def work() -> int:
        async with AsyncClient.from_url(plain_client.url, namespace=ns, shards="") as ac:
            return int((await ac.status("q"))["q"]["waiting"])

    assert run(work) == 1


# --- waiting: one table over both clients ------------------------------------------------


def end_it(how: str, client: Client, lease: Lease) -> None:
    if how == "completed":
        lease.complete(result={"sent": True})
    elif how == "failed":
        lease.fail("app.Bounced", "no such address")
    elif how == "cancelled":
        client.cancel(lease.jid)


WAITS = {  # how the job ends -> what both waits answer
    "completed": ("returned", {"sent": True}),
    "failed": ("raised", "JobFailed", "job j1 failed (app.Bounced): no such address"),
    "cancelled": ("raised", "JobCancelled", "job j1 was cancelled (by api)"),
    "missing": ("raised", "NoSuchJob", "no job j1"),
    "timed-out": ("raised", "WaitTimeout", "job j1 did not end within 0.3 s"),
}


@pytest.mark.parametrize("how", list(WAITS))
def test_async_wait_answers_as_client_wait(plain_client: Client, how: str) -> None:
    """Both waits on the same job at once; the job then ends `how`."""
    lease = None
    if how != "missing":
        plain_client.queue("q").put(J, {}, jid="j1", retries=0)
        [lease] = plain_client.queue("q").pop(1, worker=W)
    timeout = 0.3 if how == "timed-out" else 30
    answers: dict[str, tuple[Any, ...]] = {}

    def sync_wait() -> None:
        answers["Client"] = outcome(lambda: plain_client.wait("j1", timeout=timeout))

    def async_wait() -> None:
        async def waited() -> Any:
            async with AsyncClient.from_url(
                plain_client.url, namespace=plain_client.keys.namespace
            ) as ac:
                return await ac.wait("j1", timeout=timeout)

        answers["AsyncClient"] = outcome(lambda: run(waited))

    threads = [threading.Thread(target=f, daemon=True) for f in (sync_wait, async_wait)]
    for thread in threads:
        thread.start()
    if lease is not None and how != "timed-out":
        wait_for(lambda: registered(plain_client, "j1", 2), what="both waiters to register")
        end_it(how, plain_client, lease)
    for thread in threads:
        thread.join(30)
    assert answers == {"Client": WAITS[how], "AsyncClient": WAITS[how]}


SENT = ("fcall", "fcall_ro", "evalsha", "eval", "blpop", "ping", "hello")  # not run by scripts


def commands_sent(client: Client) -> int:
    """The commands clients sent so far, as counted by INFO commandstats (which
    counts the commands scripts run too: those are left out)."""
    stats = client.redis.info("commandstats")
    return sum(int(stats.get(f"cmdstat_{name}", {}).get("calls", 0)) for name in SENT)


def test_a_three_second_job_awaited_sends_a_handful_of_commands(own: ServerProcess) -> None:
    """Not a poll: the waiter sends wait, BLPOP, wait (and its connection's
    hello); counted on a server of the test's own, where nothing else runs."""
    client = Client.from_url(own.url, namespace=namespace())
    client.queue("q").put(J, {}, jid="j1")
    [lease] = client.queue("q").pop(1, worker=W)

    async def work() -> tuple[Any, int]:
        async with AsyncClient.from_url(own.url, namespace=client.keys.namespace) as ac:
            await ac.status()  # connected, the functions loaded
            before = commands_sent(client)
            timer = threading.Timer(3.0, lambda: lease.complete(result=3))
            timer.start()
            result = await ac.wait("j1", timeout=30)
            timer.join()
            return result, commands_sent(client) - before

    result, sent = run(work)
    # the waiter's wait, BLPOP, wait and the completion: a 10 ms poll would be ~300
    assert result == 3 and sent <= 6, sent
    client.close()


def connected(client: Client) -> int:
    return int(client.redis.info("clients")["connected_clients"])


def blocked(client: Client) -> int:
    return int(client.redis.info("clients")["blocked_clients"])


def test_a_thousand_waits_share_one_blocking_read_and_cancelled_leave_none(
    own: ServerProcess,
) -> None:
    """Waits on ten jobs, a hundred each (a job wakes up to 100 waiters at once):
    one BLPOP serves them all, on one connection beside the pool's; cancelled,
    they leave the pool's connections only."""
    client = Client.from_url(own.url, namespace=namespace())
    jids = [client.queue("q").put(J, {}) for _ in range(10)]
    pool = 4

    async def work() -> Any:
        async with AsyncClient.from_url(
            own.url, namespace=client.keys.namespace, max_connections=pool
        ) as ac:
            await ac.status()
            baseline = connected(client)  # this client's and the AsyncClient's first
            waits = [asyncio.create_task(ac.wait(jid)) for jid in jids for _ in range(100)]
            while not all(registered(client, jid, 100) for jid in jids):
                await asyncio.sleep(0.05)  # the run's deadline bounds this
            while (blocking := blocked(client)) < 1:
                await asyncio.sleep(0.05)
            assert blocking == 1, "one BLPOP for the thousand waits"
            assert connected(client) <= baseline + pool  # the pool's, and the waiter's
            for task in waits:
                task.cancel()
            ended = await asyncio.gather(*waits, return_exceptions=True)
            assert all(isinstance(e, asyncio.CancelledError) for e in ended)
            while blocked(client) > 0 or connected(client) > baseline + pool - 1:
                await asyncio.sleep(0.05)  # the waiter's connection is dropped at once
            jid = await ac.queue("q").put(J, {})  # and the client goes on
            return (await ac.get_job(jid)) is not None

    assert run(work, deadline_s=20) is True
    client.close()


def test_a_wait_on_a_client_closed_under_it_raises_wrong_state(plain_client: Client) -> None:
    plain_client.queue("q").put(J, {}, jid="j1")

    async def work() -> None:
        ac = AsyncClient.from_url(plain_client.url, namespace=plain_client.keys.namespace)
        waiting = asyncio.create_task(ac.wait("j1", timeout=60))
        while not ac.conn.waiter.waits:  # registered, and on the shared BLPOP
            await asyncio.sleep(0.02)
        await ac.aclose()
        with pytest.raises(WrongState, match="closed while waiting"):
            await waiting

    run(work, deadline_s=20)


def test_an_outage_fails_fast_and_clearly_and_the_same_client_recovers(
    own: ServerProcess,
) -> None:
    ns = namespace()

    async def work() -> list[str]:
        async with AsyncClient.from_url(own.url, namespace=ns, retry_for_s=0.5) as ac:
            jid = await ac.queue("q").put(J, {})
            own.kill()
            seen = []
            for call in (
                lambda: ac.queue("q").put(J, {}),
                lambda: ac.get_job(jid),
                lambda: ac.wait(jid, timeout=5),
                ac.status,
            ):
                with pytest.raises(RedisUnavailable) as raised:
                    await asyncio.wait_for(call(), 30)  # never hangs
                seen.append(str(raised.value))
            own.start()
            again = await ac.queue("q").put(J, {})  # the server came back empty
            assert (await ac.get_job(again)) is not None
            assert await ac.message_status(again) == "queued"
            return seen

    seen = run(work)
    assert all("Redis" in text for text in seen), seen


def test_waits_on_a_killed_server_end_and_the_client_reconnects(own: ServerProcess) -> None:
    client = Client.from_url(own.url, namespace=namespace())
    client.queue("q").put(J, {}, jid="j1")

    async def work() -> bool:
        async with AsyncClient.from_url(
            own.url, namespace=client.keys.namespace, retry_for_s=0.2
        ) as ac:
            waiting = asyncio.create_task(ac.wait("j1", timeout=60))
            while not registered(client, "j1", 1):
                await asyncio.sleep(0.02)
            own.kill()
            with pytest.raises(RedisUnavailable):
                await waiting
            own.start()
            return await ac.get_job("j1") is None  # gone with the server's memory

    assert run(work) is True


# --- a thousand coroutines and a ticker, on a running worker ---------------------------------


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_a_thousand_coroutines_put_and_await_while_the_loop_keeps_ticking(
    default_server: ServerProcess, workdir: Path, loop: str
) -> None:
    """All results right; the ticker's largest gap is printed, not asserted
    (bench/async_client.py measures it)."""
    ns = namespace()
    master = MasterProcess(default_server, ns, workdir, "echo", "--concurrency", "2").start()
    try:

        async def work() -> tuple[list[Any], float]:
            gaps: list[float] = []
            stop = asyncio.Event()

            async def tick() -> None:
                last = time.monotonic()
                while not stop.is_set():
                    await asyncio.sleep(0.001)
                    now = time.monotonic()
                    gaps.append(now - last)
                    last = now

            async with AsyncClient.from_url(default_server.url, namespace=ns) as ac:

                async def one(i: int) -> Any:
                    jid = await ac.queue("echo").put("tests.integration.jobs:echo", {"i": i})
                    return await ac.wait(jid, timeout=120)

                ticker = asyncio.create_task(tick())
                results = await asyncio.gather(*(one(i) for i in range(1000)))
                stop.set()
                await ticker
            return list(results), max(gaps)

        results, gap = run(work, deadline_s=180, loop=loop)
        assert results == [{"i": i} for i in range(1000)]
        print(f"largest ticker gap on {loop}: {gap * 1000:.1f} ms")
    finally:
        master.close()


def test_no_such_job_for_a_jid_no_namespace_holds(plain_client: Client) -> None:
    async def work() -> None:
        async with AsyncClient.from_url(
            plain_client.url, namespace=plain_client.keys.namespace
        ) as ac:
            with pytest.raises(NoSuchJob):
                await ac.wait("never-put", timeout=1)
            assert await ac.get_job("never-put") is None
            assert await ac.message_status("never-put") is None

    run(work)


def test_a_frozen_server_is_an_error_within_the_timeout_not_a_hang(own: ServerProcess) -> None:
    """SIGSTOP: the server holds its connections and answers nothing."""
    process = own.process
    assert process is not None
    ns = namespace()

    async def work() -> str:
        async with AsyncClient.from_url(
            own.url, namespace=ns, timeout_s=0.5, retry_for_s=0.2
        ) as ac:
            jid = await ac.queue("q").put(J, {})
            process.send_signal(signal.SIGSTOP)
            try:
                with pytest.raises(RedisUnavailable) as raised:
                    await asyncio.wait_for(ac.get_job(jid), 30)  # the deadline: never hangs
                with pytest.raises(RedisUnavailable):
                    await asyncio.wait_for(ac.wait(jid, timeout=60), 30)
            finally:
                process.send_signal(signal.SIGCONT)
            job = await ac.get_job(jid)  # the same client goes on
            assert job is not None
            return str(raised.value)

    message = run(work)
    assert "did not answer in time" in message, message


def test_calls_queued_for_a_slot_on_a_frozen_server_raise_and_leave_no_slot_taken(
    own: ServerProcess,
) -> None:
    """Forty puts through two slots while the server is stopped: the two in flight
    time out, the thirty-eight queued behind them raise too once no call has
    ended for timeout_s (not a hang); forty more queued and then cancelled give
    back every slot they were handed, so the client goes on at full width."""
    process = own.process
    assert process is not None
    ns = namespace()

    async def work() -> tuple[list[Any], int]:
        async with AsyncClient.from_url(
            own.url, namespace=ns, timeout_s=0.5, retry_for_s=0.2, max_connections=2
        ) as ac:
            await ac.status()
            process.send_signal(signal.SIGSTOP)
            try:
                puts = [asyncio.create_task(ac.queue("q").put(J, {})) for _ in range(40)]
                ended = await asyncio.gather(*puts, return_exceptions=True)
            finally:
                process.send_signal(signal.SIGCONT)
            queued = [asyncio.create_task(ac.queue("q").put(J, {})) for _ in range(40)]
            await asyncio.sleep(0)  # the first two hold slots, the rest wait for one
            for task in queued:
                task.cancel()
            await asyncio.gather(*queued, return_exceptions=True)
            together = await asyncio.gather(*(ac.queue("q").put(J, {}) for _ in range(10)))
            assert ac.conn._slots.free == 2, "a slot handed to a cancelled call was kept"
            return ended, len(set(together))

    ended, put = run(work, deadline_s=30)
    assert all(isinstance(e, RedisUnavailable) for e in ended), ended
    assert put == 10


def test_a_slot_handed_to_a_call_cancelled_in_the_same_turn_is_passed_on() -> None:
    """Both slots held, five calls queued; both given back (to the first two in
    line) and all five cancelled before any of them runs: the slots end free."""

    async def work() -> int:
        slots = Slots(2, 5.0, lambda: WrongState("stuck"))
        await slots.take()
        await slots.take()
        queued = [asyncio.create_task(slots.take()) for _ in range(5)]
        await asyncio.sleep(0)
        slots.give()
        slots.give()
        for task in queued:
            task.cancel()
        await asyncio.gather(*queued, return_exceptions=True)
        return slots.free

    assert run(work, deadline_s=10) == 2


def test_calls_queued_for_a_slot_raise_once_none_ended_for_the_timeout() -> None:
    """One slot held and never given back: the calls queued behind it raise the
    connection's error after timeout_s; while calls keep ending they wait on."""

    async def work() -> tuple[list[Any], list[Any]]:
        slots = Slots(1, 0.3, lambda: WrongState("stuck"))
        await slots.take()
        moving = [asyncio.create_task(slots.take()) for _ in range(4)]
        for _ in range(4):  # each 0.2 s apart: 0.8 s in all, more than timeout_s
            await asyncio.sleep(0.2)
            slots.give()
        took = await asyncio.gather(*moving, return_exceptions=True)
        stuck = [asyncio.create_task(slots.take()) for _ in range(3)]
        return took, await asyncio.gather(*stuck, return_exceptions=True)

    took, stuck = run(work, deadline_s=10)
    assert took == [None] * 4
    assert all(isinstance(e, WrongState) for e in stuck), stuck
