"""Celery (Redis broker) in the side-by-side benchmark.

Concurrency 2 is one `celery -A bench.peers.celery_tasks worker --pool prefork
--concurrency 2` node: a main process (consumer, event loop, timers) that hands
jobs to two forked pool child processes. `task_acks_late=True`, so a message is
acked by the main process only after the child reports the task done. The
prefetch multiplier keeps its default of 4 (up to 8 unacked messages per node):
1, 16 and 64 drained 3,000 jobs within the noise of 4, so none is clearly better;
the rest are Celery's defaults (no result backend, json, worker logging at WARNING).

Measures:
- enqueue_one: `noop.delay(PAYLOAD)` per job.
- enqueue_bulk: `noop.apply_async((PAYLOAD,), producer=producer)` per job inside
  kombu's `producer.batch(1000)` (kombu >= 5.7, a public API: the Redis transport
  buffers the LPUSHes in a non-transactional pipeline, flushed every 1,000). The
  canvas way, `group(noop.s(PAYLOAD) ...).apply_async()`, publishes one LPUSH round
  trip per message and adds group headers: about half the rate here (0.8x
  when run inside the same batch context), so the faster public API is used.
- fill: enqueue_bulk.
- drain: 20,000 `count` tasks queued as enqueue_bulk does, then the worker started.
- latency: `stamp.delay(i)`; lateness: `stamp.apply_async((i,), eta=due)` (Celery
  hands ETA tasks to the worker at once, which holds them unacked until due).
- ratelimit: Celery's `rate_limit="20/s"` is per task type and per worker node, not
  per key; the limited key is the task type `stamp_limited` (rate_limit 20/s), the
  free key the task type `stamp` (no limit). Jobs over the limit wait in the
  worker's memory (still unacked, holding prefetch slots) for a token.
"""

from __future__ import annotations

import importlib
import os
import sys
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any

from bench.peers import common, cost

TASKS = "bench.peers.celery_tasks"
BATCH = 1000


def _tasks(url: str) -> Any:
    """The tasks module, imported once the URL is known (it builds the app from it)."""
    os.environ[common.URL_ENV] = url
    return importlib.import_module(TASKS)


def _workers(url: str) -> common.Workers:
    argv = [
        common.bin_of("celery"),
        "-A",
        TASKS,
        "worker",
        "--pool",
        "prefork",
        "--concurrency",
        "2",
    ]
    return common.Workers([argv], url)


def _publish(app: Any, jobs: Iterable[tuple[Any, tuple[Any, ...]]]) -> None:
    """`task.apply_async(args)` for each job, pipelined by kombu's Producer.batch."""
    with app.producer_or_acquire() as producer, producer.batch(BATCH):
        for task, args in jobs:
            task.apply_async(args, producer=producer)


def enqueue_one(url: str, n: int) -> dict[str, Any]:
    noop = _tasks(url).noop
    return cost.timed_puts(url, n, lambda: noop.delay(common.PAYLOAD))


def enqueue_bulk(url: str, n: int) -> dict[str, float]:
    tasks = _tasks(url)
    started = time.perf_counter()
    _publish(tasks.app, ((tasks.noop, (common.PAYLOAD,)) for _ in range(n)))
    return common.rate(n, started)


def fill(url: str, n: int) -> dict[str, Any]:
    enqueue_bulk(url, n)
    return {}


def drain(url: str, n: int) -> dict[str, float]:
    tasks = _tasks(url)
    _publish(tasks.app, ((tasks.count, ()) for _ in range(n)))
    with _workers(url):
        return common.drained(url, n)


def _put(url: str) -> Callable[[int], None]:
    stamp = _tasks(url).stamp
    return stamp.delay


def latency(url: str, n: int) -> dict[str, Any]:
    with _workers(url):
        return common.latency_of(url, n, _put(url))


def lateness(url: str, n: int) -> dict[str, Any]:
    stamp = _tasks(url).stamp

    def put_at(i: int, due: float) -> None:
        stamp.apply_async((i,), eta=datetime.fromtimestamp(due, UTC))

    with _workers(url):
        return common.lateness_of(url, n, put_at, _put(url))


def ratelimit(url: str, seconds: float) -> dict[str, Any]:
    tasks = _tasks(url)
    limited, free = common.STAMPS + ":limited", common.STAMPS + ":free"
    jobs = [
        (tasks.stamp_limited, (i, limited)) if is_limited else (tasks.stamp, (i, free))
        for is_limited, i in common.plan(seconds)
    ]
    _publish(tasks.app, jobs)
    with _workers(url):
        return common.limited(url, seconds)


if __name__ == "__main__":
    sys.exit(common.main(sys.modules[__name__]))
