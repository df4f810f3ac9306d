"""Scaling out over a Redis Cluster (issue 21): the drain of 1 namespace against
3 namespaces, each in a slot owned by a different node of a three-node cluster
(loopback TCP), one master per namespace, with each node's Redis CPU per job.

    python -m bench.ha [--jobs 3000] [--repeat 2] [--concurrency 2]

Prints one JSON object; the figures are written up in bench/results/ha.notes.md.
The cluster is started by the helpers the tests use (tests/support/topologies.py).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from redis.crc import key_slot

from runtime import Client
from tests.support.topologies import Cluster, Node

REPO = Path(__file__).resolve().parents[1]


def _cpu_s(node: Node) -> float:
    info = node.conn().info("cpu")
    return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])


def namespaces_on(cluster: Cluster, count: int, prefix: str) -> list[str]:
    """`count` namespaces whose slots are owned by different nodes."""
    found: dict[int, str] = {}
    i = 0
    while len(found) < count:
        name = f"{prefix}{i}"
        owner = cluster.owner(key_slot(("{" + name + "}").encode()))
        found.setdefault(owner.port, name)
        i += 1
    return list(found.values())


def _master(url: str, namespace: str, concurrency: int) -> subprocess.Popen[bytes]:
    """`runtime worker bench.jobs` for one namespace, once it said READY=1."""
    folder = Path(tempfile.mkdtemp(prefix="rt-ha-", dir="/tmp"))
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notify.bind(str(folder / "notify"))
    env = {
        **os.environ,
        "REDIS_URL": url,
        "RUNTIME_NAMESPACE": namespace,
        "NOTIFY_SOCKET": str(folder / "notify"),
        "RUNTIME_STATE_DIR": str(folder),
    }
    argv = [
        sys.executable,
        "-m",
        "runtime",
        "worker",
        "bench.jobs",
        "--queues",
        "bench",
        "--concurrency",
        str(concurrency),
    ]
    log = (folder / "master.log").open("wb")
    proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=log, stderr=log)
    notify.settimeout(60)
    while b"READY=1" not in notify.recv(4096):
        pass
    notify.close()
    return proc


def drain(cluster: Cluster, namespaces: list[str], jobs: int, concurrency: int) -> dict[str, Any]:
    """`jobs` noop jobs in each namespace, one master each: the site's rate, and
    each owning node's Redis CPU per job of its namespace."""
    clients = [Client.from_url(cluster.url(), namespace=ns) for ns in namespaces]
    for client in clients:
        q = client.queue("bench")
        q.pause()  # resumed at once everywhere once every master is up
        for offset in range(0, jobs, 1000):
            client.put_many(q.spec("bench.jobs:noop") for _ in range(min(1000, jobs - offset)))
    owners = [cluster.owner(key_slot(c.keys.root.encode())) for c in clients]
    masters = [_master(cluster.url(), ns, concurrency) for ns in namespaces]
    before = [_cpu_s(node) for node in owners]
    start = time.perf_counter()
    for client in clients:
        client.queue("bench").resume()
    while any(int(c.status("bench")["bench"]["complete"]) < jobs for c in clients):
        time.sleep(0.05)
    elapsed = time.perf_counter() - start
    redis_us = [(_cpu_s(n) - b) / jobs * 1e6 for n, b in zip(owners, before, strict=True)]
    for proc in masters:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    for client in clients:
        client.close()
    return {
        "shards": len(namespaces),
        "rate": len(namespaces) * jobs / elapsed,
        "redis_cpu_us_per_job": redis_us,
    }


def run(jobs: int, repeat: int, concurrency: int) -> dict[str, Any]:
    binary = shutil.which("redis-server")
    assert binary, "no redis-server on PATH"
    cluster = Cluster(binary).start()
    rounds: list[dict[str, Any]] = []
    try:
        for r in range(repeat):  # interleaved: one shard, then three
            for shards in (1, 3):
                spaces = namespaces_on(cluster, shards, f"s{r}x{shards}n")
                rounds.append(drain(cluster, spaces, jobs, concurrency))
    finally:
        cluster.close()
    one = [x for x in rounds if x["shards"] == 1]
    three = [x for x in rounds if x["shards"] == 3]
    return {
        "jobs_per_shard": jobs,
        "concurrency_per_master": concurrency,
        "rounds": rounds,
        "rate_1": statistics.median(x["rate"] for x in one),
        "rate_3": statistics.median(x["rate"] for x in three),
        "redis_us_1": statistics.median(x["redis_cpu_us_per_job"][0] for x in one),
        "redis_us_3": statistics.median(u for x in three for u in x["redis_cpu_us_per_job"]),
        "cpus": os.cpu_count(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.ha")
    parser.add_argument("--jobs", type=int, default=3000)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=2)
    args = parser.parse_args()
    print(json.dumps(run(args.jobs, args.repeat, args.concurrency), indent=1))


if __name__ == "__main__":
    main()
