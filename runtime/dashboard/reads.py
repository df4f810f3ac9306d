"""What the dashboard reads, through `Client` only: queues with their counts and
latency, workers with their running jobs, the totals the rates come from.

Each read returns plain frozen rows the templates show; a number the read does
not give is None, and the page shows a dash. Job pages, failures, domains and
statistics are in jobreads.py.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from runtime import vocabulary
from runtime.queue.api.client import Client
from runtime.queue.job import Job
from runtime.vocabulary import Count

log = logging.getLogger(__name__)

# the states a queue's page lists, in the order a job meets them
QUEUE_STATES = (
    Count.WAITING,
    Count.SCHEDULED,
    Count.RUNNING,
    Count.STALLED,
    Count.DEPENDS,
    Count.THROTTLED,
    Count.COMPLETE,
    Count.FAILED,
    Count.CANCELLED,
)
LISTED_STATES = vocabulary.LISTED_STATES  # stalled jobs are listed with the running
# the counts of the jobs that still have to run
QUEUED = (
    Count.WAITING,
    Count.THROTTLED,
    Count.SCHEDULED,
    Count.DEPENDS,
    Count.RUNNING,
    Count.STALLED,
)
UP_WITHIN_MS = 60_000  # a worker seen this recently counts as up


@dataclass(frozen=True)
class QueueRow:
    name: str
    counts: Mapping[str, int | None]  # every state of QUEUE_STATES; None: not known
    paused: bool
    size_warning: int  # 0: none
    latency_s: float | None  # how long the job next in line has waited; None: none waits

    @property
    def size(self) -> int:
        """Jobs that still have to run: waiting, throttled, scheduled, depends, running."""
        return sum(self.counts.get(s) or 0 for s in QUEUED)

    @property
    def warned(self) -> bool:
        return bool(self.size_warning) and self.size > self.size_warning


@dataclass(frozen=True)
class RunningJob:
    jid: str
    klass: str
    queue: str
    elapsed_s: float | None


@dataclass(frozen=True)
class WorkerRow:
    id: str
    host: str
    pid: int | None
    seen_ms: int
    up: bool
    queues: tuple[str, ...] = ()
    concurrency: int | None = None  # the children it keeps; None: not told
    jobs: tuple[RunningJob, ...] = field(default=())


def _number(value: Any) -> int | None:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def of_queue(state: Any, name: str) -> Client:
    """The client of the namespace queue `name` lives in (the app's `state`: its
    site's when it serves a sharded site, else its one client)."""
    client: Client = state.client.shard(queue=name)
    return client


def of_job(state: Any, jid: str) -> Client:
    """The client of the namespace holding job `jid` (the app's own when none does)."""
    client: Client = state.client.shard(jid=jid)
    return client


def queue_rows(client: Client, names: Sequence[str] = ()) -> list[QueueRow]:
    """The queues (all known ones when none are named), by name: one read."""
    rows = []
    for name, counts in sorted(client.status(*names).items()):
        waiting_ms = _number(counts.get("oldest_waiting_ms"))
        rows.append(
            QueueRow(
                name=name,
                counts={state: _number(counts.get(state)) for state in QUEUE_STATES},
                paused=bool(counts.get("paused")),
                size_warning=_number(counts.get("size_warning")) or 0,
                latency_s=None
                if waiting_ms is None or not counts.get(Count.WAITING)
                else waiting_ms / 1000,
            )
        )
    return rows


def started_ms(job: Job) -> int | None:
    """When its current attempt was popped (its newest popped event)."""
    for event in reversed(job.history):
        if event.event == "popped":
            return event.starts_at_ms or event.at_ms
    return None


def worker_rows(client: Client, now_ms: int) -> list[WorkerRow]:
    """Masters seen lately, most recent first, with the jobs each runs: one read."""
    return [_worker_row(wid, info, now_ms) for wid, info in client.admin.workers().items()]


def _worker_row(wid: str, info: Mapping[str, Any], now_ms: int) -> WorkerRow:
    seen_ms = int(info.get("seen_ms", 0))
    running = [
        RunningJob(
            jid=str(row.get("jid")),
            klass=str(row.get("klass") or "?"),
            queue=str(row.get("queue") or "?"),
            elapsed_s=None if row.get("elapsed_ms") is None else int(row["elapsed_ms"]) / 1000,
        )
        for row in info.get("running", ())
    ]
    return WorkerRow(
        id=wid,
        host=str(info.get("host") or "-"),
        pid=_number(info.get("pid")),
        seen_ms=seen_ms,
        up=now_ms - seen_ms <= UP_WITHIN_MS,
        queues=tuple(str(q) for q in info.get("queues", ())),
        concurrency=_number(info.get("concurrency")),
        jobs=tuple(running),
    )


def totals(client: Client) -> tuple[int, int]:
    """(jobs completed, jobs failed for good) since each queue was first used, summed
    over the queues: the counters whose differences are the rates (one read)."""
    status = client.status()
    return (
        sum(_number(c.get("completed_total")) or 0 for c in status.values()),
        sum(_number(c.get("failed_total")) or 0 for c in status.values()),
    )
