"""What the dashboard reads about jobs, through `Client` only: a queue's jobs by
state, a job with its dependencies, jobs by tag, failure groups (with their first
and last failure), domains and a queue's statistics of a day.

Domains: `Client.domains()` is used where it exists (limit, throttled jobs and next
allowed start of each domain, in one read); without it the page shows the limits
set and counts the throttled jobs of the queues that have some (the first
THROTTLED_LOOKED of each), without the next allowed start.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date
from typing import Any

from runtime.queue import ops
from runtime.queue.api.client import Client, Site
from runtime.queue.job import Job
from runtime.queue.stats import QueueStats, Times
from runtime.vocabulary import CancelledBy

log = logging.getLogger(__name__)

PAGE_SIZE = 25
DELETE_BATCH = 1000  # failed jobs one cancel call deletes
THROTTLED_LOOKED = 1000  # throttled jobs of a queue the domains page counts (no domains())
PERCENTILES = (50, 95, 99)


@dataclass(frozen=True)
class Page:
    total: int
    jobs: tuple[Job, ...]


@dataclass(frozen=True)
class JobView:
    job: Job
    depends: tuple[tuple[str, str | None], ...]  # (jid, state; None: gone)
    dependents: tuple[tuple[str, str | None], ...]


@dataclass(frozen=True)
class GroupRow:
    group: str
    count: int
    first_ms: int | None  # the oldest failure still in the group
    last_ms: int | None
    queues: tuple[str, ...]


@dataclass(frozen=True)
class DomainRow:
    domain: str
    limit: Mapping[str, Any] | None  # {"rate", "period", "burst", "concurrency", "paused"}
    throttled: int | None
    next_start_ms: int | None
    slots: int | None = None  # its jobs holding a lease now
    paused: bool = False
    full: bool = False  # its jobs hold every slot of its cap


@dataclass(frozen=True)
class TimesView:
    count: int
    mean_s: float
    percentiles_s: tuple[tuple[int, float | None], ...]  # (50, seconds) ...
    histogram: tuple[tuple[float, int], ...]  # (bucket's lower bound in seconds, jobs)


def queue_jobs(
    client: Client, queue: str, state: str, start: int, count: int, newest_first: bool
) -> Page:
    """A page of a queue's jobs in one state (running includes the stalled ones)."""
    total, jobs = client.admin.jobs(
        queue, state, start=start, count=count, oldest_first=not newest_first
    )
    return Page(total, tuple(jobs))


def job_view(client: Client, jid: str) -> JobView | None:
    """A job with the states of the jobs it waits on and of those waiting on it."""
    job = client.get_job(jid)
    if job is None:
        return None
    others = list(dict.fromkeys((*job.depends, *job.dependents)))
    states = {j.jid: j.state for j in client.get_jobs(others[:1000]) if j is not None}
    return JobView(
        job=job,
        depends=tuple((d, states.get(d)) for d in job.depends),
        dependents=tuple((d, states.get(d)) for d in job.dependents),
    )


def tagged(client: Client, tag: str, start: int, count: int) -> Page:
    total, jobs = client.scheduling.tagged(tag, start, count)
    return Page(total, tuple(jobs))


def failed_jobs(client: Client, group: str, start: int, count: int) -> Page:
    total, jobs = client.admin.failed_jobs(group, start, count)
    return Page(total, tuple(jobs))


def failure_groups(client: Client) -> list[GroupRow]:
    """Failure groups, largest first, with the times of their newest and oldest job."""
    groups = {g: n for g, n in client.failed().items() if n > 0}
    names = sorted(groups, key=lambda g: (-groups[g], g))
    pages: list[tuple[int, list[Job]]] = []
    if isinstance(client, Site):  # the pages of every namespace, one after another
        for group in names:
            pages.append(client.admin.failed_jobs(group, 0, 5))
            pages.append(client.admin.failed_jobs(group, max(groups[group] - 1, 0), 1))
    elif names:  # one round trip
        calls = []
        for group in names:
            calls.append(ops.failed_jobs(group, 0, 5))
            calls.append(ops.failed_jobs(group, max(groups[group] - 1, 0), 1))
        pages = client.conn.calls(calls)
    rows = []
    for i, group in enumerate(names):
        (_, newest), (_, oldest) = pages[2 * i], pages[2 * i + 1]
        rows.append(
            GroupRow(
                group,
                groups[group],
                _failed_at(oldest[:1] or newest[-1:]),
                _failed_at(newest[:1]),
                tuple(sorted({j.queue for j in newest})),
            )
        )
    return rows


def _failed_at(jobs: Sequence[Job]) -> int | None:
    if not jobs or jobs[0].failure is None:
        return None
    return jobs[0].failure.at_ms


def retry_group(client: Client, group: str) -> int:
    """Moves every failed job of `group` back to its own queue, retries renewed; how
    many moved."""
    return client.admin.unfail_all(group)


def delete_group(client: Client, group: str) -> int:
    """Deletes every failed job of `group`, a page at a time; how many. A job others
    still wait on stops it (DependedOn): the pages deleted before it stay deleted."""
    deleted = 0
    while True:
        _, jobs = client.admin.failed_jobs(group, 0, DELETE_BATCH)
        gone = client.cancel(*[j.jid for j in jobs], by=CancelledBy.DASHBOARD) if jobs else []
        if not gone:
            return deleted
        deleted += len(gone)


def domain_rows(client: Client) -> list[DomainRow]:
    """Domains with a limit of their own, with jobs throttled or running now, by name."""
    found = client.admin.domains()
    return [
        DomainRow(
            d,
            info.get("limit"),
            info.get("throttled"),
            info.get("next_start_ms"),
            info.get("slots"),
            bool(info.get("paused")),
            bool(info.get("full")),
        )
        for d, info in sorted(found.items())
    ]


def default_limit(client: Client) -> Mapping[str, float] | None:
    """The deployment's default domain limit, None when there is none."""
    settings = client.admin.config_get()
    rate = settings.get("domain-rate", 0.0)
    if not rate:
        return None
    return {
        "rate": rate,
        "period": settings.get("domain-period", 1.0),
        "burst": settings.get("domain-burst", 0.0),
    }


def queue_stats(client: Client, queue: str, day: date) -> tuple[QueueStats, TimesView, TimesView]:
    found = client.admin.stats(queue, day)
    return found, times_view(found.wait), times_view(found.run)


def times_view(times: Times) -> TimesView:
    return TimesView(
        count=times.count,
        mean_s=times.mean,
        percentiles_s=tuple((p, times.percentile(p / 100)) for p in PERCENTILES),
        histogram=times.histogram,
    )
