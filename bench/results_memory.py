"""What a stored result costs (issue 12 target: at most 64 bytes per completed job
beyond the result's own size). Not a test: prints its numbers.

    .venv/bin/python -m bench.results_memory [--jobs 20000] [--result '{"sent":true}']

On a private redis-server, for each variant (no result, the small result) in a
fresh database: puts and pops N jobs, then completes them all (batches of
1000, as a master would), and reads the memory the completed jobs hold two
ways: INFO used_memory (the whole server) and MEMORY USAGE of the jobs hash
(SAMPLES 0: every field counted). The cost of the result per job is the
difference between the variants divided by N, less the result's own bytes.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from bench.server import connect, private_server
from runtime.queue import ops
from runtime.queue.api.client import Client
from runtime.queue.leases import CompleteRow

W = "bench-host"
BATCH = 1000


def _complete_all(client: Client, queue: str, jobs: int, result: str) -> None:
    """Pops every job of `queue` and completes it with `result`."""
    left = jobs
    while left > 0:
        popped = client.queue(queue).pop(min(BATCH, left), worker=W)
        rows = [CompleteRow(j.jid, j.token or "", "{}", result, "") for j in popped]
        client.conn.call(ops.complete(W, rows))
        left -= len(popped)


def _memory(raw: Any, key: str) -> tuple[int, int]:
    raw.execute_command("MEMORY", "PURGE")
    used = int(raw.info("memory")["used_memory"])
    return used, int(raw.memory_usage(key, samples=0) or 0)


def measure(jobs: int, result: str) -> dict[str, float]:
    """Bytes per completed job, with and without `result`, and the difference."""
    out: dict[str, float] = {}
    with private_server(tcp=True) as server:
        raw = connect(server)
        for name, text in (("without", ""), ("with", result)):
            raw.flushall()
            client = Client.from_url(server.url, namespace="bench")
            client.admin.config_set("jobs-history-count", jobs * 2)
            client.put_many(client.queue("q").spec("app.jobs:send", {"n": i}) for i in range(jobs))
            used_before, _ = _memory(raw, client.keys.key("jobs"))
            _complete_all(client, "q", jobs, text)
            used_after, jobs_hash = _memory(raw, client.keys.key("jobs"))
            out[f"used_memory per job {name} result (bytes)"] = (used_after - used_before) / jobs
            out[f"jobs hash per job {name} result (bytes)"] = jobs_hash / jobs
            client.close()
    size = len(result.encode())
    out["result size (bytes)"] = size
    out["result cost beyond its size, used_memory (bytes/job)"] = (
        out["used_memory per job with result (bytes)"]
        - out["used_memory per job without result (bytes)"]
        - size
    )
    out["result cost beyond its size, jobs hash (bytes/job)"] = (
        out["jobs hash per job with result (bytes)"]
        - out["jobs hash per job without result (bytes)"]
        - size
    )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--result", default='{"sent":true}')
    args = parser.parse_args()
    started = time.monotonic()
    for name, value in measure(args.jobs, args.result).items():
        print(f"{name:<58} {value:10.1f}")
    print(f"({args.jobs} jobs, {time.monotonic() - started:.1f} s)")


if __name__ == "__main__":
    main()
