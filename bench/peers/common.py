"""What every adapter of the side-by-side benchmark shares.

Adapters run under their own system's virtual env (the peers' pins conflict
with each other and with runtime's), so this module needs only the standard
library and redis-py (any version from 4.2 on).

An adapter module defines some of these functions, each taking the Redis URL
and keyword arguments and returning a JSON-able dict; the harness runs

    python -m bench.peers.<adapter> MEASURE --url URL [--n N] [--variant V]

and reads one JSON object from the last line of stdout. A measure an adapter
does not define is reported as not supported.

    enqueue_one(url, n)      {"rate": jobs/s}, n no-op jobs put one call each (with
                             cost.timed_puts: and what a put costs in Redis)
    enqueue_bulk(url, n)     {"rate": jobs/s}, the system's batch API
    fill(url, n)             {}, n no-op jobs queued (the harness reads memory)
    drain(url, n)            {"rate", "done", "seconds", and the costs per job of
                             cost.Window}, n counting jobs, 2 workers
    latency(url, n)          put-to-start percentiles (ms) at ~50 jobs/s
    lateness(url, n)         start after due time percentiles (ms), due in 2 s
    ratelimit(url, seconds)  a 20/s limit on one key while another runs free
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import redis

from bench.peers import cost

REPO = Path(__file__).resolve().parents[2]
PAYLOAD = {"payload": "x" * 85}  # exactly 100 bytes of JSON
URL_ENV = "BENCH_REDIS_URL"
QUEUE = "bench"
COUNTER = "bench:counter"
STAMPS = "bench:stamps"
DRAIN_CAP_S = 60.0  # a drain slower than this is timed over what it did
POLL_S = 0.01  # the drain's poll of the counter (a GET each, left out of the counts)
LIMIT_RATE = 20  # jobs/s for the rate-limited key
LIMIT_KEY, FREE_KEY = "limited.example", "free.example"

_conns: dict[str, redis.Redis] = {}


def conn(url: str | None = None) -> redis.Redis:
    """One connection per URL and process: jobs use it to count and stamp."""
    url = url or os.environ[URL_ENV]
    if url not in _conns:
        _conns[url] = redis.Redis.from_url(url)
    return _conns[url]


# --- what the jobs of every system do -------------------------------------------


def job_count() -> None:
    conn().incr(COUNTER)


def job_stamp(n: int, key: str = STAMPS) -> None:
    conn().rpush(key, f"{n} {time.time()}")


# --- timing -----------------------------------------------------------------------


def rate(n: int, started: float) -> dict[str, float]:
    return {"rate": n / (time.perf_counter() - started)}


def percentiles(values_ms: Sequence[float]) -> dict[str, float]:
    cuts = statistics.quantiles(values_ms, n=100, method="inclusive")
    return {
        "p50": cuts[49],
        "p95": cuts[94],
        "p99": cuts[98],
        "max": max(values_ms),
        "n": len(values_ms),
    }


def stamps(url: str, n: int, timeout_s: float, key: str = STAMPS) -> dict[int, float]:
    """Start times by job number once n jobs have stamped (or the timeout passed)."""
    r = conn(url)
    deadline = time.monotonic() + timeout_s
    while r.llen(key) < n and time.monotonic() < deadline:
        time.sleep(0.01)
    out = {}
    for raw in r.lrange(key, 0, -1):
        index, when = _text(raw).split()
        out[int(index)] = float(when)
    return out


def wait_started(url: str, put: Callable[[int], None], timeout_s: float = 60) -> None:
    """Puts job number -1 until one starts: the workers are up and warm."""
    r = conn(url)
    deadline = time.monotonic() + timeout_s
    put(-1)
    while r.llen(STAMPS) == 0:
        if time.monotonic() > deadline:
            raise RuntimeError("workers did not start a job within the timeout")
        time.sleep(0.005)
    r.delete(STAMPS)


def paced(n: int, per_s: float, put: Callable[[int], None]) -> dict[int, float]:
    """Puts n jobs, one every 1/per_s seconds; the time.time() of each put call."""
    at = {}
    for i in range(n):
        at[i] = time.time()
        put(i)
        time.sleep(max(0.0, at[i] + 1 / per_s - time.time()))
    return at


def latency_of(url: str, n: int, put: Callable[[int], None], per_s: float = 50) -> dict[str, Any]:
    wait_started(url, put)
    put_at = paced(n, per_s, put)
    started = stamps(url, n, timeout_s=60)
    out = percentiles([(started[i] - put_at[i]) * 1000 for i in range(n) if i in started])
    return {**out, "missing": n - len(started)}


def lateness_of(
    url: str,
    n: int,
    put_at: Callable[[int, float], None],
    put: Callable[[int], None],
    delay_s: float = 2.0,
    spacing_s: float = 0.02,
) -> dict[str, Any]:
    """put_at(i, due) schedules job i to start at the time.time() `due`, delay_s after
    its put; puts are spacing_s apart, so the due times spread over n * spacing_s and
    a scheduler that ticks once a second is sampled at every phase of its tick.
    `early`: jobs that started before their due time (they count as negative)."""
    wait_started(url, put)
    due = {}
    for i in range(n):
        due[i] = time.time() + delay_s
        put_at(i, due[i])
        time.sleep(max(0.0, due[i] - delay_s + spacing_s - time.time()))
    started = stamps(url, n, timeout_s=delay_s + 60)
    late = [(started[i] - due[i]) * 1000 for i in range(n) if i in started]
    return {
        **percentiles(late),
        "early": sum(1 for x in late if x < 0),
        "missing": n - len(started),
    }


def drained(url: str, n: int) -> dict[str, Any]:
    """Times the counter from its first increment to n (or DRAIN_CAP_S): worker
    start-up is left out for every system alike. What the jobs of that window cost
    is counted too (bench/peers/cost.py): Redis CPU and commands, script calls and
    worker-tree CPU per job."""
    r = cost.meter(url)
    deadline = time.monotonic() + DRAIN_CAP_S + 120
    while int(r.get(COUNTER) or 0) < 1:
        if time.monotonic() > deadline:
            raise RuntimeError("no job ran")
        time.sleep(0.002)
    window = cost.Window(url)
    first, start = int(r.get(COUNTER) or 0), time.perf_counter()
    done, polls = first, 0
    while done < n and time.perf_counter() - start < DRAIN_CAP_S:
        time.sleep(POLL_S)
        done, polls = int(r.get(COUNTER) or 0), polls + 1
    seconds = time.perf_counter() - start
    counted = window.close(done - first, polls)
    return {"rate": (done - first) / seconds, "done": done, "seconds": seconds, **counted}


FREE_PER_LIMITED = 20  # free-key jobs queued after each limited-key job


def plan(seconds: float) -> list[tuple[bool, int]]:
    """The rate-limit workload in queue order: (limited?, number). Enough limited jobs
    for 1.5x the run at the limit, each followed by FREE_PER_LIMITED free ones, so the
    free key has work for the whole run unless a system is very fast."""
    out: list[tuple[bool, int]] = []
    for i in range(int(LIMIT_RATE * seconds * 1.5)):
        out.append((True, i))
        out += [(False, i * FREE_PER_LIMITED + j) for j in range(FREE_PER_LIMITED)]
    return out


def limited(url: str, seconds: float) -> dict[str, float]:
    """Reads the stamps of a rate-limit run, `seconds` long from the first job that
    starts: the limited key's starts per second over the steady part (after its first
    second), the most starts in any one-second window, and how fast the free key's
    jobs ran meanwhile (over the span of their own stamps)."""
    r = conn(url)
    limited_key, free_key = STAMPS + ":limited", STAMPS + ":free"
    deadline = time.monotonic() + 120
    while r.llen(limited_key) + r.llen(free_key) == 0:
        if time.monotonic() > deadline:
            raise RuntimeError("no job started")
        time.sleep(0.01)
    time.sleep(seconds)
    limited_at = _times(r.lrange(limited_key, 0, -1))
    free_at = _times(r.lrange(free_key, 0, -1))
    free_span = free_at[-1] - free_at[0] if len(free_at) > 1 else 0.0
    free_rate = len(free_at) / free_span if free_span > 0 else 0.0
    if len(limited_at) < 3:
        return {
            "observed": 0.0,
            "error_pct": -100.0,
            "max_1s": len(limited_at),
            "free_jobs": len(free_at),
            "free_rate": free_rate,
        }
    start = limited_at[0] + 1.0
    steady = [t for t in limited_at if t >= start]
    span = max(steady) - start if steady else 0.0
    observed = len(steady) / span if span > 0 else 0.0
    max_1s, j = 0, 0
    for i, t in enumerate(limited_at):  # the starts in (t - 1 s, t]: windows of one second
        while limited_at[j] <= t - 1.0:
            j += 1
        max_1s = max(max_1s, i - j + 1)
    return {
        "observed": observed,
        "error_pct": (observed / LIMIT_RATE - 1) * 100,
        "max_1s": max_1s,
        "free_jobs": len(free_at),
        "free_rate": free_rate,
    }


def _times(raw: list[Any]) -> list[float]:
    return sorted(float(_text(x).split()[1]) for x in raw)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


# --- worker processes -------------------------------------------------------------


class Workers:
    """Worker processes of the system under test, stopped (TERM, then KILL) on exit.
    They stay in the adapter's process group, which the harness kills afterwards."""

    def __init__(self, argvs: Iterable[Sequence[str]], url: str, **env: str) -> None:
        self.env = {**os.environ, URL_ENV: url, "PYTHONPATH": str(REPO), **env}
        self.log = open(os.environ.get("BENCH_LOG", os.devnull), "ab")  # noqa: SIM115
        self.procs = [
            subprocess.Popen(list(argv), cwd=REPO, env=self.env, stdout=self.log, stderr=self.log)
            for argv in argvs
        ]

    def __enter__(self) -> Workers:
        return self

    def __exit__(self, *exc: object) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 10
        for proc in self.procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.log.close()


def bin_of(name: str) -> str:
    """A console script of the running virtual env."""
    return str(Path(sys.executable).parent / name)


# --- the command line -------------------------------------------------------------

MEASURES = ("enqueue_one", "enqueue_bulk", "fill", "drain", "latency", "lateness", "ratelimit")


def main(adapter: ModuleType) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("measure", choices=MEASURES)
    parser.add_argument("--url", required=True)
    parser.add_argument("--n", type=int, default=0)
    parser.add_argument("--seconds", type=float, default=0)
    parser.add_argument("--variant", default="")
    args = parser.parse_args()
    os.environ[URL_ENV] = args.url
    func = getattr(adapter, args.measure, None)
    if func is None:
        print(json.dumps({"unsupported": True}))
        return 0
    kwargs: dict[str, Any] = {"n": args.n} if args.measure != "ratelimit" else {}
    if args.measure == "ratelimit":
        kwargs["seconds"] = args.seconds
    if args.variant and "variant" in inspect.signature(func).parameters:
        kwargs["variant"] = args.variant  # only measures that differ by variant take it
    print(json.dumps(func(args.url, **kwargs)), flush=True)
    return 0
