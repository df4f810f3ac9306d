"""Client and Queue: what an application needs, over one connection.

`Client()` reaches Redis at `REDIS_URL` (or the config file), else the
embedded default server (connection.py). Its own methods are an application's:
queues and putting jobs, reading, waiting for and cancelling them, the counts
of queues, failures by group, domain limits. The rest is in parts sharing its
one `Connection` (`client.conn`):

    client.admin       operating reads and bulk actions (runtime.queue.admin)
    client.scheduling  dependencies, priority, tags, tracking, recurring jobs,
                       domain limits (runtime.queue.scheduling)
    client.leases      the lease holder's side: pop, heartbeat, reports
                       (runtime.queue.holder); a pop returns `Lease` handles

A `Job` is a plain value (runtime.queue.job). The master uses the same
operations through `runtime.queue.aio.MasterClient`, asyncio applications
through `runtime.AsyncClient` (runtime.queue.api).

A sharded site (runtime.queue.shards: `shards=`, RUNTIME_SHARDS) is one client
too: `Client(...)` then answers a `Site` (below; its parts spanning the site in
runtime.queue.siteparts): one Client per namespace, each over its own URL (a
Redis Cluster URL reaches every node), acting as one. Puts go to the namespace
of their queue; a jid is looked for in every namespace (one read each);
counts, queues and failures are summed. What cannot cross a shard raises
`CrossShard` before anything is written: one `put_many` over queues of two
shards (a put is atomic in one shard only), a dependency on a job of another
shard. Domain limits are set in every namespace alike: each shard enforces
its own (docs/redis.md, *Sharded sites*).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any, Self, Unpack

import redis

from runtime import config
from runtime.errors import BadArgument, CrossShard, Error, JobExists
from runtime.queue import batches, ops, waiting, wire
from runtime.queue.admin import Admin
from runtime.queue.connection import RETRY_FOR_S, Connection
from runtime.queue.holder import Lease, Leases
from runtime.queue.job import Job
from runtime.queue.keys import Keys
from runtime.queue.scheduling import Scheduling
from runtime.queue.shards import Shards, sum_counts, sum_groups
from runtime.queue.siteparts import SiteAdmin, SiteScheduling
from runtime.queue.wire import JobOptions, JobSpec
from runtime.vocabulary import CancelledBy


class Client:
    """A connection to one deployment (a namespace in one Redis), made of parts:
    jobs, queues and failures here; `admin`, `scheduling` and `leases` beside.

    Redis errors arrive typed (runtime.errors): `RedisTransient` for conditions
    that pass, after retrying calls safe to repeat (reads, put, and the lease
    holder's reports with their token) for up to `retry_for_s` seconds.

    `shards`: a sharded site's rule (runtime.queue.shards; default
    RUNTIME_SHARDS): the client is then the whole site's (a `Site`), unless
    `whole_site` is False (one namespace of it, its puts checked by the rule)."""

    def __new__(
        cls,
        url: str | None = None,
        *,
        namespace: str | None = None,
        settings: config.Settings | None = None,
        shards: str | None = None,
        whole_site: bool = True,
        **options: Any,
    ) -> Self:
        if cls is Client and whole_site:
            settings = settings_for(url, namespace, settings, shards)
            if Shards.of(settings).sharded:
                return Site.__new__(Site, settings=settings)  # type: ignore[return-value]
        return super().__new__(cls)

    def __init__(
        self,
        url: str | None = None,
        *,
        namespace: str | None = None,
        settings: config.Settings | None = None,
        shards: str | None = None,
        whole_site: bool = True,
        retry_for_s: float = RETRY_FOR_S,
        **redis_kwargs: Any,
    ) -> None:
        settings = settings_for(url, namespace, settings, shards)
        conn = Connection(settings=settings, retry_for_s=retry_for_s, **redis_kwargs)
        self.conn = conn
        self.admin = Admin(conn)
        self.scheduling = Scheduling(conn)
        self.leases = Leases(conn)

    @classmethod
    def from_url(
        cls,
        url: str | None = None,
        namespace: str | None = None,
        *,
        shards: str | None = None,
        **redis_kwargs: Any,
    ) -> Self:
        """The client of the deployment at `url` (None: REDIS_URL or the config file,
        else the embedded server); `shards`: a sharded site's rule."""
        return cls(url, namespace=namespace, shards=shards, **redis_kwargs)

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Client({self.conn.keys.root!r})"

    # --- the connection's facts ------------------------------------------------------

    @property
    def url(self) -> str:
        return self.conn.url

    @property
    def settings(self) -> config.Settings:
        return self.conn.settings

    @property
    def keys(self) -> Keys:
        return self.conn.keys

    @property
    def redis(self) -> redis.Redis:
        """The redis-py client of the node serving the namespace (for tools and tests)."""
        return self.conn.redis

    def shard(self, *, queue: str | None = None, jid: str | None = None) -> Client:
        """The client of the namespace holding `queue` or job `jid`: this one, unless
        the client is a sharded site's."""
        return self

    # --- queues and jobs --------------------------------------------------------

    def queue(self, name: str) -> Queue:
        return Queue(self, wire.check_queue(name))

    def queues(self) -> list[str]:
        return self.conn.call(ops.members(self.keys.key("queues")))

    def status(self, *queues: str) -> dict[str, dict[str, int | bool]]:
        """Counts by state for the queues (all known queues when none are named)."""
        counts: dict[str, dict[str, int | bool]] = self.conn.call(ops.counts(queues))
        return counts

    def put_many(self, specs: Iterable[JobSpec]) -> list[str]:
        """Puts many jobs in one atomic call; nothing is written if one is bad. A
        put retried after a lost reply that finds its jobs there (JobExists) knows
        its first try landed, and answers their jids."""
        specs = list(specs)
        if not specs:
            return []
        shards = self.conn.shards
        if shards.sharded:  # an unsharded deployment holds every queue
            for spec in specs:
                shards.check(self.keys.namespace, spec.queue)

        def landed(err: Error) -> list[str] | None:
            return [s.options["jid"] for s in specs] if self._all_put(err, specs) else None

        return self.conn.call(ops.put(specs), landed)

    def _all_put(self, err: Error, specs: list[JobSpec]) -> bool:
        """Whether every job of `specs` exists, as these specs describe it."""
        if not isinstance(err, JobExists):
            return False
        return all_put(specs, self.get_jobs([s.options["jid"] for s in specs]))

    def get_job(self, jid: str) -> Job | None:
        return self.get_jobs([jid])[0]

    def get_jobs(self, jids: list[str]) -> list[Job | None]:
        return self.conn.call(ops.get(jids)) if jids else []

    def message_status(self, jid: str) -> str | None:
        """queued, queued-with-backoff, locked, locked-with-requeue, done-awaiting-gc,
        done-with-backoff, or None: the job's state as a de-duplicating queue names it."""
        return self.conn.call(ops.message_status(jid))

    def cancel(self, *jids: str, by: CancelledBy | str = CancelledBy.API) -> list[str]:
        """Deletes the jobs (their data at once); refuses (DependedOn) while others
        depend on one of them. Each that had not ended leaves a tombstone, where
        Redis has room, for the retention window: state cancelled, when and `by`
        what (CancelledBy: cli, dashboard, api, dependency). Returns the jids
        deleted (a tombstone is no job: not cancelled again)."""
        return self.conn.call(ops.cancel(jids, cancelled_by(by))) if jids else []

    def wait(self, jid: str, timeout: float | None = None) -> Any:
        """Waits for the job to end and returns its result (None for none). Raises
        JobFailed (with its group and message) if it failed for good, WaitTimeout
        after `timeout` seconds (None: no limit), JobCancelled (a NoSuchJob, with
        when and by what) if it was cancelled, NoSuchJob if there is no such job
        (or it was cancelled and left no tombstone). No polling: the script that ends the job wakes
        the waiters (runtime.queue.waiting, the same plan as AsyncClient.wait)."""
        return self.conn.steps(waiting.wait(self.keys, jid, timeout))

    # --- batches (runtime.queue.batches) -------------------------------------------------

    def batch(
        self,
        on_success: batches.Callback | None = None,
        on_complete: batches.Callback | None = None,
        description: str | None = None,
    ) -> batches.Batch:
        """A new batch: put its jobs (`b.queue(name).put`, `b.put_many`), then
        `b.close()`. Each callback is (queue, klass, data) or a typed job's spec;
        its data gets bid, total, completed and failed when it is put."""
        bid, call = batches.open_call(on_success, on_complete, description)
        self.conn.call(call)
        return batches.Batch(self, bid)

    def get_batch(self, bid: str) -> batches.BatchStatus | None:
        """A batch's counts and callbacks; None if there is none (or it expired)."""
        return self.conn.call(batches.status_call(bid))

    def retry_batch(self, bid: str, count: int = 1000) -> int:
        """Runs up to `count` of the batch's failed jobs again; how many."""
        return self.conn.call(ops.batch_retry(bid, count))

    # --- failures and domains ---------------------------------------------------------

    def failed(self) -> dict[str, int]:
        """Failed jobs by group: {group: count}."""
        return self.conn.call(ops.failed_groups())

    def unfail(self, group: str, queue: str | None, count: int = 25) -> int:
        """Moves up to `count` failed jobs of `group` back to `queue` (None: each to
        its own), oldest first."""
        target = "" if queue is None else wire.check_queue(queue)
        return self.conn.call(ops.unfail(group, target, count))

    def set_domain_limit(
        self,
        domain: str,
        rate: float | None = None,
        period: float = 1.0,
        burst: int | None = None,
        concurrency: int | None = None,
    ) -> None:
        """Limits `domain` to `rate` job starts per `period` seconds (+ `burst`)
        and/or to `concurrency` jobs holding a lease at once (client.scheduling
        has the other domain operations)."""
        self.scheduling.set_domain_limit(domain, rate, period, burst, concurrency)


class Queue:
    """A named queue of one deployment; created on first use."""

    def __init__(self, client: Client, name: str) -> None:
        self.client = client
        self.name = name

    def __repr__(self) -> str:
        return f"Queue({self.name!r})"

    def put(
        self, klass: str | Any, data: Mapping[str, Any] | None = None, **options: Unpack[JobOptions]
    ) -> str:
        """Puts one job; returns its jid (or, for a duplicate of a unique key, the jid
        of the job holding that key). Options: runtime.queue.wire.JobOptions."""
        return self.client.put_many([JobSpec.build(self.name, klass, data, **options)])[0]

    def spec(self, klass: str | Any, data: Mapping[str, Any] | None = None, **opts: Any) -> JobSpec:
        """A job for `Client.put_many` (same options as `put`)."""
        return JobSpec.build(self.name, klass, data, **opts)

    def pop(self, count: int = 1, worker: str | None = None) -> list[Lease]:
        """Leases up to `count` jobs to `worker` (default: this process): their lease
        handles, which report on them (for workers and tools: a master pops for
        the jobs it runs)."""
        return self.client.leases.pop(self.name, count, worker)

    def peek(self, count: int = 10) -> list[Job]:
        """The jobs a pop would take next, without leasing them."""
        return self.client.admin.peek(self.name, count)

    def counts(self) -> dict[str, int | bool]:
        return self.client.status(self.name)[self.name]

    def pause(self) -> None:
        self.client.conn.call(ops.set_paused(self.name, True))

    def resume(self) -> None:
        self.client.conn.call(ops.set_paused(self.name, False))


def member_settings(settings: config.Settings, shards: Shards, namespace: str) -> config.Settings:
    """The settings of one namespace of a site: its own URL when the rule names one."""
    return replace(settings, namespace=namespace, url=shards.url_of(namespace) or settings.url)


def cancelled_by(by: CancelledBy | str) -> CancelledBy:
    """`by` as a CancelledBy; BadArgument (one line) for any other word."""
    try:
        return CancelledBy(by)
    except ValueError:
        known = ", ".join(CancelledBy)
        raise BadArgument(f"by must be one of {known}, got {by!r}") from None


class Site(Client):
    """Several namespaces acting as one deployment: `queue(name)` is the Queue of
    that queue's namespace; `clients` {namespace: Client} for everything else.
    `conn`, `leases` (and the reads not spread over the site) are those of its
    home namespace: `namespace` when the rule names it, else the rule's first."""

    def __init__(
        self,
        url: str | None = None,
        *,
        namespace: str | None = None,
        settings: config.Settings | None = None,
        shards: str | None = None,
        whole_site: bool = True,
        retry_for_s: float = RETRY_FOR_S,
        **redis_kwargs: Any,
    ) -> None:
        settings = settings_for(url, namespace, settings, shards)
        self.shards = Shards.of(settings)
        self.clients: dict[str, Client] = {}
        try:
            for name in self.shards.namespaces:
                self.clients[name] = Client(
                    settings=member_settings(settings, self.shards, name),
                    whole_site=False,
                    retry_for_s=retry_for_s,
                    **redis_kwargs,
                )
        except BaseException:
            self.close()
            raise
        home = self.clients.get(settings.namespace) or self.first
        self.conn = home.conn
        self.leases = home.leases
        self.admin = SiteAdmin(self)
        self.scheduling = SiteScheduling(self)

    def close(self) -> None:
        for client in self.clients.values():
            client.close()

    def __enter__(self) -> Self:
        return self

    def __repr__(self) -> str:
        return f"Site({', '.join(self.clients)})"

    # --- routing ------------------------------------------------------------------

    def client(self, queue: str) -> Client:
        """The client of the namespace `queue` lives in."""
        return self.clients[self.shards.namespace_of(queue)]

    def shard(self, *, queue: str | None = None, jid: str | None = None) -> Client:
        """The client of the namespace of `queue`, or holding job `jid` (the home
        namespace's when no namespace holds it: its reads answer "no job")."""
        if queue is not None:
            return self.client(queue)
        if jid is not None:
            return self.locate(jid) or self.clients[self.shards.namespaces[0]]
        return self.first

    @property
    def first(self) -> Client:
        """The client of the site's first namespace (e.g. for Redis's clock)."""
        return next(iter(self.clients.values()))

    def queue(self, name: str) -> SiteQueue:
        """The queue, in its namespace; its puts check dependencies across the site."""
        return SiteQueue(self, self.client(wire.check_queue(name)), name)

    def locate(self, jid: str) -> Client | None:
        """The client of the namespace holding job `jid` (None: none holds it)."""
        for client in self.clients.values():
            if client.get_job(jid) is not None:
                return client
        return None

    # --- puts ------------------------------------------------------------------

    def put_many(self, specs: Iterable[JobSpec]) -> list[str]:
        """Puts jobs of one shard in one atomic call (Client.put_many); CrossShard if
        they span shards or one depends on a job of another shard."""
        specs = list(specs)
        if not specs:
            return []
        home = self.clients[self.shards.home(s.queue for s in specs)]
        self._check_depends(home, specs)
        return home.put_many(specs)

    def _check_depends(self, home: Client, specs: list[JobSpec]) -> None:
        """CrossShard for a dependency that `home` does not hold and another shard does
        (one unknown anywhere is left to the put, which refuses it as unknown)."""
        own = {s.options["jid"] for s in specs}
        wanted = [d for s in specs for d in s.options.get("depends", ()) if d not in own]
        if not wanted:
            return
        found = home.get_jobs(wanted)
        for jid in (d for d, job in zip(wanted, found, strict=True) if job is None):
            for namespace, other in self.clients.items():
                if other is not home and other.get_job(jid) is not None:
                    raise CrossShard(
                        f"a job put in shard {home.keys.namespace!r} cannot depend on job "
                        f"{jid} of shard {namespace!r}: dependencies do not cross shards"
                    )

    # --- jobs by jid ------------------------------------------------------------

    def get_job(self, jid: str) -> Job | None:
        client = self.locate(jid)
        return None if client is None else client.get_job(jid)

    def get_jobs(self, jids: list[str]) -> list[Job | None]:
        found: list[Job | None] = [None] * len(jids)
        for client in self.clients.values():
            missing = [i for i, job in enumerate(found) if job is None]
            if not missing:
                break
            for i, job in zip(missing, client.get_jobs([jids[i] for i in missing]), strict=True):
                found[i] = job
        return found

    def wait(self, jid: str, timeout: float | None = None) -> Any:
        """Client.wait in the namespace holding the job (NoSuchJob if none does)."""
        client = self.locate(jid) or next(iter(self.clients.values()))
        return client.wait(jid, timeout)

    def message_status(self, jid: str) -> str | None:
        client = self.locate(jid)
        return None if client is None else client.message_status(jid)

    def cancel(self, *jids: str, by: CancelledBy | str = CancelledBy.API) -> list[str]:
        """Cancels the jobs, each in its namespace (one call per namespace)."""
        of_ns: dict[str, list[str]] = {}
        for jid, job in zip(jids, self.get_jobs(list(jids)), strict=True):
            if job is not None:
                of_ns.setdefault(self.shards.namespace_of(job.queue), []).append(jid)
        clients = self.clients
        return [done for ns, mine in of_ns.items() for done in clients[ns].cancel(*mine, by=by)]

    # --- counts, failures, domains -------------------------------------------------

    def queues(self) -> list[str]:
        return sorted({q for client in self.clients.values() for q in client.queues()})

    def status(self, *queues: str) -> dict[str, dict[str, int | bool]]:
        """Counts by state for the queues (all queues of every namespace when none are
        named); a queue found in two namespaces (put there before a change of the
        rule) has its counts summed."""
        parts = (
            [c.status() for c in self.clients.values()]
            if not queues
            else [self.clients[ns].status(*qs) for ns, qs in self.shards.split(queues).items()]
        )
        return sum_counts(parts)

    def failed(self) -> dict[str, int]:
        """Failed jobs by group, summed over the namespaces."""
        return sum_groups(client.failed() for client in self.clients.values())

    def unfail(self, group: str, queue: str | None, count: int = 25) -> int:
        """Moves up to `count` failed jobs of `group` back: to `queue` from its own
        namespace only (failures never cross a shard), or (None) each to its own
        queue, namespace by namespace."""
        if queue is not None:
            return self.client(queue).unfail(group, queue, count)
        moved = 0
        for client in self.clients.values():
            if moved < count:
                moved += client.unfail(group, None, count - moved)
        return moved

    def set_domain_limit(
        self,
        domain: str,
        rate: float | None = None,
        period: float = 1.0,
        burst: int | None = None,
        concurrency: int | None = None,
    ) -> None:
        """Sets the limits in every namespace (SiteScheduling.set_domain_limit)."""
        self.scheduling.set_domain_limit(domain, rate, period, burst, concurrency)

    def pause_domain(self, domain: str) -> None:
        """Pauses the domain in every namespace (client.scheduling.pause_domain)."""
        self.scheduling.pause_domain(domain)

    def resume_domain(self, domain: str) -> None:
        self.scheduling.resume_domain(domain)


class SiteQueue(Queue):
    """A Queue of a site: puts through `Site.put_many` (dependencies checked across
    shards), everything else in the queue's namespace."""

    def __init__(self, site: Site, client: Client, name: str) -> None:
        super().__init__(client, name)
        self.site = site

    def put(self, klass: str | Any, data: Mapping[str, Any] | None = None, **options: Any) -> str:
        return self.site.put_many([self.spec(klass, data, **options)])[0]


def all_put(specs: list[JobSpec], found: list[Job | None]) -> bool:
    """Whether the jobs `found` by the jids of `specs` are these specs' jobs (a put
    retried after a lost reply: its first try landed)."""
    return all(
        job is not None and job.klass == spec.klass and job.data == json.loads(spec.data_json)
        for job, spec in zip(found, specs, strict=True)
    )


def settings_for(
    url: str | None,
    namespace: str | None,
    settings: config.Settings | None,
    shards: str | None,
) -> config.Settings:
    """The settings a client is made with: `settings`, else those of the
    environment and config file with `url`, `namespace` and `shards` given."""
    if settings is not None:
        return settings
    return config.load_settings({"url": url, "namespace": namespace, "shards": shards})
