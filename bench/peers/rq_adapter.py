"""RQ: two `rq worker` processes on the queue, started as

    rq worker --url URL --quiet bench                                        (variant "fork")
    rq worker --url URL --quiet --worker-class rq.worker.SimpleWorker bench  (variant "simple")

"fork" is RQ's default `Worker`, which forks a work horse per job; "simple" runs the
jobs in the worker process itself. Concurrency 2 is these two worker processes, one job
at a time each. For lateness both also get `--with-scheduler`: one wins the scheduler
lock and runs RQ's scheduler process, which moves due jobs to the queue once a second
(a fixed interval, no option for it). `--quiet` logs warnings and errors only (by
default a worker logs INFO lines for every job it takes and ends). Nothing else is
tuned: default job, result and worker TTLs.

Acks: not after completion in the redelivery sense. Dequeueing moves the job id (BLMOVE)
to an intermediate list and then into the StartedJobRegistry, where it stays until it
finishes; a job whose worker dies is found there by maintenance and marked failed
(AbandonedJobError), run again only if it was enqueued with a Retry.

Measures: enqueue_one (`Queue.enqueue`), enqueue_bulk (`Queue.enqueue_many` of
`Queue.prepare_data`, 1,000 jobs a call), fill (enqueue_many), drain, latency and
lateness (`Queue.enqueue_at` with an aware UTC datetime). RQ scores scheduled jobs in
whole seconds (the due time truncated), so a job can start up to 1 s before it is due
and lateness percentiles can be negative.

Not ratelimit: RQ 3's `RateLimit(key, concurrency)` caps how many jobs of a key are
queued or running at once; it has no limit on starts per second.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from rq import Queue

from bench.peers import common, rq_tasks

BATCH = 1000
SIMPLE = ["--worker-class", "rq.worker.SimpleWorker"]
WORKER_OPTIONS: dict[str, list[str]] = {"fork": [], "simple": SIMPLE}


def _queue(url: str) -> Queue:
    return Queue(common.QUEUE, connection=common.conn(url))


def _workers(url: str, variant: str, scheduler: bool = False) -> common.Workers:
    argv = [common.bin_of("rq"), "worker", "--url", url, "--quiet", *WORKER_OPTIONS[variant]]
    argv.append(common.QUEUE)
    if scheduler:
        argv.append("--with-scheduler")
    return common.Workers([argv, argv], url)


def _put_many(q: Queue, func: Callable[..., None], args: tuple[Any, ...], n: int) -> None:
    for offset in range(0, n, BATCH):
        q.enqueue_many([Queue.prepare_data(func, args) for _ in range(min(BATCH, n - offset))])


def enqueue_one(url: str, n: int, variant: str = "fork") -> dict[str, float]:
    q = _queue(url)
    started = time.perf_counter()
    for _ in range(n):
        q.enqueue(rq_tasks.noop, common.PAYLOAD)
    return common.rate(n, started)


def enqueue_bulk(url: str, n: int, variant: str = "fork") -> dict[str, float]:
    q = _queue(url)
    started = time.perf_counter()
    _put_many(q, rq_tasks.noop, (common.PAYLOAD,), n)
    return common.rate(n, started)


def fill(url: str, n: int, variant: str = "fork") -> dict[str, Any]:
    _put_many(_queue(url), rq_tasks.noop, (common.PAYLOAD,), n)
    return {}


def drain(url: str, n: int, variant: str = "fork") -> dict[str, float]:
    _put_many(_queue(url), rq_tasks.count, (), n)
    with _workers(url, variant):
        return common.drained(url, n)


def _put(url: str) -> Callable[[int], None]:
    q = _queue(url)

    def put(i: int) -> None:
        q.enqueue(rq_tasks.stamp, i)

    return put


def latency(url: str, n: int, variant: str = "fork") -> dict[str, Any]:
    with _workers(url, variant):
        return common.latency_of(url, n, _put(url))


def lateness(url: str, n: int, variant: str = "fork") -> dict[str, Any]:
    q = _queue(url)

    def put_at(i: int, due: float) -> None:
        q.enqueue_at(datetime.fromtimestamp(due, tz=UTC), rq_tasks.stamp, i)

    with _workers(url, variant, scheduler=True):
        return common.lateness_of(url, n, put_at, _put(url))


if __name__ == "__main__":
    sys.exit(common.main(sys.modules[__name__]))
