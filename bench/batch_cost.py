"""`python -m bench.batch_cost [--jobs N]`: what a batch adds to a job inside
Redis, counted: the commands Redis runs per job (INFO commandstats, exact) and
its CPU per job (INFO cpu, the server's user + system time; and the time spent in
script calls, commandstats' usec), for the same jobs put and run plain and as
jobs of one batch.

A private redis-server (AOF on, TCP loopback, as deployed), through the public
Client: N puts of one job each (`q.put`, or `b.queue(q).put` into an open
batch), counted; then pops of 8 and completions of those 8 (`complete_many`)
until the N jobs are done, counted (the batch is closed before, so its last
completion puts its two callbacks: counted too, once per batch). Commands are
exact on any host; CPU times are only comparable on a quiet one.

    .venv/bin/python -m bench.batch_cost --jobs 10000
    .venv/bin/python -m bench.batch_cost --jobs 20       # a smoke run
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from runtime import Client
from runtime.queue.embedded import find_server_binary

BATCH = 8  # jobs per pop and per completion, about a master's in a drain
HARNESS = {"info", "config|resetstat", "config", "hello", "client|setinfo", "ping"}


def _stats(client: Client) -> tuple[dict[str, int], float, float]:
    """(calls by command, server CPU s, script usec) now."""
    stats: dict[str, Any] = client.redis.info("commandstats")
    calls = {k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in stats.items()}
    script_us = sum(float(v["usec"]) for k, v in stats.items() if k.endswith(("fcall", "evalsha")))
    cpu = client.redis.info("cpu")
    return calls, float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"]), script_us


def _per_job(before: tuple[dict[str, int], float, float], client: Client, n: int) -> dict[str, Any]:
    calls, cpu_s, script_us = _stats(client)
    diff = {
        name: (count - before[0].get(name, 0)) / n
        for name, count in calls.items()
        if name not in HARNESS and count != before[0].get(name, 0)
    }
    return {
        "commands": dict(sorted(diff.items())),
        "commands_total": sum(v for k, v in diff.items() if k not in ("fcall", "evalsha")),
        "cpu_us": (cpu_s - before[1]) * 1e6 / n,
        "script_us": (script_us - before[2]) / n,
    }


def measure(client: Client, jobs: int, batched: bool) -> dict[str, Any]:
    """Puts then runs `jobs` jobs (in one batch when `batched`): per-job counts."""
    queue = f"bench-{'batch' if batched else 'plain'}"
    b = None
    if batched:
        b = client.batch(("cb", "bench.jobs:done", {}), ("cb", "bench.jobs:end", {}))
    target = b.queue(queue) if b is not None else client.queue(queue)
    before = _stats(client)
    for _ in range(jobs):  # one call a job, as an application puts
        target.put("bench.jobs:noop", {"payload": "x" * 85})
    put = _per_job(before, client, jobs)
    if b is not None:
        b.close()
    before = _stats(client)
    done = 0
    while done < jobs:
        leased = client.queue(queue).pop(BATCH, worker="bench-1")
        client.leases.complete_many("bench-1", {j.jid: j.token or "" for j in leased})
        done += len(leased)
    run = _per_job(before, client, jobs)
    if b is not None:
        status = client.get_batch(b.bid)
        assert status is not None and status.completed == jobs and status.complete_jid
    return {"put": put, "pop_and_complete": run}


def _free_port() -> int:
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        return int(free.getsockname()[1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.batch_cost", description=__doc__)
    parser.add_argument("--jobs", type=int, default=10_000)
    args = parser.parse_args(argv)
    directory = Path(tempfile.mkdtemp(prefix="rt-batch-", dir="/tmp"))
    port = _free_port()
    argv_ = [find_server_binary(), "--port", str(port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "yes", "--dir", str(directory)]  # fmt: skip
    server = subprocess.Popen(argv_, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        client = Client.from_url(f"redis://127.0.0.1:{port}", namespace="cost")
        deadline = time.monotonic() + 30
        while True:
            try:
                client.redis.ping()
                break
            except Exception:  # not listening yet
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        measure(client, 100, batched=True)  # warm: the library loaded, the keys made
        plain = measure(client, args.jobs, batched=False)
        batched = measure(client, args.jobs, batched=True)
        added = {
            phase: {
                "commands_total": batched[phase]["commands_total"] - plain[phase]["commands_total"],
                "cpu_us": batched[phase]["cpu_us"] - plain[phase]["cpu_us"],
                "script_us": batched[phase]["script_us"] - plain[phase]["script_us"],
            }
            for phase in ("put", "pop_and_complete")
        }
        report = {"jobs": args.jobs, "plain": plain, "batch": batched, "added_per_job": added}
        print(json.dumps(report, indent=2))
        client.close()
    finally:
        server.terminate()
        server.wait(timeout=30)
        shutil.rmtree(directory, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
