"""The embedded scheduler at scale: what a pop costs inside Redis with 100,000
domains and 1,000,000 queued jobs (next to 10 domains; with every pop throttling
a domain whose jobs are next in line; with 20,000 domains freed at once), and how
exactly domain rate limits hold across two masters over a minute."""

from __future__ import annotations

import statistics
import time
import uuid
from dataclasses import dataclass
from typing import Any

from bench.server import connect, private_server
from bench.worker import Master
from runtime import Client
from runtime.queue import scripts
from runtime.queue.embedded import ServerProcess
from runtime.queue.ops import text


def _fill(client: Client, jobs: int, domains: int, grouped: bool) -> None:
    """Puts `jobs` jobs over `domains` domains: round-robin (d0, d1, ... d0, d1, ...),
    or grouped (a domain's jobs next to each other: d0, d0, ... d1, d1, ...)."""
    per = max(1, jobs // domains)
    q = client.queue("bench")
    for offset in range(0, jobs, 1000):
        client.put_many(
            q.spec("bench.jobs:noop", {}, domain=f"d{((k // per) if grouped else k) % domains}")
            for k in range(offset, min(offset + 1000, jobs))
        )


SLOWLOG_US = 20


@dataclass(frozen=True)
class Case:
    """One pop-cost case: how jobs and domains are laid out, the default domain
    limit, and jobs popped (unmeasured) `settle_s` seconds before the measured pops."""

    name: str
    domains: int
    limit: tuple[float, float] | None = None  # (rate, period s)
    grouped: bool = False
    warm: int = 0
    settle_s: float = 0.0


CASES = (
    Case("10 domains", 10),
    Case("100,000 domains", 100_000),
    # every pop spends its domain's budget (1 a minute) and throttles the domain's
    # other 9 jobs, which are next in line: each pop passes a throttled domain
    Case(
        "100,000 domains, each pop throttles a domain whose jobs are next in line",
        100_000,
        limit=(1, 60),
        grouped=True,
    ),
    # 20,000 domains throttled, then all free when the measured pops begin: the
    # first pops release them, pop_skips + 2 lanes per pop of one
    Case("100,000 domains, 20,000 freed at once", 100_000, limit=(1, 4), warm=20_000, settle_s=4.5),
)


def pop_cost(server: ServerProcess, jobs: int, case: Case, pops: int) -> dict[str, float]:
    """Microseconds per pop script call inside Redis (SLOWLOG), popping one job each."""
    conn = connect(server)
    conn.flushall()
    client = Client.from_url(server.url, namespace="b" + uuid.uuid4().hex[:8])
    if case.limit is not None:
        client.admin.config_set("domain-rate", case.limit[0])
        client.admin.config_set("domain-period", case.limit[1])
    _fill(client, jobs, case.domains, case.grouped)
    memory = int(conn.info("memory")["used_memory"])
    for _ in range(case.warm // 1000):
        client.queue("bench").pop(1000, worker="bench")
    time.sleep(case.settle_s)
    # Each pop's own SLOWLOG entry, read right after it. Redis 7 also logs the
    # commands a script runs, so the threshold (20 us) keeps those out (and out of
    # the pop's time) while every pop, which takes longer, is logged.
    pop_calls = (
        b"FCALL " + scripts.function_name("pop").encode(),
        b"EVALSHA " + scripts.load("pop").sha.encode(),
    )
    conn.config_set("slowlog-log-slower-than", SLOWLOG_US)
    conn.config_set("slowlog-max-len", 128)
    conn.slowlog_reset()
    short, popped, durations, last = 0, 0, [], None
    for _ in range(pops):
        reply = client.conn.run_json("pop", "bench", 1, "seed", "ordered", 0, 0, "bench")
        popped += len(reply["jobs"])
        short += reply["wake_in_ms"] == 0
        entries = conn.slowlog_get(1)
        entry = entries[0] if entries else None
        if entry is None or entry["id"] == last or not entry["command"].startswith(pop_calls):
            durations.append(float(SLOWLOG_US))  # faster than the threshold
        else:
            durations.append(float(entry["duration"]))
            last = entry["id"]
    conn.config_set("slowlog-log-slower-than", 10000)
    cuts = statistics.quantiles(durations, n=100, method="inclusive")
    return {
        "p50": cuts[49],
        "p99": cuts[98],
        "max": max(durations),
        "bytes_per_job": memory / jobs,
        "empty": pops - popped,
        "short": short,
    }


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
        results = {}
        for case in CASES:
            results[case.name] = cost = pop_cost(server, jobs, case, pops)
            for stat in ("p50", "p99", "max"):
                measures[f"pop in Redis, {case.name}, {stat} (us)"] = [cost[stat]]
            if case.limit is not None:
                measures[f"pops of 1 that got no job, {case.name}"] = [cost["empty"]]
                measures[f"pops that stopped short (wake_in_ms 0), {case.name}"] = [cost["short"]]
        base = results[CASES[0].name]["p99"]
        for case in CASES[1:]:
            ratio = results[case.name]["p99"] / base
            measures[f"pop p99, {case.name} / 10 domains (ratio)"] = [ratio]
        measures["Redis bytes per job, 100,000 domains"] = [results[CASES[1].name]["bytes_per_job"]]
        connect(server).flushall()
        rates = {"five.example": 5.0, "ten.example": 10.0, "twenty.example": 20.0}
        observed = rate_accuracy(server, 10.0 if quick else 60.0, rates)
        for domain, rate in rates.items():
            measures[f"{domain} limited to {rate:g}/s: observed (starts/s)"] = [observed[domain]]
            measures[f"{domain}: error (%)"] = [abs(observed[domain] / rate - 1) * 100]
    return {"jobs": jobs, "repeat": 1, "measures": measures}
