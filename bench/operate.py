"""Operating at scale: what the overview reads and a metrics scrape cost with 1,000
queues and 1,000,000 jobs (targets: status in <= 200 ms server time, a scrape in
<= 100 ms).

    python -m bench.operate [--queues 1000] [--jobs 1000000] [--repeat 5]

Jobs are put with put_many, 10,000 per call, spread over the queues (a tenth of
them delayed, so every queue has scheduled jobs too); a few per queue are popped,
completed, failed and retried, so every count, total and histogram is non-empty.
Server time is Redis's own (INFO commandstats usec of the script call); wall time
adds the round trip and decoding in Python (for a scrape: the whole text, as
`runtime metrics` and the dashboard serve it, the same with the garbage collector
left on, and the registry's text written by prometheus-client, as a collector
mounted in your own registry is read). `python_calls` counts the Python function
calls of one scrape (cProfile): a figure the host's load does not move. Prints
one JSON object; the numbers go in the report, not RESULTS.md.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import statistics
import time
from collections.abc import Callable
from typing import Any

from bench.server import private_server
from runtime import Client
from runtime.metrics import exposition, make_registry, read, scrape, text

SCRIPT_CALLS = ("cmdstat_fcall", "cmdstat_fcall_ro", "cmdstat_evalsha", "cmdstat_evalsha_ro")


def _script_usec(client: Client) -> tuple[int, int]:
    stats: dict[str, Any] = client.redis.info("commandstats")
    calls = sum(int(stats[k]["calls"]) for k in SCRIPT_CALLS if k in stats)
    usec = sum(int(stats[k]["usec"]) for k in SCRIPT_CALLS if k in stats)
    return calls, usec


def measure(client: Client, what: Callable[[], object], repeat: int) -> dict[str, Any]:
    """Median (and range) of wall and server ms over `repeat` runs, the median CPU
    ms of this process (what a shared host's load does not inflate), and the
    script calls one run makes."""
    what()  # warm: the library is loaded, the pages are cached
    walls, cpus, servers, calls = [], [], [], 0
    for _ in range(repeat):
        calls_before, usec_before = _script_usec(client)
        started, cpu_started = time.perf_counter(), time.process_time()
        what()
        cpus.append((time.process_time() - cpu_started) * 1000)
        walls.append((time.perf_counter() - started) * 1000)
        calls_after, usec_after = _script_usec(client)
        servers.append((usec_after - usec_before) / 1000)
        calls = calls_after - calls_before
    return {
        "wall_ms": round(statistics.median(walls), 2),
        "wall_ms_range": [round(min(walls), 2), round(max(walls), 2)],
        "cpu_ms": round(statistics.median(cpus), 2),  # this process's: a busy host adds none
        "server_ms": round(statistics.median(servers), 2),
        "server_ms_range": [round(min(servers), 2), round(max(servers), 2)],
        "script_calls": calls,
    }


def python_calls(what: Callable[[], object]) -> int:
    """The Python function calls (C functions called from Python included) of one run."""
    what()  # warm
    profile = cProfile.Profile()
    profile.runcall(what)
    return int(pstats.Stats(profile).total_calls)  # type: ignore[attr-defined]


def fill(client: Client, queues: int, jobs: int) -> float:
    """Puts the jobs (10,000 per call); returns the seconds it took."""
    started = time.perf_counter()
    for offset in range(0, jobs, 10_000):
        client.put_many(
            client.queue(f"q{k % queues}").spec(
                "bench.jobs:noop", {"k": k}, delay=3600 if k % 10 == 9 else 0
            )
            for k in range(offset, min(offset + 10_000, jobs))
        )
    return time.perf_counter() - started


def exercise(client: Client, queues: int, workers: int = 1, groups: int = 1) -> None:
    """A few outcomes per queue: complete, fail (in `groups` failure groups), retry;
    `workers` registered masters, each left holding a job."""
    names = [f"bench-{k + 1}" for k in range(workers)]
    for k, name in enumerate(names):
        client.leases.register_worker(name, host="bench", pid=k + 1, queues=["q0"], concurrency=4)
    failed = 0  # the groups in turn (a tenth of the queues holds only scheduled jobs)
    for i in range(queues):
        worker = names[i % workers]
        jobs = client.queue(f"q{i}").pop(4, worker=worker)
        client.leases.complete_many(worker, {j.jid: j.token for j in jobs[:2]})
        if len(jobs) > 2:
            jobs[2].fail(f"bench.Error{failed % groups}", "failed on purpose")
            failed += 1
        if len(jobs) > 3:
            jobs[3].retry("bench.Error", "again", delay=0)
    for k, name in enumerate(names):  # each master holds a job now
        client.queue(f"q{k % queues}").pop(1, worker=name)


def _series(text: bytes) -> int:
    """How many samples an exposition holds."""
    return sum(1 for line in text.splitlines() if line and not line.startswith(b"#"))


def run(queues: int, jobs: int, repeat: int, workers: int = 1, groups: int = 1) -> dict[str, Any]:
    with private_server(tcp=True) as server:
        client = Client.from_url(server.url, namespace="bench", socket_timeout=120)
        put_s = fill(client, queues, jobs)
        exercise(client, queues, workers, groups)
        registry = make_registry(client)
        info: dict[str, Any] = client.redis.info("memory")
        snapshot = client.admin.snapshot()
        return {
            "queues": queues,
            "jobs": jobs,
            "workers_seen": len(snapshot["workers"]),
            "failure_groups": len(snapshot["groups"]),
            "series": _series(scrape(client.admin)),
            "put_s": round(put_s, 1),
            "used_memory_mb": round(int(info["used_memory"]) / 2**20),
            "status": measure(client, client.status, repeat),
            "scrape": measure(client, lambda: scrape(client.admin), repeat),
            "scrape_gc_on": measure(client, lambda: text(read(client.admin)), repeat),
            "scrape_registry": measure(client, lambda: exposition(registry), repeat),
            "python_calls": {
                "scrape": python_calls(lambda: scrape(client.admin)),
                "scrape_registry": python_calls(lambda: exposition(registry)),
            },
            "snapshot": measure(client, client.admin.snapshot, repeat),
            "jobs_page": measure(client, lambda: client.admin.jobs("q0", "waiting", 0, 25), repeat),
            "workers": measure(client, client.admin.workers, repeat),
            "scrape_bytes": len(scrape(client.admin)),
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queues", type=int, default=1000)
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--groups", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument(
        "--deployment",
        action="store_true",
        help="200 queues, 50 workers, 30 failure groups, 200,000 jobs",
    )
    args = parser.parse_args()
    if args.deployment:
        args.queues, args.workers, args.groups, args.jobs = 200, 50, 30, 200_000
    print(json.dumps(run(args.queues, args.jobs, args.repeat, args.workers, args.groups), indent=2))


if __name__ == "__main__":
    main()
