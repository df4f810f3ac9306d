"""The application's asyncio client (runtime.AsyncClient) beside the synchronous
Client, in one run. Not a test: prints its numbers as JSON lines.

    .venv/bin/python -m bench.async_client [--jobs 2000] [--coroutines 1000] [--peers] [--stalls]

A private redis-server on TCP loopback. Measured:

* put rate: `jobs` no-op puts, one call each — Client in a loop; AsyncClient
  from 1 coroutine and from 50 at once (one client, its pool);
* wait latency: a job completed by its lease holder (this process, on a thread
  for the sync waiter) while a waiter blocks on it: from just before the
  completion is sent to wait() returning, p50 / p99 over `--waits` jobs;
* loop stalls: inside asyncio.run (and uvloop.run), a 1 ms ticker's largest
  gap and p99 gap, idle (the baseline) and while `coroutines` coroutines each
  put a no-op job and await its result from a running worker (one master,
  concurrency 2); with the loop thread's CPU time in each gap (time.thread_time:
  what the loop ran, apart from what else the machine runs); beside the loop's
  own floor (as many coroutines that only sleep, started at once) and the
  garbage collector's largest run in the busy phase; then all of it again
  after gc.freeze() (a server's start-up left out of later collections);
  `--stalls`: only these;
* `--peers`: arq's and SAQ's own async enqueue rate (their adapters'
  enqueue_one, bench/peers) on the same server, one call each, in their
  virtual envs (built by bench.side.ensure_venv from bench/peers/requirements).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import uvloop

from bench import server as bench_server
from runtime import AsyncClient, Client
from runtime.queue.embedded import ServerProcess

W = "bench-host"
NOOP = "bench.peers.runtime_tasks:noop"


def report(**fields: Any) -> None:
    print(json.dumps(fields), flush=True)


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p * len(ordered)))]


# --- put rate -------------------------------------------------------------------------------


def sync_puts(url: str, ns: str, n: int) -> float:
    with Client.from_url(url, namespace=ns) as client:
        q = client.queue("rate")
        client.status()  # connected, functions loaded
        started = time.perf_counter()
        for _ in range(n):
            q.put(NOOP, {})
        return n / (time.perf_counter() - started)


async def async_puts(url: str, ns: str, n: int, concurrency: int) -> float:
    async with AsyncClient.from_url(url, namespace=ns) as ac:
        q = ac.queue("rate")
        await ac.status()  # connected, functions loaded

        async def putter(count: int) -> None:
            for _ in range(count):
                await q.put(NOOP, {})

        started = time.perf_counter()
        share = [n // concurrency + (i < n % concurrency) for i in range(concurrency)]
        await asyncio.gather(*(putter(c) for c in share))
        return n / (time.perf_counter() - started)


# --- wait latency ---------------------------------------------------------------------------


def registered(holder: Client, jid: str) -> bool:
    record = holder.redis.hget(holder.keys.key("jobs"), jid)
    return isinstance(record, bytes) and b'"wt":' in record


def until(check: Callable[[], bool], deadline_s: float = 10.0) -> None:
    deadline = time.monotonic() + deadline_s
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError("the waiter never registered")
        time.sleep(0.0005)


def _wait_and_stamp(waiter: Client, jid: str, done: list[float]) -> None:
    waiter.wait(jid, 30)
    done.append(time.perf_counter())


def sync_latency(url: str, ns: str, waits: int) -> list[float]:
    holder, waiter = Client.from_url(url, namespace=ns), Client.from_url(url, namespace=ns)
    took = []
    for i in range(waits):
        jid = holder.queue("lat").put(NOOP, {})
        [lease] = holder.queue("lat").pop(1, worker=W)
        done: list[float] = []
        thread = threading.Thread(target=_wait_and_stamp, args=(waiter, jid, done))
        thread.start()
        until(functools.partial(registered, holder, jid))
        sent = time.perf_counter()
        lease.complete(result=i)
        thread.join()
        took.append(done[0] - sent)
    holder.close()
    waiter.close()
    return took


async def async_latency(url: str, ns: str, waits: int) -> list[float]:
    holder = Client.from_url(url, namespace=ns)
    took = []
    async with AsyncClient.from_url(url, namespace=ns) as ac:
        for i in range(waits):
            jid = holder.queue("lat").put(NOOP, {})
            [lease] = holder.queue("lat").pop(1, worker=W)
            waiting = asyncio.create_task(ac.wait(jid, 30))
            while not registered(holder, jid):
                await asyncio.sleep(0.0005)
            sent = time.perf_counter()
            # the completion from a thread: the loop stays free to take the wake-up
            await asyncio.to_thread(lease.complete, result=i)
            await waiting
            took.append(time.perf_counter() - sent)
    holder.close()
    return took


# --- loop stalls ----------------------------------------------------------------------------


class Collections:
    """The garbage collector's runs while it is installed: how long each took
    (a full collection walks every object the process holds, whoever made the
    garbage: it lands in whichever turn of the loop allocates at that moment)."""

    def __init__(self) -> None:
        self.took: list[float] = []
        self._started = 0.0

    def __enter__(self) -> Collections:
        gc.callbacks.append(self._seen)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._seen)

    def _seen(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.took.append(time.perf_counter() - self._started)


async def ticking(work: Callable[[], Awaitable[Any]]) -> tuple[list[float], list[float], Any]:
    """The gaps of a 1 ms ticker while `work` runs (wall clock, and the loop
    thread's CPU time in each: what the loop itself ran, whatever else the
    machine runs), and what `work` answered."""
    gaps: list[float] = []
    cpu: list[float] = []
    stop = asyncio.Event()

    async def tick() -> None:
        last, last_cpu = time.perf_counter(), time.thread_time()
        while not stop.is_set():
            await asyncio.sleep(0.001)
            now, now_cpu = time.perf_counter(), time.thread_time()
            gaps.append(now - last)
            cpu.append(now_cpu - last_cpu)
            last, last_cpu = now, now_cpu

    ticker = asyncio.create_task(tick())
    try:
        answer = await work()
    finally:
        stop.set()
        await ticker
    return gaps, cpu, answer


def gap_figures(name: str, gaps: list[float], cpu: list[float]) -> dict[str, float]:
    return {
        f"{name}_max_gap_ms": max(gaps) * 1e3,
        f"{name}_p99_gap_ms": pct(gaps, 0.99) * 1e3,
        f"{name}_max_cpu_ms": max(cpu) * 1e3,
        f"{name}_p99_cpu_ms": pct(cpu, 0.99) * 1e3,
    }


async def stalls(url: str, ns: str, coroutines: int) -> dict[str, float]:
    """The ticker idle; beside `coroutines` coroutines that only sleep (the
    loop's own floor: asyncio.gather starting that many at once); and beside
    as many each putting a job and awaiting its result."""
    idle, idle_cpu, _ = await ticking(lambda: asyncio.sleep(1.0))

    async def parked() -> list[None]:
        return list(await asyncio.gather(*(asyncio.sleep(0.2) for _ in range(coroutines))))

    floor, floor_cpu, _ = await ticking(parked)
    async with AsyncClient.from_url(url, namespace=ns) as ac:
        await ac.status()

        async def one(i: int) -> Any:
            jid = await ac.queue("echo").put(NOOP, {"i": i})
            return await ac.wait(jid, timeout=120)

        async def all_of() -> list[Any]:
            return list(await asyncio.gather(*(one(i) for i in range(coroutines))))

        with Collections() as collected:
            busy, busy_cpu, results = await ticking(all_of)
    assert results == [{"i": i} for i in range(coroutines)] or len(results) == coroutines
    return {
        **gap_figures("idle", idle, idle_cpu),
        **gap_figures("floor", floor, floor_cpu),
        **gap_figures("busy", busy, busy_cpu),
        "busy_gc_max_ms": max(collected.took, default=0.0) * 1e3,
        "busy_gc_runs": len(collected.took),
    }


def stalls_frozen(url: str, ns: str, coroutines: int, runner: Callable[..., Any]) -> Any:
    """`stalls` after gc.freeze(), as a server does once started (the objects of
    its start-up left out of every later collection)."""
    gc.collect()
    gc.freeze()
    try:
        return runner(stalls(url, ns, coroutines))
    finally:
        gc.unfreeze()


def start_worker(url: str, ns: str, workdir: Path) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "REDIS_URL": url,
        "RUNTIME_NAMESPACE": ns,
        "RUNTIME_STATE_DIR": str(workdir),
    }
    argv = [sys.executable, "-m", "runtime", "worker", "bench.peers.runtime_tasks",
            "--queues", "echo", "--concurrency", "2"]  # fmt: skip
    log = (workdir / "worker.log").open("ab")
    return subprocess.Popen(argv, env=env, stdout=log, stderr=log)


# --- peers ----------------------------------------------------------------------------------


def peer_rates(server: ServerProcess, n: int, workdir: Path) -> None:
    from bench import side  # noqa: PLC0415 - only with --peers

    measure = next(m for m in side.MEASURES if m.call == "enqueue_one")
    for name in ("arq", "saq"):
        system = next(s for s in side.SYSTEMS if s.venv == name)
        side.ensure_venv(name)
        reply = side.call(system, measure, server.url, n, workdir / f"{name}.log")
        report(what="put rate", client=f"{name} async enqueue", **reply)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--waits", type=int, default=200)
    parser.add_argument("--coroutines", type=int, default=1000)
    parser.add_argument("--peers", action="store_true", help="arq and SAQ in the same run")
    parser.add_argument("--stalls", action="store_true", help="only the loop stalls")
    args = parser.parse_args()
    with bench_server.private_server(tcp=True) as server, tempfile.TemporaryDirectory() as tmp:
        url, workdir = server.url, Path(tmp)
        if not args.stalls:
            rates_and_latency(url, args.jobs, args.waits)
        worker = start_worker(url, "t1", workdir)
        try:
            for loop, runner in (("asyncio", asyncio.run), ("uvloop", uvloop.run)):
                found = runner(stalls(url, "t1", args.coroutines))
                report(what="loop stalls", loop=loop, coroutines=args.coroutines, **found)
                found = stalls_frozen(url, "t1", args.coroutines, runner)
                report(what="loop stalls", loop=loop, gc="frozen", coroutines=args.coroutines,
                       **found)  # fmt: skip
        finally:
            worker.terminate()
            worker.wait(30)
        if args.peers:
            peer_rates(server, args.jobs, workdir)
    return 0


def rates_and_latency(url: str, jobs: int, waits: int) -> None:
    report(what="put rate", client="Client", jobs_per_s=sync_puts(url, "s1", jobs))
    for concurrency in (1, 50):
        rate = asyncio.run(async_puts(url, f"a{concurrency}", jobs, concurrency))
        report(what="put rate", client=f"AsyncClient x{concurrency}", jobs_per_s=rate)
    for name, took in (
        ("Client", sync_latency(url, "l1", waits)),
        ("AsyncClient", asyncio.run(async_latency(url, "l2", waits))),
    ):
        report(what="wait latency", client=name, p50_ms=statistics.median(took) * 1e3,
               p99_ms=pct(took, 0.99) * 1e3)  # fmt: skip


if __name__ == "__main__":
    raise SystemExit(main())
