"""Sample jobs for `runtime demo` and the README's quick start.

`put_samples` puts one of each: two that succeed, one that asks for a retry
once, one that always fails (and so ends `failed` after its retries), and one
delayed by a second; `run_worker_until_done` runs a real master over them.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from typing import Any

from runtime.errors import Retry
from runtime.queue.client import Client
from runtime.queue.job import Job

log = logging.getLogger(__name__)
QUEUE = "demo"


def greet(job: Any) -> str:
    """Succeeds at once."""
    return f"hello, {job.data.get('name', 'world')}"


def add(job: Any) -> int:
    """Succeeds with the sum of data["numbers"]."""
    return sum(int(n) for n in job.data["numbers"])


def flaky(job: Any) -> str:
    """Asks for a retry on its first attempt, then succeeds."""
    if job.attempt == 1:
        raise Retry(delay=0.5, reason="first attempt always asks again")
    return f"worked on attempt {job.attempt}"


def broken(job: Any) -> None:
    """Always fails: ends `failed` with its traceback once its retries are spent."""
    raise ValueError(f"cannot process order {job.data.get('order')}")


def run_worker_until_done(client: Client, jids: list[str], timeout_s: float) -> list[Job]:
    """Starts `runtime worker runtime.demo`, waits for the jobs to end, stops it."""
    env = {**os.environ, "REDIS_URL": client.url, "RUNTIME_NAMESPACE": client.keys.namespace}
    argv = [sys.executable, "-m", "runtime", "worker", __name__, "--queues", QUEUE,
            "--concurrency", "2", "--grace", "5"]  # fmt: skip
    worker = subprocess.Popen(argv, env=env)
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline and worker.poll() is None:
            jobs = [j for j in client.get_jobs(jids) if j is not None]
            if all(j.state in ("complete", "failed") for j in jobs):
                break
            time.sleep(0.1)
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=30)
    return [j for j in client.get_jobs(jids) if j is not None]


def put_samples(client: Client) -> list[str]:
    queue = client.queue(QUEUE)
    return [
        queue.put(greet, {"name": "runtime"}),
        queue.put(add, {"numbers": [1, 2, 3]}),
        queue.put(flaky, {}, retries=2),
        queue.put(broken, {"order": 42}, retries=1, backoff=(0.2, 0.5)),
        queue.put(greet, {"name": "later"}, delay=1.0),
    ]
