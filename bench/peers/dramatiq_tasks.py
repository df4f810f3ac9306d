"""Dramatiq's benchmark broker and actors (Redis broker, default middleware).

The broker URL comes from BENCH_REDIS_URL (redis-py reads `unix:///path` itself).
The rate limit of the limited key is Dramatiq's own: a WindowRateLimiter (20 per
1 s window) on a Redis rate-limiter backend, taken inside the stamp actor.
"""

from __future__ import annotations

import os
from typing import Any

import dramatiq
from dramatiq.brokers.redis import RedisBroker
from dramatiq.rate_limits import WindowRateLimiter
from dramatiq.rate_limits.backends import RedisBackend

from bench.peers import common

broker = RedisBroker(url=os.environ[common.URL_ENV])
dramatiq.set_broker(broker)
LIMITERS = {
    common.LIMIT_KEY: WindowRateLimiter(
        RedisBackend(url=os.environ[common.URL_ENV]),
        common.LIMIT_KEY,
        limit=common.LIMIT_RATE,
        window=1,
    )
}


@dramatiq.actor(queue_name=common.QUEUE)
def noop(data: dict[str, Any]) -> None:
    """Never run: only queued for the enqueue and memory measures."""


@dramatiq.actor(queue_name=common.QUEUE)
def count() -> None:
    common.job_count()


@dramatiq.actor(queue_name=common.QUEUE)
def stamp(n: int, key: str = common.STAMPS, domain: str = "") -> None:
    """Stamps; under the domain's rate limiter if it has one, which raises
    RateLimitExceeded when the window is full (Retries then retries with backoff)."""
    limiter = LIMITERS.get(domain)
    if limiter is None:
        common.job_stamp(n, key)
        return
    with limiter.acquire():
        common.job_stamp(n, key)
