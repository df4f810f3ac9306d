"""Core operations from one Python process: put (one at a time and batched),
pop+complete round trips, Redis bytes per queued job; next to redis-benchmark
(SET, LPUSH, a trivial EVALSHA) on the same server as the physical reference."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

from bench import jobs
from bench.server import connect, private_server, redis_benchmark
from runtime import Client
from runtime.queue.embedded import ServerProcess

KLASS = "bench.jobs:noop"


def _client(server: ServerProcess) -> Client:
    return Client.from_url(server.url, namespace="b" + uuid.uuid4().hex[:10])


def put_single(server: ServerProcess, n: int) -> float:
    client = _client(server)
    queue = client.queue("bench")
    start = time.perf_counter()
    for _ in range(n):
        queue.put(KLASS, jobs.DATA_100B)
    return n / (time.perf_counter() - start)


def put_batched(server: ServerProcess, n: int, batch: int = 1000) -> float:
    client = _client(server)
    queue = client.queue("bench")
    start = time.perf_counter()
    for offset in range(0, n, batch):
        client.put_many(queue.spec(KLASS, jobs.DATA_100B) for _ in range(min(batch, n - offset)))
    return n / (time.perf_counter() - start)


def _fill(client: Client, n: int) -> None:
    queue = client.queue("bench")
    for offset in range(0, n, 1000):
        client.put_many(queue.spec(KLASS, jobs.DATA_100B) for _ in range(min(1000, n - offset)))


def pop_complete(server: ServerProcess, n: int, batch: int) -> float:
    """Jobs per second through pop(batch) then complete of each job (batch 1:
    two round trips per job; more: one pop and one complete call per batch)."""
    client = _client(server)
    _fill(client, n)
    queue = client.queue("bench")
    done = 0
    start = time.perf_counter()
    while done < n:
        popped = queue.pop(batch, worker="bench-1")
        if batch == 1:
            for job in popped:
                job.complete()
        else:
            client.leases.complete_many("bench-1", {j.jid: j.token or "" for j in popped})
        done += len(popped)
    return n / (time.perf_counter() - start)


def bytes_per_queued_job(server: ServerProcess, n: int) -> dict[str, float]:
    conn = connect(server)
    conn.flushall()
    before = int(conn.info("memory")["used_memory"])
    client = _client(server)
    _fill(client, n)
    after = int(conn.info("memory")["used_memory"])
    record = conn.hget(client.keys.key("jobs"), next(iter(conn.hkeys(client.keys.key("jobs")))))
    conn.flushall()
    return {"bytes_per_job": (after - before) / n, "record_bytes": float(len(record or b""))}


def _runs(fn: Callable[[], float], repeat: int) -> list[float]:
    return [fn() for _ in range(repeat)]


def run(quick: bool = False) -> dict[str, Any]:
    n = 2000 if quick else 20_000
    repeat = 1 if quick else 3
    measures: dict[str, Any] = {}
    with private_server() as server:
        conn = connect(server)
        measures["put, one at a time (jobs/s)"] = _runs(lambda: put_single(server, n), repeat)
        conn.flushall()
        measures["put_many, batches of 1000 (jobs/s)"] = _runs(
            lambda: put_batched(server, n), repeat
        )
        conn.flushall()
        measures["pop 1 + complete 1, two round trips (jobs/s)"] = _runs(
            lambda: pop_complete(server, n, 1), repeat
        )
        conn.flushall()
        measures["pop 50 + complete_many 50 (jobs/s)"] = _runs(
            lambda: pop_complete(server, n, 50), repeat
        )
        conn.flushall()
        mem = [bytes_per_queued_job(server, 10_000 if quick else 100_000) for _ in range(repeat)]
        measures["Redis bytes per queued job (100-byte data)"] = [m["bytes_per_job"] for m in mem]
        measures["stored record of that job (bytes)"] = [m["record_bytes"] for m in mem]
        reference = redis_benchmark(server, clients=1, requests=20_000 if quick else 100_000)
        for name, rate in reference.items():
            measures[f"redis-benchmark {name}, 1 connection (ops/s)"] = [rate]
        reference = redis_benchmark(server, clients=50, requests=20_000 if quick else 200_000)
        for name, rate in reference.items():
            measures[f"redis-benchmark {name}, 50 connections (ops/s)"] = [rate]
    return {"jobs": n, "repeat": repeat, "measures": measures}
