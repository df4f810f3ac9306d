"""arq 0.28: asyncio jobs in a Redis sorted set, workers started by the `arq` CLI.

Concurrency 2 (--variant):
  procs (default)  two processes `arq bench.peers.arq_tasks.PROCS`, max_jobs=1 each;
  async            one process `arq bench.peers.arq_tasks.ASYNC`, max_jobs=2 (two jobs
                   as asyncio tasks on one event loop).
All other worker settings are arq's defaults but poll_delay and logging (warnings and
errors only: arq logs every job at INFO by default; see arq_tasks).

How workers wait: they poll. Every poll_delay a worker reads up to
max(5 * max_jobs, 100) due ids from the queue's sorted set (ZRANGEBYSCORE up to now)
and starts as many as it has free slots; a finishing job does not wake it. So each job
slot starts at most one job per poll: with arq's default poll_delay of 0.5 s,
concurrency 2 runs at most ~4 jobs/s whatever the job, and latency at 50 jobs/s grows
without bound. The benchmark runs arq with poll_delay 10 ms (arq_tasks.POLL_DELAY_S):
put-to-start latency and lateness then include 0-10 ms of polling, and a slot starts
at most 100 jobs/s.

Ack: after completion. A started job stays in the queue; the worker only sets
`arq:in-progress:<id>` (TTL job_timeout + 10 s = 310 s) and removes the job when it
ends. A job whose worker dies mid-job is rerun (up to max_tries=5) once that key
expires, i.e. ~310 s later; on SIGTERM the worker cancels it and it is rerun at once.

Not supported: enqueue_bulk (arq has no batch API: ArqRedis.enqueue_job is the only
way to put a job, a WATCH/EXISTS/MULTI/PSETEX/ZADD/EXEC round per job) and ratelimit
(arq has no rate limiter).

fill and drain put their jobs 100 enqueue_job calls at a time (asyncio.gather) only to
be quick: neither measure times the putting.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from arq.connections import ArqRedis, RedisSettings, create_pool

from bench.peers import common

TASKS = "bench.peers.arq_tasks"
VARIANTS = {"procs": ("PROCS", 2), "async": ("ASYNC", 1)}  # settings, processes
CHUNK = 100


def _workers(url: str, variant: str) -> common.Workers:
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}, expected one of {', '.join(VARIANTS)}")
    settings, processes = VARIANTS[variant]
    argv = [common.bin_of("arq"), f"{TASKS}.{settings}", "--custom-log-dict", f"{TASKS}.QUIET_LOG"]
    return common.Workers([argv] * processes, url)


async def _pool(url: str) -> ArqRedis:
    return await create_pool(RedisSettings.from_dsn(url), default_queue_name=common.QUEUE)


async def _enqueue_one(url: str, n: int) -> dict[str, float]:
    pool = await _pool(url)
    started = time.perf_counter()
    for _ in range(n):
        await pool.enqueue_job("noop", common.PAYLOAD)
    result = common.rate(n, started)
    await pool.aclose()
    return result


async def _put_many(url: str, n: int, function: str, *args: Any) -> None:
    pool = await _pool(url)
    for offset in range(0, n, CHUNK):
        jobs = (pool.enqueue_job(function, *args) for _ in range(min(CHUNK, n - offset)))
        await asyncio.gather(*jobs)
    await pool.aclose()


@contextmanager
def _blocking_pool(url: str) -> Iterator[tuple[asyncio.Runner, ArqRedis]]:
    """A pool whose calls the blocking measuring code of common can make one by one."""
    with asyncio.Runner() as runner:
        pool = runner.run(_pool(url))
        try:
            yield runner, pool
        finally:
            runner.run(pool.aclose())


def _put(runner: asyncio.Runner, pool: ArqRedis) -> Callable[[int], None]:
    def put(i: int) -> None:
        runner.run(pool.enqueue_job("stamp", i))

    return put


def _put_at(runner: asyncio.Runner, pool: ArqRedis) -> Callable[[int, float], None]:
    def put_at(i: int, due: float) -> None:
        when = datetime.fromtimestamp(due, tz=UTC)
        runner.run(pool.enqueue_job("stamp", i, _defer_until=when))

    return put_at


def enqueue_one(url: str, n: int) -> dict[str, float]:
    return asyncio.run(_enqueue_one(url, n))


def fill(url: str, n: int) -> dict[str, Any]:
    asyncio.run(_put_many(url, n, "noop", common.PAYLOAD))
    return {}


def drain(url: str, n: int, variant: str = "procs") -> dict[str, float]:
    asyncio.run(_put_many(url, n, "count"))
    with _workers(url, variant):
        return common.drained(url, n)


def latency(url: str, n: int, variant: str = "procs") -> dict[str, Any]:
    with _blocking_pool(url) as (runner, pool), _workers(url, variant):
        return common.latency_of(url, n, _put(runner, pool))


def lateness(url: str, n: int, variant: str = "procs") -> dict[str, Any]:
    with _blocking_pool(url) as (runner, pool), _workers(url, variant):
        return common.lateness_of(url, n, _put_at(runner, pool), _put(runner, pool))


if __name__ == "__main__":
    sys.exit(common.main(sys.modules[__name__]))
