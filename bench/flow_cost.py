"""`python -m bench.flow_cost [--jobs 4000] [--batch 8] [--domains 8]`: what the
flow controls of issue 30 cost Redis per job, counted with INFO commandstats
(commands, those run by scripts included, and Redis CPU: the usec commandstats
sums), against the plain pop. Not a test: prints its numbers.

A drain of `jobs` jobs put beforehand with put_many, spread over `domains`
domains in turn, by a master's exchanges (each completes the jobs the last one
leased, then pops `batch` more: lua/exchange.lua), for each case:

    plain    no domains at all
    domains  the same domains, no limits (the plain pop over lanes)
    capped   each domain capped at `batch` jobs holding a lease (the cap never
             stops the drain: it counts the slots taken and given back)
    tight    each domain capped at 1: a pop meets full domains
    fair     the queue's setting fair=1 (pops rotate over the domains)

Runs on a private redis-server (TCP loopback, AOF everysec, bench/server.py).
`--jobs 50` makes a quick check that the code runs.
"""

from __future__ import annotations

import argparse
import json
import uuid
from typing import Any

from bench.server import private_server
from runtime import Client
from runtime.queue import ops
from runtime.queue.leases import Outcomes
from runtime.queue.wire import JobSpec

CASES = ("plain", "domains", "capped", "tight", "fair")


def _stats(client: Client) -> tuple[int, int]:
    info: Any = client.redis.info("commandstats")
    calls = sum(int(v["calls"]) for v in info.values())
    usec = sum(int(v["usec"]) for v in info.values())
    return calls, usec


def _domain(case: str, names: list[str], i: int) -> str | None:
    return None if case == "plain" else names[i % len(names)]


def _prepare(client: Client, case: str, jobs: int, batch: int, domains: int) -> None:
    names = [f"d{i}.example" for i in range(domains)]
    if case == "capped":
        for name in names:
            client.set_domain_limit(name, concurrency=batch)
    elif case == "tight":
        for name in names:
            client.set_domain_limit(name, concurrency=1)
    elif case == "fair":
        client.admin.config_set("q-fair", 1)
    for start in range(0, jobs, 1000):
        client.put_many(
            JobSpec.build("q", "bench.jobs:noop", {}, domain=_domain(case, names, i))
            for i in range(start, min(jobs, start + 1000))
        )


def _drain(client: Client, jobs: int, batch: int) -> int:
    """Exchanges until every job is done; how many calls it took."""
    outcomes, done, calls = Outcomes(), 0, 0
    while done < jobs:
        got = client.conn.call(ops.exchange("bench-m", outcomes, batch, ["q"]))
        calls += 1
        outcomes = Outcomes()
        for job in got.popped.jobs:
            outcomes.add_complete(job.jid, job.token or "")
        done += len(got.states["complete"])
        if done < jobs and not got.popped.jobs and not outcomes.complete:
            raise RuntimeError(f"the drain stopped with {jobs - done} jobs left")
    return calls


def measure(url: str, case: str, jobs: int, batch: int, domains: int) -> dict[str, float]:
    client = Client.from_url(url, namespace=f"bench-flow-{uuid.uuid4().hex[:8]}")
    try:
        _prepare(client, case, jobs, batch, domains)
        client.redis.config_resetstat()
        calls = _drain(client, jobs, batch)
        commands, usec = _stats(client)
        return {
            "commands_per_job": round(commands / jobs, 2),
            "redis_usec_per_job": round(usec / jobs, 2),
            "exchanges": calls,
        }
    finally:
        client.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.flow_cost")
    parser.add_argument("--jobs", type=int, default=4000)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--domains", type=int, default=8)
    parser.add_argument("--cases", default=",".join(CASES))
    args = parser.parse_args(argv)
    with private_server(tcp=True) as server:
        url = server.url
        out = {
            case: measure(url, case, args.jobs, args.batch, args.domains)
            for case in args.cases.split(",")
        }
    print(json.dumps({"jobs": args.jobs, "batch": args.batch, "cases": out}, indent=2))


if __name__ == "__main__":
    main()
