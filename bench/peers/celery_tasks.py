"""Celery's benchmark app and tasks (Redis broker, no result backend).

The broker URL comes from BENCH_REDIS_URL; kombu spells a unix socket
`redis+socket:///path` rather than redis-py's `unix:///path`. Settings apart from
Celery's defaults: `task_acks_late=True` (the message is acked after the task
returns) and `task_default_queue` (the benchmark's queue name); the prefetch
multiplier stays at its default of 4.
"""

from __future__ import annotations

import os
from typing import Any

from celery import Celery

from bench.peers import common


def broker_url(url: str) -> str:
    """redis-py's URL as kombu wants it."""
    if url.startswith("unix://"):
        return "redis+socket://" + url.removeprefix("unix://")
    return url


app = Celery("bench", broker=broker_url(os.environ[common.URL_ENV]))
app.conf.update(task_acks_late=True, task_default_queue=common.QUEUE)


@app.task
def noop(data: dict[str, Any]) -> None:
    """Never run: only queued for the enqueue and memory measures."""


@app.task
def count() -> None:
    common.job_count()


@app.task
def stamp(n: int, key: str = common.STAMPS) -> None:
    common.job_stamp(n, key)


@app.task(rate_limit=f"{common.LIMIT_RATE}/s")
def stamp_limited(n: int, key: str = common.STAMPS) -> None:
    """The rate-limited task type: Celery limits per task type and worker node."""
    common.job_stamp(n, key)
