"""AsyncClient: the application's client for asyncio (FastAPI, Starlette,
aiohttp, Django's async views), as `Client` is for threads.

    async with AsyncClient.from_url(url) as ac:
        jid = await ac.queue("emails").put("myapp.jobs:send", {"to": "a@b.c"})
        result = await ac.wait(jid, timeout=30)

It shares `Client`'s code: the same operations (runtime.queue.ops: one
place for each one's arguments and reply decoding), the same plan of a wait
(runtime.queue.waiting: the same results and errors), the same URL forms,
settings and errors; only the driver differs (runtime.queue.adriver, one
connection pool per namespace). A wait sends a bounded handful of commands,
never a poll, and blocks only its coroutine: the event loop runs on, and
the waits of a client share one blocking read (runtime.queue.waiters).

A sharded site (`shards=`, RUNTIME_SHARDS) is one AsyncClient too: puts are
routed by queue, a jid is found on any shard, counts and failures are summed
(runtime.queue.shards).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any, Self, Unpack

from runtime import config
from runtime.errors import Error, JobExists
from runtime.queue import ops, waiting, wire
from runtime.queue.adriver import MAX_CONNECTIONS, AsyncConnection
from runtime.queue.api import batches
from runtime.queue.api.shared import all_put, cancelled_by, settings_for
from runtime.queue.connection import RETRY_FOR_S, SOCKET_TIMEOUT_S
from runtime.queue.job import Job
from runtime.queue.shards import Shards, sum_counts, sum_groups
from runtime.queue.wire import JobOptions, JobSpec
from runtime.vocabulary import CancelledBy

QUEUES_KEPT = 1024  # AsyncQueue objects a client keeps (a thousand puts at once build one)


class AsyncClient:
    """A connection to one deployment (or a sharded site) for asyncio code.

    Errors are Client's (runtime.errors): NoSuchJob, JobFailed, WaitTimeout,
    BadArgument, and RedisUnavailable (RedisTransient for what passes) when
    Redis cannot be reached; calls safe to repeat are retried through a
    passing failure for up to `retry_for_s` seconds, and no command waits
    longer than `timeout_s` for an answer (a blocking read: its wait plus
    that), so an outage is an error, never a hang. The same client goes on
    once Redis is back. Each namespace has one pool: at most
    `max_connections` calls at once, and one more connection for the blocking
    read all its waits share (runtime.queue.waiters)."""

    def __init__(
        self,
        url: str | None = None,
        *,
        namespace: str | None = None,
        settings: config.Settings | None = None,
        shards: str | None = None,
        retry_for_s: float = RETRY_FOR_S,
        timeout_s: float = SOCKET_TIMEOUT_S,
        max_connections: int = MAX_CONNECTIONS,
        **redis_kwargs: Any,
    ) -> None:
        settings = settings_for(url, namespace, settings, shards)
        self.shards = Shards.of(settings)
        names = self.shards.namespaces if self.shards.sharded else (settings.namespace,)
        self.conns: dict[str, AsyncConnection] = {}
        for name in names:
            mine = replace(settings, namespace=name, url=self.shards.url_of(name) or settings.url)
            self.conns[name] = AsyncConnection(
                settings=mine,
                retry_for_s=retry_for_s,
                timeout_s=timeout_s,
                max_connections=max_connections,
                **redis_kwargs,
            )
        self.conn = self.conns.get(settings.namespace) or next(iter(self.conns.values()))
        self._queues: dict[str, AsyncQueue] = {}  # by name: made (and checked) once

    @classmethod
    def from_url(
        cls,
        url: str | None = None,
        *,
        namespace: str | None = None,
        shards: str | None = None,
        **options: Any,
    ) -> Self:
        """The client of the deployment at `url` (None: REDIS_URL or the config file,
        else the embedded server), as `Client.from_url`; `shards`: a sharded
        site's rule (runtime.queue.shards)."""
        return cls(url, namespace=namespace, shards=shards, **options)

    async def aclose(self) -> None:
        for conn in self.conns.values():
            await conn.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"AsyncClient({', '.join(c.keys.root for c in self.conns.values())})"

    @property
    def url(self) -> str:
        return self.conn.url

    @property
    def settings(self) -> config.Settings:
        return self.conn.settings

    # --- queues and jobs --------------------------------------------------------

    def queue(self, name: str) -> AsyncQueue:
        known = self._queues.get(name)
        if known is None:
            known = AsyncQueue(self, wire.check_queue(name))
            if len(self._queues) < QUEUES_KEPT:
                self._queues[name] = known
        return known

    def _of(self, queue: str) -> AsyncConnection:
        return self.conns.get(self.shards.namespace_of(queue), self.conn)

    async def queues(self) -> list[str]:
        found = [await c.call(ops.members(c.keys.key("queues"))) for c in self.conns.values()]
        return sorted({q for part in found for q in part})

    async def put_many(self, specs: Iterable[JobSpec]) -> list[str]:
        """Puts many jobs in one atomic call (Client.put_many); on a sharded site they
        must go to queues of one shard (CrossShard)."""
        specs = list(specs)
        if not specs:
            return []
        conn = self.conns.get(self.shards.home(s.queue for s in specs), self.conn)
        jids = [s.options["jid"] for s in specs]

        async def landed(err: Error) -> list[str] | None:
            """A retry after a lost reply that finds its jobs there: the first try landed."""
            if not isinstance(err, JobExists):
                return None
            return jids if all_put(specs, await conn.call(ops.get(jids))) else None

        return await conn.call(ops.put(specs), landed)

    async def get_job(self, jid: str) -> Job | None:
        return (await self.get_jobs([jid]))[0]

    async def get_jobs(self, jids: list[str]) -> list[Job | None]:
        """The jobs (None for a jid no namespace holds), in order."""
        found: list[Job | None] = [None] * len(jids)
        for conn in self.conns.values():
            missing = [i for i, job in enumerate(found) if job is None]
            if not missing:
                break
            got = await conn.call(ops.get([jids[i] for i in missing]))
            for i, job in zip(missing, got, strict=True):
                found[i] = job
        return found

    async def _holding(self, jid: str) -> AsyncConnection:
        """The connection of the namespace holding `jid` (the home one when there is
        one namespace, or none holds it: its answer is NoSuchJob)."""
        if len(self.conns) > 1:
            for conn in self.conns.values():
                if (await conn.call(ops.get([jid])))[0] is not None:
                    return conn
        return self.conn

    async def wait(self, jid: str, timeout: float | None = None) -> Any:
        """Client.wait for asyncio: the job's result, or JobFailed, WaitTimeout,
        NoSuchJob (the same plan: runtime.queue.waiting). Cancelling the awaiting
        task gives its connection back (dropped: its reply is never read)."""
        conn = await self._holding(jid)
        return await conn.steps(waiting.wait(conn.keys, jid, timeout))

    async def cancel(self, *jids: str, by: CancelledBy | str = CancelledBy.API) -> list[str]:
        """Deletes the jobs, each in its namespace, leaving tombstones (Client.cancel)."""
        if not jids:
            return []
        said = cancelled_by(by)
        if len(self.conns) == 1:
            return await self.conn.call(ops.cancel(jids, said))
        of_ns: dict[str, list[str]] = {}
        for jid, job in zip(jids, await self.get_jobs(list(jids)), strict=True):
            if job is not None:
                of_ns.setdefault(self.shards.namespace_of(job.queue), []).append(jid)
        done: list[str] = []
        for name, mine in of_ns.items():
            cancelled: list[str] = await self.conns[name].call(ops.cancel(mine, said))
            done.extend(cancelled)
        return done

    # --- batches (runtime.queue.api.batches; the batch lives in the home namespace) ----

    async def batch(
        self,
        on_success: batches.Callback | None = None,
        on_complete: batches.Callback | None = None,
        description: str | None = None,
    ) -> AsyncBatch:
        """Client.batch for asyncio: `b = await ac.batch(...)`, then `await
        b.queue(name).put(...)`, `await b.put_many(specs)`, `await b.close()`."""
        bid, call = batches.open_call(on_success, on_complete, description)
        await self.conn.call(call)
        return AsyncBatch(self, bid)

    async def get_batch(self, bid: str) -> batches.BatchStatus | None:
        """A batch's counts and callbacks; None if there is none (or it expired)."""
        return await self.conn.call(batches.status_call(bid))

    async def retry_batch(self, bid: str, count: int = 1000) -> int:
        """Runs up to `count` of the batch's failed jobs again; how many."""
        return await self.conn.call(ops.batch_retry(bid, count))

    async def status(self, *queues: str) -> dict[str, dict[str, int | bool]]:
        """Counts by state for the queues (all known queues when none are named),
        summed over a site's namespaces."""
        if not queues:
            parts = [await c.call(ops.counts(())) for c in self.conns.values()]
        else:
            split = self.shards.split(queues) if len(self.conns) > 1 else {"": queues}
            parts = [await self._of(qs[0]).call(ops.counts(qs)) for qs in split.values()]
        return sum_counts(parts)

    async def failed(self) -> dict[str, int]:
        """Failed jobs by group: {group: count}, summed over a site's namespaces."""
        parts: list[dict[str, int]] = [
            await c.call(ops.failed_groups()) for c in self.conns.values()
        ]
        return sum_groups(parts)

    async def message_status(self, jid: str) -> str | None:
        """Client.message_status: the job's state as a de-duplicating queue names it."""
        conn = await self._holding(jid)
        return await conn.call(ops.message_status(jid))


class AsyncBatch:
    """A batch being filled from asyncio code (batches.Batch's twin, the same calls)."""

    def __init__(self, client: AsyncClient, bid: str) -> None:
        self.client, self.bid = client, bid

    def __repr__(self) -> str:
        return f"AsyncBatch({self.bid!r})"

    def queue(self, name: str) -> AsyncBatchQueue:
        return AsyncBatchQueue(self, wire.check_queue(name))

    async def put_many(self, specs: Iterable[JobSpec]) -> list[str]:
        """Puts jobs into the batch in one atomic call (all or none); their jids."""
        return await self.client.put_many([batches.in_batch(s, self.bid) for s in specs])

    async def close(self) -> batches.BatchStatus:
        """Seals the batch (batches.Batch.close)."""
        return await self.client.conn.call(batches.close_call(self.bid))

    async def status(self) -> batches.BatchStatus | None:
        return await self.client.get_batch(self.bid)


class AsyncBatchQueue:
    """A queue of an AsyncBatch: what it puts joins the batch."""

    def __init__(self, batch: AsyncBatch, name: str) -> None:
        self.batch, self.name = batch, name

    def spec(self, klass: str | Any, data: Mapping[str, Any] | None = None, **opts: Any) -> JobSpec:
        return batches.in_batch(JobSpec.build(self.name, klass, data, **opts), self.batch.bid)

    async def put(
        self, klass: str | Any, data: Mapping[str, Any] | None = None, **opts: Any
    ) -> str:
        """Puts one job into the batch; returns its jid."""
        return (await self.batch.put_many([self.spec(klass, data, **opts)]))[0]


class AsyncQueue:
    """A named queue of an AsyncClient's deployment; created on first use."""

    def __init__(self, client: AsyncClient, name: str) -> None:
        self.client = client
        self.name = name

    def __repr__(self) -> str:
        return f"AsyncQueue({self.name!r})"

    async def put(
        self, klass: str | Any, data: Mapping[str, Any] | None = None, **options: Unpack[JobOptions]
    ) -> str:
        """Queue.put: puts one job; returns its jid (or, for a duplicate of a unique
        key, the jid of the job holding that key). Its turn first (AsyncConnection.turn):
        a thousand puts at once wait for it before building their jobs."""
        async with self.client._of(self.name).turn():
            return (await self.client.put_many([JobSpec.build(self.name, klass, data, **options)]))[
                0
            ]

    def spec(self, klass: str | Any, data: Mapping[str, Any] | None = None, **opts: Any) -> JobSpec:
        """A job for `AsyncClient.put_many` (same options as `put`)."""
        return JobSpec.build(self.name, klass, data, **opts)

    async def counts(self) -> dict[str, int | bool]:
        return (await self.client.status(self.name)).get(self.name, {})
