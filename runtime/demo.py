"""Sample jobs for `runtime demo` and the README's quick start.

`put_samples` puts one of each: two typed jobs that succeed with a result, one
that asks for a retry once, one that always fails (and so ends `failed` after
its retries), one that fails at once (`Fail`), and one delayed by a second;
`run_worker_until_done` runs a real master over them. `clear_earlier` first
deletes what an earlier demo left on its queue, so the queue's counts after a
run are that run's.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from typing import Any

from runtime import config
from runtime.children.context import JobContext
from runtime.errors import Fail, Retry
from runtime.queue.api.client import Client
from runtime.queue.job import Job
from runtime.queue.ops import LISTED_STATES
from runtime.typed import job
from runtime.vocabulary import ENDED_STATES, JobState

log = logging.getLogger(__name__)
QUEUE = "demo"


@job(queue=QUEUE)
def greet(ctx: JobContext, *, name: str = "world") -> str:
    """Succeeds at once with a greeting (a typed job: its data are its arguments)."""
    return f"hello, {name}"


@job(queue=QUEUE)
def add(ctx: JobContext, *, numbers: list[float]) -> dict[str, float]:
    """Succeeds with the sum of `numbers` as its result."""
    return {"sum": sum(numbers), "count": len(numbers)}


@job(queue=QUEUE, retries=3)
def look_up(ctx: JobContext, *, order: int) -> None:
    """Fails at once: no retry can make an unknown order exist."""
    raise Fail(f"order {order} does not exist")


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
    argv = [
        sys.executable,
        "-m",
        "runtime",
        "worker",
        __name__,
        "--queues",
        QUEUE,
        "--concurrency",
        "2",
        "--grace",
        "5",
    ]
    worker = subprocess.Popen(argv, env=env)
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline and worker.poll() is None:
            jobs = [j for j in client.get_jobs(jids) if j is not None]
            if all(j.state in ENDED_STATES for j in jobs):
                break
            time.sleep(0.1)
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=30)
    return [j for j in client.get_jobs(jids) if j is not None]


def clear_earlier(client: Client) -> int:
    """Deletes the jobs of this module's klasses on the demo queue, in any state
    (what earlier demos left); returns how many. Other jobs on a queue that happens
    to be called "demo" stay."""
    ours, page_size = f"{__name__}:", config.LIMITS["get_max"]
    doomed: list[str] = []
    for state in LISTED_STATES:
        if state is JobState.CANCELLED:  # tombstones: no job to delete, retention takes them
            continue
        start, total = 0, 1
        while start < total:
            total, page = client.admin.jobs(QUEUE, state, start, page_size)
            if not page:
                break
            doomed += [j.jid for j in page if j.klass.startswith(ours)]
            start += len(page)
    most = config.LIMITS["cancel_max"]
    for at in range(0, len(doomed), most):
        client.cancel(*doomed[at : at + most])
    return len(doomed)


def put_samples(client: Client) -> list[str]:
    queue = client.queue(QUEUE)
    return [
        greet.using(client).put(name="runtime"),
        add.using(client).put(numbers=[1, 2, 3]),
        queue.put(flaky, {}, retries=2),
        queue.put(broken, {"order": 42}, retries=1, backoff=(0.2, 0.5)),
        look_up.using(client).put(order=7),
        greet.using(client).options(delay=1.0).put(name="later"),
    ]


def outcome(job: Job) -> str:
    """What became of a job, in a few words: its result, or its failure's last line."""
    if job.state == JobState.COMPLETE:
        return "-> " + (json.dumps(job.result) if job.result is not None else "no result")
    if job.failure is not None:  # a traceback ends with the error; a Fail starts with it
        lines = job.failure.message.strip().splitlines() or [job.failure.group]
        return lines[-1] if lines[0].startswith("Traceback") else lines[0]
    return "-"
