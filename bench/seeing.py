"""What seeing inside a job costs (issue 33): the put with tracing off and on,
the drain with usage recording (always on) and with tracing on, and a drain
while one follower reads a chatty job's live output. Not a test: prints its
numbers (the lead measures on a quiet host).

    .venv/bin/python -m bench.seeing [--jobs 2000]

Put: µs per put from this process, no span vs inside an active span (the
traceparent is added). Drain: two children, the counting job, its rate and
the CPU per job of the master, Redis and the children (bench.worker.drain);
tracing writes its spans to a file (--otel-file). Usage: the child's own
cost of measuring a job (Meter.start + stop), timed in this process. Follower:
the same drain of printing jobs, next to a job printing a line every 10 ms
that `runtime logs --follow` reads.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.server import private_server
from bench.worker import REPO, Master, _namespace, drain
from runtime import Client
from runtime.children.usage import Meter
from runtime.queue.embedded import ServerProcess


def put_us(server: ServerProcess, n: int, traced: bool) -> float:
    client = Client.from_url(server.url, namespace=_namespace())
    q = client.queue("bench")
    if not traced:
        start = time.perf_counter()
        for _ in range(n):
            q.put("bench.jobs:noop", {})
        return (time.perf_counter() - start) / n * 1e6
    from opentelemetry.sdk.trace import TracerProvider  # noqa: PLC0415 - only this case

    tracer = TracerProvider().get_tracer("bench")
    with tracer.start_as_current_span("request"):
        start = time.perf_counter()
        for _ in range(n):
            q.put("bench.jobs:noop", {})
        return (time.perf_counter() - start) / n * 1e6


def meter_us(n: int) -> float:
    meter = Meter()
    start = time.perf_counter()
    for _ in range(n):
        meter.start()
        meter.stop()
    return (time.perf_counter() - start) / n * 1e6


def with_follower(server: ServerProcess, n: int) -> dict[str, float]:
    """A drain of printing jobs while a chatty job on its own worker is followed."""
    ns = _namespace()
    client = Client.from_url(server.url, namespace=ns)
    master = Master(server, ns, "--concurrency", "1")
    jid = client.queue("bench").put("bench.jobs:chatter", {"seconds": 3600, "every_s": 0.01})
    while (job := client.get_job(jid)) is None or job.state != "running":
        time.sleep(0.01)
    env = {**os.environ, "REDIS_URL": server.url, "RUNTIME_NAMESPACE": ns}
    argv = [sys.executable, "-m", "runtime", "logs", jid, "--follow"]
    follower = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.DEVNULL)
    try:
        return drain(server, n, klass="bench.jobs:count_and_print")
    finally:
        follower.kill()
        follower.wait()
        client.cancel(jid)
        master.stop()


def run(n: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    spans = Path(tempfile.mkdtemp(prefix="rt-bs-")) / "spans.jsonl"
    with private_server(tcp=True) as server:
        out["put, no span (us)"] = put_us(server, n, traced=False)
        out["put, inside a span (us)"] = put_us(server, n, traced=True)
        out["usage: Meter.start + stop (us)"] = meter_us(n)
        out["drain, usage on (the default)"] = drain(server, n)
        out["drain, tracing on (--otel-file)"] = drain(server, n, "--otel-file", str(spans))
        out["drain of printing jobs"] = drain(server, n, klass="bench.jobs:count_and_print")
        out["drain of printing jobs, one follower"] = with_follower(server, n)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2000)
    for name, value in run(parser.parse_args().jobs).items():
        if isinstance(value, dict):
            cells = ", ".join(f"{k} {v:,.1f}" for k, v in value.items())
            print(f"{name}: {cells}")
        else:
            print(f"{name}: {value:,.2f}")


if __name__ == "__main__":
    main()
