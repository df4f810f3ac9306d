"""arq's benchmark jobs and worker settings (run as `arq bench.peers.arq_tasks.PROCS`).

Jobs are coroutines taking arq's context dict; they count and stamp through one
redis.asyncio client per worker process, made in the `on_startup` hook and closed in
`on_shutdown`. Everything not set below is arq's default (pickle, keep_result 3600 s,
job_timeout 300 s, max_tries 5) except its logging and poll_delay. arq's CLI logs
every job's start and end at INFO and has no quiet flag: the workers get
`--custom-log-dict bench.peers.arq_tasks.QUIET_LOG`, arq's own handler at WARNING
(a production worker's setting; runtime logs nothing for a job that succeeds).
poll_delay: arq
starts at most max_jobs jobs per poll of its queue and then sleeps poll_delay, so its
default of 0.5 s caps concurrency 2 at 4 jobs/s; 10 ms lets it show its speed.
"""

from __future__ import annotations

import os
import time
from typing import Any

import redis.asyncio as aioredis
from arq.connections import RedisSettings

from bench.peers import common

Ctx = dict[str, Any]
POLL_DELAY_S = 0.01  # arq's default is 0.5 s (see the module docstring)
# arq's default logging config (arq.logs.default_log_config) at WARNING instead of INFO
QUIET_LOG: dict[str, Any] = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"arq.standard": {"level": "WARNING", "class": "logging.StreamHandler"}},
    "loggers": {"arq": {"handlers": ["arq.standard"], "level": "WARNING"}},
}


async def startup(ctx: Ctx) -> None:
    ctx["bench"] = aioredis.Redis.from_url(os.environ[common.URL_ENV])


async def shutdown(ctx: Ctx) -> None:
    await ctx["bench"].aclose()


async def noop(ctx: Ctx, data: dict[str, Any]) -> None:
    """Never run: only queued for the enqueue and memory measures."""


async def count(ctx: Ctx) -> None:
    await ctx["bench"].incr(common.COUNTER)


async def stamp(ctx: Ctx, n: int, key: str = common.STAMPS) -> None:
    await ctx["bench"].rpush(key, f"{n} {time.time()}")


def _settings(max_jobs: int) -> dict[str, Any]:
    """A settings dict (arq reads a class's own __dict__ only, so no subclassing)."""
    return {
        "functions": [noop, count, stamp],
        "queue_name": common.QUEUE,
        "redis_settings": RedisSettings.from_dsn(os.environ[common.URL_ENV]),
        "on_startup": startup,
        "on_shutdown": shutdown,
        "max_jobs": max_jobs,
        "poll_delay": POLL_DELAY_S,
    }


PROCS = _settings(max_jobs=1)  # one job at a time: two of these processes
ASYNC = _settings(max_jobs=2)  # up to two jobs at once in one process
