"""saq's benchmark jobs and worker settings (run as `saq bench.peers.saq_tasks.procs`).

Jobs are coroutines taking saq's context dict and the job's kwargs; they count and
stamp through one redis.asyncio client per worker process, made in the `startup` hook
and closed in `shutdown`. Everything not set below is saq's default (dequeue_timeout 0,
i.e. a blocking BLMOVE; timers: schedule 1 s, sweep 60 s, abort 1 s, worker_info 10 s).
"""

from __future__ import annotations

import os
import time
from typing import Any

import redis.asyncio as aioredis
from saq.queue.redis import RedisQueue

from bench.peers import common

Ctx = Any  # saq.types.Context, a TypedDict this module adds a key to


async def startup(ctx: Ctx) -> None:
    ctx["bench"] = aioredis.Redis.from_url(os.environ[common.URL_ENV])


async def shutdown(ctx: Ctx) -> None:
    await ctx["bench"].aclose()


async def noop(ctx: Ctx, **data: Any) -> None:
    """Never run: only queued for the enqueue and memory measures."""


async def count(ctx: Ctx) -> None:
    await ctx["bench"].incr(common.COUNTER)


async def stamp(ctx: Ctx, *, n: int) -> None:
    """Stamps common.STAMPS only: `key` would name the job itself in Queue.enqueue."""
    await ctx["bench"].rpush(common.STAMPS, f"{n} {time.time()}")


def _settings(concurrency: int) -> dict[str, Any]:
    # RedisQueue directly: saq's Queue.from_url accepts redis:// URLs only, not unix://
    queue = RedisQueue.from_url(os.environ[common.URL_ENV], name=common.QUEUE)
    return {
        "queue": queue,
        "functions": [noop, count, stamp],
        "startup": startup,
        "shutdown": shutdown,
        "concurrency": concurrency,
    }


def procs() -> dict[str, Any]:
    """One job at a time: two of these processes."""
    return _settings(concurrency=1)


def concurrent() -> dict[str, Any]:
    """Up to two jobs at once in one process."""
    return _settings(concurrency=2)
