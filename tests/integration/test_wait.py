"""Waiting for a job (Client.wait) against a real Redis, the jobs
ended by hand by a lease holder in another thread; the master's asyncio side:
progress and immediate puts sent first in an exchange, and the cancels of its
running jobs as they come."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest

from runtime import Client, JobExists, Lease, NoSuchJob
from runtime.errors import Error, JobFailed, WaitTimeout
from runtime.queue.aio import MasterClient
from runtime.queue.leases import ExchangeReply, Outcomes
from tests.support.waiting import stays, wait_for

W = "host-1"
T = TypeVar("T")


class Waiter:
    """Client.wait in a thread of its own: what it returned or raised."""

    def __init__(self, call: Callable[[], Any]) -> None:
        self.outcome: list[Any] = []
        self.thread = threading.Thread(target=self._run, args=(call,), daemon=True)
        self.thread.start()

    def _run(self, call: Callable[[], Any]) -> None:
        try:
            self.outcome.append(("returned", call()))
        except Error as err:  # the test looks at it
            self.outcome.append(("raised", err))

    def result(self, timeout_s: float = 10.0) -> tuple[str, Any]:
        self.thread.join(timeout_s)
        assert self.outcome, "the waiter did not come back in time"
        kind, value = self.outcome[0]
        return kind, value


@pytest.fixture
def leased(plain_client: Client) -> Lease:
    plain_client.queue("q").put("a.b:c", {}, jid="j1", retries=0)
    [job] = plain_client.queue("q").pop(1, worker=W)
    return job


def blocked_on(client: Client, jid: str) -> bool:
    """A waiter registered (wait.lua wrote meta.wt) and so blocks on its list."""
    job = client.redis.hget(client.keys.key("jobs"), jid)
    return job is not None and b'"wt":' in job


def test_wait_returns_the_result_once_the_job_completes(
    plain_client: Client, leased: Lease
) -> None:
    waiter = Waiter(lambda: plain_client.wait("j1", timeout=30))
    wait_for(lambda: blocked_on(plain_client, "j1"), what="the waiter to register")
    assert not waiter.outcome
    leased.complete(result={"sent": True})
    assert waiter.result() == ("returned", {"sent": True})
    assert plain_client.wait("j1", timeout=0) == {"sent": True}  # a job that ended answers at once


def test_wait_raises_job_failed_with_the_failure(plain_client: Client, leased: Lease) -> None:
    waiter = Waiter(lambda: plain_client.wait("j1"))
    wait_for(lambda: blocked_on(plain_client, "j1"), what="the waiter to register")
    leased.fail("app.errors.Bounced", "Traceback ...\napp.errors.Bounced: no such address")
    kind, err = waiter.result()
    assert kind == "raised" and isinstance(err, JobFailed)
    assert (err.jid, err.group) == ("j1", "app.errors.Bounced")
    assert err.message.endswith("no such address")
    assert str(err) == "job j1 failed (app.errors.Bounced): app.errors.Bounced: no such address"


def test_wait_times_out_and_the_job_goes_on(plain_client: Client, leased: Lease) -> None:
    started = time.monotonic()
    with pytest.raises(WaitTimeout) as caught:
        plain_client.wait("j1", timeout=0.3)
    assert time.monotonic() - started >= 0.3
    assert caught.value.jid == "j1" and "0.3 s" in str(caught.value)
    assert leased.complete() == "complete"
    assert plain_client.wait("j1", timeout=0) is None


def test_wait_on_a_cancelled_job_raises_no_such_job(plain_client: Client, leased: Lease) -> None:
    waiter = Waiter(lambda: plain_client.wait("j1", timeout=30))
    wait_for(lambda: blocked_on(plain_client, "j1"), what="the waiter to register")
    plain_client.cancel("j1")
    kind, err = waiter.result()
    assert kind == "raised" and isinstance(err, NoSuchJob)
    with pytest.raises(NoSuchJob):
        plain_client.wait("never-put", timeout=1)


def test_many_waiters_on_one_job_all_wake(plain_client: Client, leased: Lease) -> None:
    waiters = [Waiter(lambda: plain_client.wait("j1", timeout=30)) for _ in range(5)]
    wait_for(
        lambda: b'"wn":5' in (plain_client.redis.hget(plain_client.keys.key("jobs"), "j1") or b""),
        what="five waiters",
    )
    leased.complete(result=7)
    assert [w.result() for w in waiters] == [("returned", 7)] * 5


def test_a_wait_longer_than_one_slice_keeps_waiting(
    plain_client: Client, leased: Lease, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("runtime.queue.waiting.WAIT_SLICE_S", 0.2)
    waiter = Waiter(lambda: plain_client.wait("j1", timeout=30))
    wait_for(lambda: blocked_on(plain_client, "j1"), what="the waiter to register")
    stays(lambda: not waiter.outcome, 0.5, what="the waiter waiting through several slices")
    leased.complete(result="late")
    assert waiter.result() == ("returned", "late")


# --- the master's asyncio side ----------------------------------------------------------


def on_aio(client: Client, work: Callable[[MasterClient], Awaitable[T]]) -> T:
    """Runs `work` with a master's asyncio client, closed after, in one event loop."""

    async def main() -> T:
        aio = MasterClient(client.url, client.keys, W)
        try:
            await aio.connect()
            return await work(aio)
        finally:
            await aio.close()

    return asyncio.run(main())


def test_an_exchange_sends_progress_and_puts_first_then_the_reports(
    plain_client: Client, leased: Lease
) -> None:
    out = Outcomes()
    out.add_progress("j1", leased.token or "", 10, 10, "all")
    spec = plain_client.queue("links").spec("a.b:c", {"u": 1}, jid="link-1")
    out.add_put(*spec.to_wire(), by="j1")
    later = plain_client.queue("links").spec("a.b:c", {"u": 2}, jid="link-2")
    out.add_complete(
        "j1", leased.token or "", result='{"n":2}', output="out\n", puts=[later.to_wire()]
    )
    out.add_progress("gone", "t", 1, None, None)  # refused: not in the answer

    done = on_aio(plain_client, lambda aio: aio.exchange(out, None, [], "ordered"))
    assert done.states == {"j1": "complete"}
    assert done.put == {"link-1": "link-1"}
    assert len(done.unsent) == 0
    job = plain_client.get_job("j1")
    assert job is not None and job.result == {"n": 2} and job.output == "out\n"
    assert job.progress is not None and job.progress["message"] == "all"
    assert [(e.event, e.count) for e in job.history[-3:]] == [
        ("puts", 1),
        ("puts", 1),
        ("completed", None),
    ]
    assert plain_client.queue("links").counts()["waiting"] == 2


def fcalls(client: Client) -> int:
    info = client.redis.info("commandstats")
    return sum(info.get(f"cmdstat_{verb}", {}).get("calls", 0) for verb in ("fcall", "evalsha"))


def test_an_exchange_with_reports_and_a_pop_makes_one_call_of_both(
    plain_client: Client, leased: Lease
) -> None:
    q = plain_client.queue("q")
    for jid in ("j2", "j3", "next"):
        q.put("a.b:c", {}, jid=jid)
    j2, j3 = q.pop(2, worker=W)
    out = Outcomes()
    out.add_complete("j1", leased.token or "", result='{"n":1}')
    out.add_retry("j2", j2.token or "", "g", "m", 0)
    out.add_fail("j3", j3.token or "", "g", "boom")
    out.add_complete("lost", "0" * 24)
    before = fcalls(plain_client)
    done = on_aio(plain_client, lambda aio: aio.exchange(out, 5, ["q"], "ordered"))
    assert fcalls(plain_client) - before == 1
    assert {jid: s for jid, s in done.states.items() if isinstance(s, str)} == {
        "j1": "complete",
        "j2": "waiting",
        "j3": "failed",
    }
    assert isinstance(done.states["lost"], NoSuchJob)
    assert done.popped is not None and [j.jid for j in done.popped.jobs] == ["next", "j2"]


def test_a_report_redis_refuses_for_good_does_not_stop_the_pop(
    plain_client: Client, leased: Lease
) -> None:
    """A damaged key under a report (WRONGTYPE inside the one call) fails the whole
    `exchange`; the reports and the pop then go again apart: the report is refused
    alone and the pop goes through, as without `exchange`."""
    plain_client.queue("q").put("a.b:c", {}, jid="next")
    lane = plain_client.keys.key("lane", queue="links", prio=0, domain="")
    plain_client.redis.set(lane, "damaged")  # the follow-up's lane: WRONGTYPE
    follow_up = plain_client.queue("links").spec("a.b:c", {"u": 1}, jid="link-1")
    out = Outcomes()
    out.add_complete("j1", leased.token or "", puts=[follow_up.to_wire()])
    done = on_aio(plain_client, lambda aio: aio.exchange(out, 5, ["q"], "ordered"))
    assert isinstance(done.states["j1"], Error)
    assert done.popped is not None and [j.jid for j in done.popped.jobs] == ["next"]


def test_an_exchange_with_a_release_sends_its_reports_before_the_pop(
    plain_client: Client, leased: Lease
) -> None:
    plain_client.queue("q").put("a.b:c", {}, jid="j2")
    [j2] = plain_client.queue("q").pop(1, worker=W)
    out = Outcomes()
    out.add_complete("j1", leased.token or "")
    out.add_release("j2", j2.token or "")
    before = fcalls(plain_client)
    done = on_aio(plain_client, lambda aio: aio.exchange(out, 5, ["q"], "ordered"))
    assert fcalls(plain_client) - before == 3  # complete, release, pop
    assert done.states == {"j1": "complete", "j2": "waiting"}
    assert done.popped is not None and [j.jid for j in done.popped.jobs] == ["j2"]


def test_a_put_sent_again_after_a_lost_reply_answers_job_exists(plain_client: Client) -> None:
    out = Outcomes()
    out.add_put(*plain_client.queue("links").spec("a.b:c", jid="once").to_wire())

    async def twice(aio: MasterClient) -> tuple[ExchangeReply, ExchangeReply]:
        return await aio.exchange(out, None, [], "ordered"), await aio.exchange(
            out, None, [], "ordered"
        )

    first, second = on_aio(plain_client, twice)
    assert first.put == {"once": "once"}
    assert isinstance(second.put["once"], JobExists)


def test_cancellations_yields_the_cancelled_jobs_of_this_master(plain_client: Client) -> None:
    q = plain_client.queue("q")
    for jid in ("mine", "other", "idle"):
        q.put("a.b:c", {}, jid=jid)
    q.pop(1, worker=W)
    q.pop(1, worker="host-2")

    async def listen(aio: MasterClient) -> list[str]:
        got: list[str] = []
        stream = aio.cancellations()

        async def collect() -> None:
            async for jid in stream:
                got.append(jid)

        task = asyncio.create_task(collect())
        channel = plain_client.keys.cancels(W)  # a cancel before it subscribed is missed

        def subscribed() -> bool:
            return dict(plain_client.redis.pubsub_numsub(channel)).get(channel.encode(), 0) > 0

        await asyncio.to_thread(wait_for, subscribed, what="the listener to subscribe")
        await asyncio.to_thread(plain_client.cancel, "other", "idle", "mine")
        deadline = time.monotonic() + 10
        while not got and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return got

    assert on_aio(plain_client, listen) == ["mine"]
