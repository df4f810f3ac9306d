"""How soon `Client.wait` returns after a job completes (issue 12 target: at most
5 ms at p99, light load). Not a test: prints its numbers.

    .venv/bin/python -m bench.wait_latency [--jobs 200]

A private redis-server on TCP loopback (AOF everysec). For each job: a waiter
process calls wait(jid) and blocks (it has registered when the job's record
holds meta.wt); this process then completes the job as its lease holder would.
Measured: from just before the completion is sent to the moment wait() has
returned the result in the waiter (the completion's own round trip included).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import shutil
import socket
import statistics
import tempfile
import time
from multiprocessing.connection import Connection
from pathlib import Path

from runtime.queue.api.client import Client
from runtime.queue.embedded import ServerProcess, find_server_binary

W = "bench-host"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def registered(client: Client, jid: str) -> bool:
    record = client.redis.hget(client.keys.key("jobs"), jid)
    return isinstance(record, bytes) and b'"wt":' in record


def waiter_process(url: str, conn: Connection) -> None:
    """In a process of its own (no GIL shared with the holder): waits for each jid
    it is sent and answers the time wait() returned."""
    waiter = Client.from_url(url, "bench")
    while (jid := conn.recv()) is not None:
        waiter.wait(jid, timeout=30)
        conn.send(time.perf_counter())  # CLOCK_MONOTONIC: the same clock in every process


def one(conn: Connection, holder: Client, index: int) -> float:
    """Seconds from just before the completion was sent to wait() returning."""
    jid = f"w{index}"
    holder.queue("q").put("app.jobs:send", {"n": index}, jid=jid)
    [job] = holder.queue("q").pop(1, worker=W)
    conn.send(jid)
    deadline = time.monotonic() + 10
    while not registered(holder, jid):
        if time.monotonic() > deadline:
            raise RuntimeError("the waiter never registered")
        time.sleep(0.001)
    time.sleep(0.002)  # the waiter is on its BLPOP by now
    sent = time.perf_counter()
    holder.leases.complete(jid, W, job.token or "", result={"sent": True})
    woken: float = conn.recv()
    return woken - sent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=200)
    args = parser.parse_args()
    directory = Path(tempfile.mkdtemp(prefix="rt-wait-", dir="/tmp"))
    port = free_port()
    extra = f"port {port}\nbind 127.0.0.1"
    server = ServerProcess(find_server_binary(), directory, appendonly=True, extra=extra).start()
    try:
        url = f"redis://127.0.0.1:{port}/0"
        holder = Client.from_url(url, "bench")
        ours, theirs = multiprocessing.Pipe()
        child = multiprocessing.get_context("spawn").Process(
            target=waiter_process, args=(url, theirs), daemon=True
        )
        child.start()
        for i in range(10):  # warm up: connections, scripts
            one(ours, holder, -1 - i)
        samples_ms = sorted(one(ours, holder, i) * 1000 for i in range(args.jobs))
        ours.send(None)
        child.join(10)
    finally:
        server.stop()
        shutil.rmtree(directory, ignore_errors=True)
    p99 = samples_ms[min(len(samples_ms) - 1, round(0.99 * len(samples_ms)) - 1)]
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"wait wake-up after completion over {args.jobs} jobs, TCP loopback (load {load}):")
    print(
        f"  p50 {statistics.median(samples_ms):.3f} ms  p99 {p99:.3f} ms  "
        f"max {samples_ms[-1]:.3f} ms  min {samples_ms[0]:.3f} ms"
    )


if __name__ == "__main__":
    main()
