"""runtime: one master (`runtime worker`) with two forked children; acks after
completion (a lease, renewed by the master, ended by `complete`).

Variants of the drain: "p0", the same master with `--prefetch 0 --pipeline 0` (no
job leased ahead of an idle child, none queued behind a running one); "4x1", four
masters of `--concurrency 1` on the one Redis (four children in all).

Every measure runs with runtime's defaults, as a user runs it: `compact-records`
unset, so queued jobs are stored compact (no master of an earlier release is
registered on the benchmark's Redis; README, Upgrading). BENCH_RUNTIME_COMPACT=0
or 1 sets the setting for a measure of one form."""

from __future__ import annotations

import os
import sys
import time
import uuid
from typing import Any

from bench.peers import common, cost
from runtime import Client

TASKS = "bench.peers.runtime_tasks"
BATCH = 1000


def _client(url: str) -> Client:
    client = Client.from_url(url)
    if forced := os.environ.get("BENCH_RUNTIME_COMPACT"):
        client.admin.config_set("compact-records", forced)
    return client


VARIANTS = {
    "": (1, ["--concurrency", "2"]),
    "p0": (1, ["--concurrency", "2", "--prefetch", "0", "--pipeline", "0"]),
    "4x1": (4, ["--concurrency", "1"]),
}


def _workers(url: str, variant: str = "") -> common.Workers:
    masters, args = VARIANTS[variant]
    argv = [
        common.bin_of("runtime"),
        "worker",
        TASKS,
        "--queues",
        common.QUEUE,
        *args,
        *os.environ.get("BENCH_RUNTIME_ARGS", "").split(),
    ]
    state = f"/tmp/rt-bench-{uuid.uuid4().hex[:8]}"  # shared: each master's id is host-pid
    return common.Workers([argv] * masters, url, REDIS_URL=url, RUNTIME_STATE_DIR=state)


def enqueue_one(url: str, n: int) -> dict[str, Any]:
    q = _client(url).queue(common.QUEUE)
    return cost.timed_puts(url, n, lambda: q.put(f"{TASKS}:noop", common.PAYLOAD))


def enqueue_bulk(url: str, n: int) -> dict[str, float]:
    client = _client(url)
    q = client.queue(common.QUEUE)
    started = time.perf_counter()
    for offset in range(0, n, BATCH):
        client.put_many(
            q.spec(f"{TASKS}:noop", common.PAYLOAD) for _ in range(min(BATCH, n - offset))
        )
    return common.rate(n, started)


def fill(url: str, n: int) -> dict[str, Any]:
    enqueue_bulk(url, n)
    return {}


def drain(url: str, n: int, variant: str = "") -> dict[str, Any]:
    client = _client(url)
    q = client.queue(common.QUEUE)
    for offset in range(0, n, BATCH):
        client.put_many(q.spec(f"{TASKS}:count") for _ in range(min(BATCH, n - offset)))
    with _workers(url, variant):
        return common.drained(url, n)


def _put(url: str) -> Any:
    q = _client(url).queue(common.QUEUE)
    return lambda i: q.put(f"{TASKS}:stamp", {"n": i})


def latency(url: str, n: int) -> dict[str, Any]:
    with _workers(url):
        return common.latency_of(url, n, _put(url))


def lateness(url: str, n: int) -> dict[str, Any]:
    q = _client(url).queue(common.QUEUE)
    with _workers(url):
        return common.lateness_of(
            url, n, lambda i, due: q.put(f"{TASKS}:stamp", {"n": i}, at=due), _put(url)
        )


def ratelimit(url: str, seconds: float) -> dict[str, Any]:
    client = _client(url)
    client.set_domain_limit(common.LIMIT_KEY, common.LIMIT_RATE, 1.0)
    q = client.queue(common.QUEUE)
    specs = []
    for is_limited, i in common.plan(seconds):
        key, domain = (":limited", common.LIMIT_KEY) if is_limited else (":free", common.FREE_KEY)
        specs.append(q.spec(f"{TASKS}:stamp", {"n": i, "key": common.STAMPS + key}, domain=domain))
    for offset in range(0, len(specs), BATCH):
        client.put_many(specs[offset : offset + BATCH])
    with _workers(url):
        return common.limited(url, seconds)


if __name__ == "__main__":
    sys.exit(common.main(sys.modules[__name__]))
