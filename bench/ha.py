"""Scaling out over a Redis Cluster (issue 21): the drain of 1 namespace against
3 namespaces, each in a slot owned by a different node of a three-node cluster
(loopback TCP), with each node's Redis CPU per job. Three namespaces are drained
twice: by one master serving all three (a sharded site's worker, RUNTIME_SHARDS)
and by one master per namespace, each of `--concurrency` children.

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


def _master(
    url: str, namespaces: list[str], queues: list[str], concurrency: int
) -> subprocess.Popen[bytes]:
    """`runtime worker bench.jobs` over `queues`, the i-th in the i-th namespace (a
    sharded site's rule when there are several), once it said READY=1."""
    folder = Path(tempfile.mkdtemp(prefix="rt-ha-", dir="/tmp"))
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notify.bind(str(folder / "notify"))
    env = {
        **os.environ,
        "REDIS_URL": url,
        "RUNTIME_NAMESPACE": namespaces[0],
        "RUNTIME_SHARDS": ";".join(f"{ns}:{q}" for ns, q in zip(namespaces, queues, strict=True)),
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
        ",".join(queues),
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


def drain(
    cluster: Cluster, namespaces: list[str], jobs: int, concurrency: int, one_master: bool
) -> dict[str, Any]:
    """`jobs` noop jobs in each namespace (queue `bench<i>` in the i-th), served by
    one master or one master each: the site's rate, and each owning node's Redis CPU
    per job of its namespace."""
    queues = [f"bench{i}" for i in range(len(namespaces))]
    clients = [Client.from_url(cluster.url(), namespace=ns) for ns in namespaces]
    for client, name in zip(clients, queues, strict=True):
        q = client.queue(name)
        q.pause()  # resumed at once everywhere once every master is up
        for offset in range(0, jobs, 1000):
            client.put_many(q.spec("bench.jobs:noop") for _ in range(min(1000, jobs - offset)))
    owners = [cluster.owner(key_slot(c.keys.root.encode())) for c in clients]
    if one_master:
        masters = [_master(cluster.url(), namespaces, queues, concurrency)]
    else:
        masters = [
            _master(cluster.url(), [ns], [q], concurrency)
            for ns, q in zip(namespaces, queues, strict=True)
        ]
    before = [_cpu_s(node) for node in owners]
    start = time.perf_counter()
    for client, name in zip(clients, queues, strict=True):
        client.queue(name).resume()
    while any(int(c.status(q)[q]["complete"]) < jobs for c, q in zip(clients, queues, strict=True)):
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
        "masters": len(masters),
        "rate": len(namespaces) * jobs / elapsed,
        "redis_cpu_us_per_job": redis_us,
    }


def run(jobs: int, repeat: int, concurrency: int) -> dict[str, Any]:
    binary = shutil.which("redis-server")
    assert binary, "no redis-server on PATH"
    cluster = Cluster(binary).start()
    rounds: list[dict[str, Any]] = []
    try:
        for r in range(repeat):  # interleaved: one shard, three by one master, by three
            for shards, one_master in ((1, True), (3, True), (3, False)):
                spaces = namespaces_on(cluster, shards, f"s{r}x{shards}{int(one_master)}n")
                rounds.append(drain(cluster, spaces, jobs, concurrency, one_master))
    finally:
        cluster.close()
    one = [x for x in rounds if x["shards"] == 1]
    three = [x for x in rounds if x["shards"] == 3 and x["masters"] == 1]
    three_each = [x for x in rounds if x["shards"] == 3 and x["masters"] == 3]
    return {
        "jobs_per_shard": jobs,
        "concurrency_per_master": concurrency,
        "rounds": rounds,
        "rate_1": statistics.median(x["rate"] for x in one),
        "rate_3": statistics.median(x["rate"] for x in three),
        "redis_us_1": statistics.median(x["redis_cpu_us_per_job"][0] for x in one),
        "redis_us_3": statistics.median(u for x in three for u in x["redis_cpu_us_per_job"]),
        "rate_3_each": statistics.median(x["rate"] for x in three_each),
        "redis_us_3_each": statistics.median(
            u for x in three_each for u in x["redis_cpu_us_per_job"]
        ),
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
