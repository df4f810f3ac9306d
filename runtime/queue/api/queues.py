"""A queue's handle, `Queue` (what `client.queue(name)` answers): putting jobs on
it, popping by hand, peeking, its counts, pausing it; and `SiteQueue`, a queue of
a sharded site, whose puts are checked across the site's shards.

A queue holds its client for what it does; it knows that client only by what it
uses of it (`Owner`, `SitePuts`), so the clients (runtime.queue.api.client) build
queues without the two modules importing each other.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Protocol, Unpack

from runtime.queue import ops
from runtime.queue.api.admin import Admin
from runtime.queue.api.holder import Lease, Leases
from runtime.queue.connection import Connection
from runtime.queue.job import Job
from runtime.queue.wire import JobOptions, JobSpec


class Owner(Protocol):
    """What a queue uses of its client (a runtime.queue.api.client.Client)."""

    @property
    def conn(self) -> Connection: ...
    @property
    def admin(self) -> Admin: ...
    @property
    def leases(self) -> Leases: ...
    def put_many(self, specs: Iterable[JobSpec]) -> list[str]: ...
    def status(self, *queues: str) -> dict[str, dict[str, int | bool]]: ...


class SitePuts(Protocol):
    """What a site's queue uses of its site (runtime.queue.api.client.Site)."""

    def put_many(self, specs: Iterable[JobSpec]) -> list[str]: ...


class Queue:
    """A named queue of one deployment; created on first use."""

    def __init__(self, client: Owner, name: str) -> None:
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


class SiteQueue(Queue):
    """A Queue of a site: puts through `Site.put_many` (dependencies checked across
    shards), everything else in the queue's namespace."""

    def __init__(self, site: SitePuts, client: Owner, name: str) -> None:
        super().__init__(client, name)
        self.site = site

    def put(self, klass: str | Any, data: Mapping[str, Any] | None = None, **options: Any) -> str:
        return self.site.put_many([self.spec(klass, data, **options)])[0]
