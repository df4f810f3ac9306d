"""saq 0.26 (Redis queue): asyncio jobs in Redis lists, workers started by the `saq` CLI.

Concurrency 2 (--variant):
  procs (default)  two processes `saq bench.peers.saq_tasks.procs`, concurrency=1 each
                   (what `saq --workers 2` forks, but as two processes common.Workers
                   signals itself: a `--workers` child is not stopped by its parent);
  async            one process `saq bench.peers.saq_tasks.concurrent`, concurrency=2
                   (two dequeue-and-run loops as asyncio tasks on one event loop).
All other worker settings are saq's defaults (see saq_tasks), logging included: the CLI
logs errors only unless given -v.

How workers wait: each dequeue loop blocks in BLMOVE queued -> active (dequeue_timeout
0: no timeout), so a queued job is taken as soon as it is pushed; no polling for ready
jobs. Scheduled jobs (`scheduled=` epoch seconds, here the float due time) wait in a
sorted set that each worker moves to the queue in its `schedule` upkeep task, every
1 s (timers["schedule"]) under a 1 s lock shared by all workers: expect 0-1 s of
lateness, ~0.5 s on average.

Ack: the job stays in the `active` list until it ends, so it is not silently dropped,
but a job whose worker dies mid-job is only found by the sweep (every 60 s) once it
is "stuck", past its timeout (10 s by default), and with the default retries=1 it is
then marked aborted ("swept"), not rerun: lost unless the job allows retries. On
SIGTERM a worker cancels its running jobs and puts them back in the queue.

Not supported: enqueue_bulk (saq has no batch put: Queue.map/apply enqueue one job per
call concurrently and wait for the results, Queue.batch only aborts the jobs put within
it on an error) and ratelimit (saq has no rate limiter; Postgres group_key only
serialises a group).

fill and drain put their jobs 100 enqueue calls at a time (asyncio.gather; saq itself
allows 20 in flight) only to be quick: neither measure times the putting.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from saq.queue.redis import RedisQueue

from bench.peers import common

TASKS = "bench.peers.saq_tasks"
VARIANTS = {"procs": ("procs", 2), "async": ("concurrent", 1)}  # settings, processes
CHUNK = 100


def _workers(url: str, variant: str) -> common.Workers:
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}, expected one of {', '.join(VARIANTS)}")
    settings, processes = VARIANTS[variant]
    argv = [common.bin_of("saq"), f"{TASKS}.{settings}"]
    return common.Workers([argv] * processes, url)


async def _queue(url: str) -> RedisQueue:
    queue = RedisQueue.from_url(url, name=common.QUEUE)
    await queue.connect()
    return queue


async def _enqueue_one(url: str, n: int) -> dict[str, float]:
    queue = await _queue(url)
    started = time.perf_counter()
    for _ in range(n):
        await queue.enqueue("noop", **common.PAYLOAD)
    result = common.rate(n, started)
    await queue.disconnect()
    return result


async def _put_many(url: str, n: int, function: str, **kwargs: Any) -> None:
    queue = await _queue(url)
    for offset in range(0, n, CHUNK):
        jobs = (queue.enqueue(function, **kwargs) for _ in range(min(CHUNK, n - offset)))
        await asyncio.gather(*jobs)
    await queue.disconnect()


@contextmanager
def _blocking_queue(url: str) -> Iterator[tuple[asyncio.Runner, RedisQueue]]:
    """A queue whose calls the blocking measuring code of common can make one by one."""
    with asyncio.Runner() as runner:
        queue = runner.run(_queue(url))
        try:
            yield runner, queue
        finally:
            runner.run(queue.disconnect())


def _put(runner: asyncio.Runner, queue: RedisQueue) -> Callable[[int], None]:
    def put(i: int) -> None:
        runner.run(queue.enqueue("stamp", n=i))

    return put


def _put_at(runner: asyncio.Runner, queue: RedisQueue) -> Callable[[int, float], None]:
    def put_at(i: int, due: float) -> None:
        runner.run(queue.enqueue("stamp", n=i, scheduled=due))

    return put_at


def enqueue_one(url: str, n: int) -> dict[str, float]:
    return asyncio.run(_enqueue_one(url, n))


def fill(url: str, n: int) -> dict[str, Any]:
    asyncio.run(_put_many(url, n, "noop", **common.PAYLOAD))
    return {}


def drain(url: str, n: int, variant: str = "procs") -> dict[str, float]:
    asyncio.run(_put_many(url, n, "count"))
    with _workers(url, variant):
        return common.drained(url, n)


def latency(url: str, n: int, variant: str = "procs") -> dict[str, Any]:
    with _blocking_queue(url) as (runner, queue), _workers(url, variant):
        return common.latency_of(url, n, _put(runner, queue))


def lateness(url: str, n: int, variant: str = "procs") -> dict[str, Any]:
    with _blocking_queue(url) as (runner, queue), _workers(url, variant):
        return common.lateness_of(url, n, _put_at(runner, queue), _put(runner, queue))


if __name__ == "__main__":
    sys.exit(common.main(sys.modules[__name__]))
