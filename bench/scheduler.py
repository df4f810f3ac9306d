"""The embedded scheduler at scale: what a pop costs inside Redis with 100,000
domains and 1,000,000 queued jobs (next to 10 domains), and how exactly domain
rate limits hold across two masters over a minute."""

from __future__ import annotations

import statistics
import time
import uuid
from typing import Any

from bench.server import connect, private_server
from bench.worker import Master
from runtime import Client
from runtime.queue import scripts
from runtime.queue.client import text
from runtime.queue.embedded import ServerProcess


def _fill(client: Client, jobs: int, domains: int) -> None:
    q = client.queue("bench")
    for offset in range(0, jobs, 1000):
        client.put_many(
            q.spec("bench.jobs:noop", {}, domain=f"d{(offset + i) % domains}")
            for i in range(min(1000, jobs - offset))
        )


def pop_cost(
    server: ServerProcess, jobs: int, domains: int, limited: bool, pops: int
) -> dict[str, float]:
    """Microseconds per pop script call inside Redis (SLOWLOG), popping one job each."""
    conn = connect(server)
    conn.flushall()
    client = Client.from_url(server.url, namespace="b" + uuid.uuid4().hex[:8])
    if limited:  # each domain may start one job a minute: every pop throttles a lane
        client.config_set("domain-rate", 1)
        client.config_set("domain-period", 60)
    _fill(client, jobs, domains)
    memory = int(conn.info("memory")["used_memory"])
    sha = scripts.load("pop").sha
    conn.config_set("slowlog-log-slower-than", 0)
    conn.config_set("slowlog-max-len", pops + 100)
    conn.slowlog_reset()
    for _ in range(pops):
        client.queue("bench").pop(1, worker="bench")
    durations = [
        float(entry["duration"]) for entry in conn.slowlog_get(pops + 100)
        if entry["command"].startswith(b"EVALSHA " + sha.encode())
    ]  # fmt: skip
    conn.config_set("slowlog-log-slower-than", 10000)
    cuts = statistics.quantiles(durations, n=100, method="inclusive")
    return {"p50": cuts[49], "p99": cuts[98], "max": max(durations),
            "bytes_per_job": memory / jobs}  # fmt: skip


def rate_accuracy(
    server: ServerProcess, seconds: float, rates: dict[str, float]
) -> dict[str, float]:
    """Observed starts per second of each limited domain, two masters, over `seconds`."""
    ns = "r" + uuid.uuid4().hex[:8]
    client = Client.from_url(server.url, namespace=ns)
    key = f"bench:rate:{ns}"
    q = client.queue("bench")
    for domain, rate in rates.items():
        client.set_domain_limit(domain, rate=rate, period=1.0)
        n = int(rate * (seconds + 15))
        data = {"url": server.url, "key": key, "n": domain}
        for offset in range(0, n, 1000):
            batch = min(1000, n - offset)
            client.put_many(q.spec("bench.jobs:stamp", data, domain=domain) for _ in range(batch))
    masters = [Master(server, ns, "--concurrency", "2") for _ in range(2)]
    time.sleep(seconds + 5)
    for master in masters:
        master.stop()
    starts: dict[str, list[float]] = {d: [] for d in rates}
    for raw in connect(server).lrange(key, 0, -1):
        domain, when = text(raw).split()
        starts[domain].append(float(when))
    observed = {}
    for domain, times in starts.items():
        begin = min(times) + 2.0  # after the start-up
        within = [t for t in times if begin <= t < begin + seconds]
        observed[domain] = len(within) / seconds
    return observed


def run(quick: bool = False) -> dict[str, Any]:
    jobs = 100_000 if quick else 1_000_000
    pops = 500 if quick else 2000
    measures: dict[str, Any] = {}
    with private_server() as server:
        cases = (("10 domains", 10, False), ("100,000 domains", 100_000, False),
                 ("100,000 domains, each throttled after one pop", 100_000, True))  # fmt: skip
        results = {}
        for name, domains, limited in cases:
            results[name] = pop_cost(server, jobs, domains, limited, pops)
            for stat in ("p50", "p99", "max"):
                measures[f"pop in Redis, {name}, {stat} (us)"] = [results[name][stat]]
        base = results["10 domains"]["p99"]
        for name in list(results)[1:]:
            measures[f"pop p99, {name} / 10 domains (ratio)"] = [results[name]["p99"] / base]
        measures["Redis bytes per job, 100,000 domains"] = [
            results["100,000 domains"]["bytes_per_job"]
        ]
        connect(server).flushall()
        rates = {"five.example": 5.0, "ten.example": 10.0, "twenty.example": 20.0}
        observed = rate_accuracy(server, 10.0 if quick else 60.0, rates)
        for domain, rate in rates.items():
            measures[f"{domain} limited to {rate:g}/s: observed (starts/s)"] = [observed[domain]]
            measures[f"{domain}: error (%)"] = [abs(observed[domain] / rate - 1) * 100]
    return {"jobs": jobs, "repeat": 1, "measures": measures}
