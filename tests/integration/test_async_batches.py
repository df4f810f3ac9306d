"""Batches and cancels from asyncio code: AsyncClient.batch makes the same batch
as Client.batch (the same calls, runtime.queue.api.batches), and its cancels say
what cancelled, as Client's do."""

from __future__ import annotations

from dataclasses import replace

import pytest

from runtime import AsyncClient, BadArgument, BatchStatus, Client
from runtime.vocabulary import JobState
from tests.integration.test_async_client import J, W, run


def test_an_async_batch_fills_closes_and_fires_its_callback_once(plain_client: Client) -> None:
    ns, url = plain_client.keys.namespace, plain_client.url

    async def fill() -> str:
        async with AsyncClient.from_url(url, namespace=ns) as ac:
            b = await ac.batch(on_complete=("done", J, {"n": 1}), description="pages")
            first = await b.queue("pages").put(J, {"page": 1})
            more = await b.put_many([b.queue("pages").spec(J, {"page": p}) for p in (2, 3)])
            assert len({first, *more}) == 3
            status = await b.close()
            assert (status.total, status.pending, status.sealed) == (3, 3, True)
            with pytest.raises(BadArgument, match="sealed"):
                await b.queue("pages").put(J, {"page": 4})
            return b.bid

    bid = run(fill)
    for lease in plain_client.queue("pages").pop(3, worker=W):
        lease.complete()

    async def read() -> None:
        async with AsyncClient.from_url(url, namespace=ns) as ac:
            status = await ac.get_batch(bid)
            assert status is not None
            assert (status.completed, status.failed, status.pending) == (3, 0, 0)
            assert status.complete_jid is not None and status.success_jid is None
            callback = await ac.get_job(status.complete_jid)
            assert callback is not None and callback.queue == "done"
            assert callback.data == {"n": 1, "bid": bid, "total": 3, "completed": 3, "failed": 0}
            assert await ac.get_batch("nope") is None

    run(read)
    mine, theirs = plain_client.get_batch(bid), run(lambda: _status(url, ns, bid))
    assert mine is not None and theirs is not None
    assert replace(mine, ttl_ms=0) == replace(theirs, ttl_ms=0), "the same read, both clients"


async def _status(url: str, ns: str, bid: str) -> BatchStatus | None:
    async with AsyncClient.from_url(url, namespace=ns) as ac:
        return await ac.get_batch(bid)


def test_an_async_cancel_leaves_a_tombstone_saying_what_cancelled(plain_client: Client) -> None:
    ns, url = plain_client.keys.namespace, plain_client.url
    jid = plain_client.queue("q").put(J, {})

    async def cancel() -> None:
        async with AsyncClient.from_url(url, namespace=ns) as ac:
            with pytest.raises(BadArgument, match="by must be one of"):
                await ac.cancel(jid, by="someone")
            assert await ac.cancel(jid, by="cli") == [jid]
            tomb = await ac.get_job(jid)
            assert tomb is not None and tomb.state == JobState.CANCELLED
            assert tomb.cancellation is not None and tomb.cancellation.by == "cli"

    run(cancel)


def test_an_async_put_takes_the_flow_controls_as_queue_put_does(plain_client: Client) -> None:
    ns, url = plain_client.keys.namespace, plain_client.url

    async def put() -> tuple[str, str, str]:
        async with AsyncClient.from_url(url, namespace=ns) as ac:
            q = ac.queue("q")
            late = await q.put(J, {}, expires_in=60)
            first = await q.put(J, {"v": 1}, unique_key="doc:7", debounce=2)
            again = await q.put(J, {"v": 2}, unique_key="doc:7", debounce=2)
            with pytest.raises(BadArgument, match="debounce needs a unique_key"):
                await q.put(J, {}, debounce=2)
            return late, first, again

    late, first, again = run(put)
    job = plain_client.get_job(late)
    assert job is not None and job.expires_at_ms is not None
    assert first == again, "a debounced put while the job waits is the same job"
    debounced = plain_client.get_job(first)
    assert debounced is not None and debounced.data == {"v": 2}
