"""Dramatiq (Redis broker) in the side-by-side benchmark.

Concurrency 2 is `dramatiq bench.peers.dramatiq_tasks --processes 2 --threads 1`:
a supervising main process that forks two worker processes, each with one worker
thread running actors (plus its consumer threads). Dramatiq acks after completion:
a fetched message id sits in the worker's ack set until the actor returns (or its
retry is enqueued), and is requeued if the worker's heartbeat stops. Everything
else is Dramatiq's default: default middleware (Retries: 20 retries, backoff from
15 s), queue prefetch 2 per worker process (threads * 2), worker_timeout 1 s,
logging at INFO (the CLI's default; Dramatiq logs a message only at DEBUG, so
nothing per job). The "prefetch" variant sets Dramatiq's documented
`dramatiq_queue_prefetch` to 64: with one thread and a prefetch of 2 the consumer
sleeps (backing off up to worker_timeout) whenever its two messages are unacked,
which caps the default at a few hundred short jobs per second. The "2x8" variant
runs `--threads 8` (Dramatiq's default), so a prefetch of 16 per process: two
processes of eight threads each.

Measures:
- enqueue_one: `noop.send(PAYLOAD)` per job (one Lua script call each).
- enqueue_bulk: not supported. RedisBroker has no batch enqueue: `group(...).run()`
  is a loop of `broker.enqueue`, one script call per message (the same as
  enqueue_one), and `pipeline(...)` chains jobs (each enqueues the next when it
  finishes), so neither is a batch API.
- fill: n `noop.send(PAYLOAD)` calls (there is no bulk path).
- drain: 20,000 `count.send()` calls, then the workers started.
- latency: `stamp.send(i)`; lateness: `stamp.send_with_options(args=(i,),
  delay=ms)`, the delay counted to the due time (the worker holds delayed
  messages from the delay queue in memory and moves them to the queue when due).
- ratelimit: the stamp actor takes Dramatiq's WindowRateLimiter (20 per 1 s
  window, Redis backend) on the limited key; the free key's jobs take no limiter.
  A job over the limit raises RateLimitExceeded, fails, and the Retries
  middleware re-enqueues it with its default exponential backoff (15 s, 30 s, ...
  with jitter): the limit holds, but the limited key's jobs run in bursts.
"""

from __future__ import annotations

import importlib
import os
import sys
import time
from collections.abc import Callable
from typing import Any

from bench.peers import common, cost

TASKS = "bench.peers.dramatiq_tasks"


def _tasks(url: str) -> Any:
    """The tasks module, imported once the URL is known (it builds the broker from it)."""
    os.environ[common.URL_ENV] = url
    return importlib.import_module(TASKS)


TUNED_PREFETCH = "64"  # the "prefetch" variant: dramatiq_queue_prefetch (default threads * 2)


def _workers(url: str, variant: str) -> common.Workers:
    threads = "8" if variant == "2x8" else "1"
    argv = [common.bin_of("dramatiq"), TASKS, "--processes", "2", "--threads", threads]
    env = {"dramatiq_queue_prefetch": TUNED_PREFETCH} if variant == "prefetch" else {}
    return common.Workers([argv], url, **env)


def enqueue_one(url: str, n: int) -> dict[str, Any]:
    noop = _tasks(url).noop
    return cost.timed_puts(url, n, lambda: noop.send(common.PAYLOAD))


def fill(url: str, n: int) -> dict[str, Any]:
    enqueue_one(url, n)
    return {}


def drain(url: str, n: int, variant: str = "") -> dict[str, float]:
    count = _tasks(url).count
    for _ in range(n):
        count.send()
    with _workers(url, variant):
        return common.drained(url, n)


def _put(url: str) -> Callable[[int], None]:
    stamp = _tasks(url).stamp
    return stamp.send


def latency(url: str, n: int, variant: str = "") -> dict[str, Any]:
    with _workers(url, variant):
        return common.latency_of(url, n, _put(url))


def lateness(url: str, n: int, variant: str = "") -> dict[str, Any]:
    stamp = _tasks(url).stamp

    def put_at(i: int, due: float) -> None:
        stamp.send_with_options(args=(i,), delay=max(0, round((due - time.time()) * 1000)))

    with _workers(url, variant):
        return common.lateness_of(url, n, put_at, _put(url))


def ratelimit(url: str, seconds: float, variant: str = "") -> dict[str, Any]:
    stamp = _tasks(url).stamp
    for is_limited, i in common.plan(seconds):
        if is_limited:
            stamp.send(i, common.STAMPS + ":limited", common.LIMIT_KEY)
        else:
            stamp.send(i, common.STAMPS + ":free", common.FREE_KEY)
    with _workers(url, variant):
        return common.limited(url, seconds)


if __name__ == "__main__":
    sys.exit(common.main(sys.modules[__name__]))
