"""Site: a sharded site's client (runtime.queue.shards), behind `Client`.

`Client(..., shards=rule)` (or with RUNTIME_SHARDS set) answers a Site: one
`Client` per namespace (each over its own URL when the rule names one, else
the site's: a Redis Cluster URL reaches every node), acting as one. An
application never names it: it is a `Client`.

Puts go to the namespace of their queue; a jid is looked for in every
namespace (a job lives in its queue's namespace, found with one read each);
counts, queues and failures are summed over the namespaces, and so are what
`runtime status`, `runtime metrics` and the dashboard read (`admin` and
`scheduling`: runtime.queue.siteparts). What cannot cross a shard raises
`CrossShard` before anything is written: one `put_many` over queues of two
shards (a put is atomic in one shard only), a dependency on a job of another
shard. Domain limits are set in every namespace alike: each shard enforces
its own (see docs/redis.md, *Sharded sites*).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any, Self

from runtime import config
from runtime.errors import CrossShard
from runtime.queue.client import Client, Queue, settings_for
from runtime.queue.connection import RETRY_FOR_S
from runtime.queue.job import Job
from runtime.queue.shards import Shards, sum_counts, sum_groups
from runtime.queue.siteparts import SiteAdmin, SiteScheduling
from runtime.queue.wire import JobSpec


def member_settings(settings: config.Settings, shards: Shards, namespace: str) -> config.Settings:
    """The settings of one namespace of a site: its own URL when the rule names one."""
    return replace(settings, namespace=namespace, url=shards.url_of(namespace) or settings.url)


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
        return SiteQueue(self, self.client(name), name)

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

    def cancel(self, *jids: str) -> list[str]:
        """Cancels the jobs, each in its namespace (one call per namespace)."""
        by: dict[str, list[str]] = {}
        for jid, job in zip(jids, self.get_jobs(list(jids)), strict=True):
            if job is not None:
                by.setdefault(self.shards.namespace_of(job.queue), []).append(jid)
        return [done for ns, mine in by.items() for done in self.clients[ns].cancel(*mine)]

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
        self, domain: str, rate: float, period: float = 1.0, burst: int | None = None
    ) -> None:
        """Sets the limit in every namespace: each shard enforces it on its own jobs,
        so a domain whose jobs run in N shards may start up to N times `rate`
        (keep a rate-limited domain's queues in one shard)."""
        for client in self.clients.values():
            client.set_domain_limit(domain, rate, period, burst)


class SiteQueue(Queue):
    """A Queue of a site: puts through `Site.put_many` (dependencies checked across
    shards), everything else in the queue's namespace."""

    def __init__(self, site: Site, client: Client, name: str) -> None:
        super().__init__(client, name)
        self.site = site

    def put(self, klass: str | Any, data: Mapping[str, Any] | None = None, **options: Any) -> str:
        return self.site.put_many([self.spec(klass, data, **options)])[0]
