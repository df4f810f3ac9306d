"""The dashboard's server time at scale: 1,000 queues holding 10^6 jobs (some of
them failed, some complete, a few running), then the overview, the queues page,
a queue's page and the live numbers rendered in-process (no network), each timed
from the request to the last byte of the answer, with the reads alone beside them.

    python -m bench.dashboard [--quick]    (--quick: 100 queues, 10^5 jobs)

Target (issue 13): the overview in <= 200 ms server time with 1,000 queues and
10^6 jobs."""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from collections.abc import Callable
from typing import Any

from bench.server import private_server
from runtime import Client
from runtime.dashboard import create_app
from runtime.dashboard import reads as dash_reads

KLASS = "bench.jobs:noop"
DATA = {"payload": "x" * 80}


def fill(client: Client, queues: int, jobs: int) -> None:
    """`jobs` waiting jobs spread evenly over `queues` queues, put in batches."""
    per_queue = jobs // queues
    for q in range(queues):
        queue = client.queue(f"queue-{q:04d}")
        client.put_many(queue.spec(KLASS, DATA, priority=i % 3) for i in range(per_queue))


def age_some(client: Client, queues: int) -> None:
    """A few jobs of each of the first queues popped: some completed, some failed,
    some left running, so every column of the pages has something to read."""
    for q in range(min(queues, 50)):
        popped = client.queue(f"queue-{q:04d}").pop(6, worker="bench-host-1")
        for i, job in enumerate(popped):
            if i < 3:
                job.complete()
            elif i < 5:
                job.fail(f"bench.Failure{i}", "Traceback (most recent call last):\n  boom")


def timed(fn: Callable[[], Any], repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        out.append((time.perf_counter() - start) * 1000)
    return out


def measure(client: Client, repeat: int) -> dict[str, list[float]]:
    from starlette.testclient import TestClient  # noqa: PLC0415

    http = TestClient(create_app(client, registry=None), base_url="http://127.0.0.1")

    def get(path: str) -> Callable[[], Any]:
        def fetch() -> None:
            answer = http.get(path)
            assert answer.status_code == 200, (path, answer.status_code)

        return fetch

    now_ms = client.conn.now_ms()
    return {
        "overview page (ms)": timed(get("/"), repeat),
        "  its reads: queue rows of all queues (ms)": timed(
            lambda: dash_reads.queue_rows(client), repeat
        ),
        "  its reads: workers (ms)": timed(lambda: dash_reads.worker_rows(client, now_ms), repeat),
        "queues page, every queue (ms)": timed(get("/queues"), repeat),
        "a queue's page of waiting jobs (ms)": timed(get("/queue?name=queue-0001"), repeat),
        "failures page (ms)": timed(get("/failures"), repeat),
        "live numbers of the overview (ms)": timed(
            get("/live.json?queue=queue-0001&plot=1"), repeat
        ),
        "rates sample: totals of all queues (ms)": timed(lambda: dash_reads.totals(client), repeat),
    }


def run(quick: bool = False) -> dict[str, Any]:
    queues, jobs = (100, 100_000) if quick else (1000, 1_000_000)
    with private_server(tcp=True) as server:
        client = Client.from_url(server.url, namespace="b" + uuid.uuid4().hex[:10])
        start = time.perf_counter()
        fill(client, queues, jobs)
        age_some(client, queues)
        fill_s = time.perf_counter() - start
        results = measure(client, repeat=5 if quick else 15)
        return {"queues": queues, "jobs": jobs, "fill_s": fill_s, "results": results}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    done = run(parser.parse_args().quick)
    print(f"{done['queues']} queues, {done['jobs']:,} jobs (filled in {done['fill_s']:.0f} s)")
    print(f"{'measure':<48} {'median':>8} {'min':>8} {'max':>8}")
    for name, runs in done["results"].items():
        print(f"{name:<48} {statistics.median(runs):8.1f} {min(runs):8.1f} {max(runs):8.1f}")


if __name__ == "__main__":
    main()
