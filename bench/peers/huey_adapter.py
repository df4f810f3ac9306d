"""Huey: one consumer, `huey_consumer bench.peers.huey_tasks.huey -k process -w 2 -q`, on a
RedisHuey (RedisStorage, its defaults: blocking BRPOP with a 1 s read timeout, pickle,
results kept only for tasks that return something, which these do not).

Concurrency 2 is the consumer's two worker processes (`-k process -w 2`), one task at a
time each; the consumer also runs its scheduler (1 s interval, Huey's smallest) in a
process of its own. `-q` (`--quiet`) logs warnings and errors only: by default the
consumer logs two INFO lines per task (executing, executed in), which a production
consumer turns off as runtime logs nothing for a job that succeeds. Nothing else is
tuned: with blocking reads the polling options (-d, -m, -b) never come into play.

Acks: no. A worker's BRPOP removes the message from the list before the task runs; a
worker that dies mid-task loses it.

Measures: enqueue_one (calling the task), fill (the same, one call per job), drain,
latency, lateness (`task.schedule(eta=...)`: the message goes to the queue, the worker
that pops it early puts it in the schedule, the scheduler enqueues it again once due)
and ratelimit (`huey.rate_limit(key, 20, 1)`: a fixed one-second window counted in
Redis; a task over the limit is rescheduled for the next window).

Not enqueue_bulk: Huey 3.5 has no batch enqueue. `task.map()` and `group` enqueue their
tasks one LPUSH at a time, and RedisStorage offers no pipelined enqueue, so a bulk
measure would only repeat enqueue_one.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from types import ModuleType
from typing import Any

from bench.peers import common, cost

TASKS = "bench.peers.huey_tasks"


def _tasks() -> ModuleType:
    """The tasks module, imported once common.main has set BENCH_REDIS_URL."""
    return importlib.import_module(TASKS)


def _workers(url: str) -> common.Workers:
    argv = [common.bin_of("huey_consumer"), f"{TASKS}.huey", "-k", "process", "-w", "2", "-q"]
    return common.Workers([argv], url)


def enqueue_one(url: str, n: int) -> dict[str, Any]:
    noop = _tasks().noop
    return cost.timed_puts(url, n, lambda: noop(common.PAYLOAD))


def fill(url: str, n: int) -> dict[str, Any]:
    enqueue_one(url, n)
    return {}


def drain(url: str, n: int) -> dict[str, float]:
    count = _tasks().count
    for _ in range(n):
        count()
    with _workers(url):
        return common.drained(url, n)


def _put() -> Callable[[int], None]:
    stamp = _tasks().stamp

    def put(i: int) -> None:
        stamp(i)

    return put


def latency(url: str, n: int) -> dict[str, Any]:
    with _workers(url):
        return common.latency_of(url, n, _put())


def lateness(url: str, n: int) -> dict[str, Any]:
    stamp = _tasks().stamp

    def put_at(i: int, due: float) -> None:
        stamp.schedule(args=(i,), eta=datetime.fromtimestamp(due, tz=UTC))

    with _workers(url):
        return common.lateness_of(url, n, put_at, _put())


def ratelimit(url: str, seconds: float) -> dict[str, Any]:
    tasks = _tasks()
    limited, free = common.STAMPS + ":limited", common.STAMPS + ":free"
    for is_limited, i in common.plan(seconds):
        if is_limited:
            tasks.stamp_limited(i, limited)
        else:
            tasks.stamp(i, free)
    with _workers(url):
        return common.limited(url, seconds)


if __name__ == "__main__":
    sys.exit(common.main(sys.modules[__name__]))
