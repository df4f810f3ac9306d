"""The reference, not a job system: two processes of a bare redis-py loop (BLMOVE,
the job, LREM; bench/peers/bare_tasks.py) on a plain list. No record, no retry,
no statistics: the least a reliable queue can send to Redis, against which the
others' cost is read.

Measures: enqueue_one (an LPUSH of the 100-byte payload per job), enqueue_bulk
(LPUSH of 1,000 items a call), fill (enqueue_bulk), drain (`count` items, two
worker processes) and latency (`stamp N` items). Not lateness or ratelimit: a
list has no due time and no limit.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from bench.peers import common, cost
from bench.peers.bare_tasks import QUEUE

TASKS = "bench.peers.bare_tasks"
BATCH = 1000
ITEM = json.dumps(common.PAYLOAD)


def _workers(url: str) -> common.Workers:
    return common.Workers([[sys.executable, "-m", TASKS]] * 2, url)


def enqueue_one(url: str, n: int) -> dict[str, Any]:
    r = common.conn(url)
    return cost.timed_puts(url, n, lambda: r.lpush(QUEUE, ITEM))


def _bulk(url: str, items: list[str]) -> None:
    r = common.conn(url)
    for offset in range(0, len(items), BATCH):
        r.lpush(QUEUE, *items[offset : offset + BATCH])


def enqueue_bulk(url: str, n: int) -> dict[str, float]:
    started = time.perf_counter()
    _bulk(url, [ITEM] * n)
    return common.rate(n, started)


def fill(url: str, n: int) -> dict[str, Any]:
    _bulk(url, [ITEM] * n)
    return {}


def drain(url: str, n: int) -> dict[str, Any]:
    _bulk(url, ["count"] * n)
    with _workers(url):
        return common.drained(url, n)


def latency(url: str, n: int) -> dict[str, Any]:
    r = common.conn(url)
    with _workers(url):
        return common.latency_of(url, n, lambda i: r.lpush(QUEUE, f"stamp {i}"))


if __name__ == "__main__":
    sys.exit(common.main(sys.modules[__name__]))
