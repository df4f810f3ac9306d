"""Huey's benchmark tasks on a RedisHuey named after the queue.

The Redis URL comes from BENCH_REDIS_URL, which common.Workers sets for the consumer
and common.main sets before a measure runs (the adapter imports this module then).
"""

from __future__ import annotations

import os
from typing import Any

from huey import RedisHuey

from bench.peers import common

huey = RedisHuey(common.QUEUE, url=os.environ[common.URL_ENV])
limit = huey.rate_limit(common.LIMIT_KEY, common.LIMIT_RATE, 1)


@huey.task()
def noop(data: Any = None) -> None:
    """Never run: only queued for the enqueue and memory measures."""


@huey.task()
def count() -> None:
    common.job_count()


@huey.task()
def stamp(n: int, key: str = common.STAMPS) -> None:
    common.job_stamp(n, key)


@huey.task()
@limit
def stamp_limited(n: int, key: str = common.STAMPS) -> None:
    """Stamps only while the key's fixed 1 s window has room; Huey retries it after
    the window otherwise (RateLimitExceeded with retry=True)."""
    common.job_stamp(n, key)
