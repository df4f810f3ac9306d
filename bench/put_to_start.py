"""`python -m bench.put_to_start`: a job's way from its put to its start in a
child at light load (issue 34), timed and counted. One master (`bench.jobs`,
`--concurrency 2`) on a private redis-server over TCP loopback (AOF everysec);
jobs put one at a time, `--rate` a second, each handed to the idle master
(handoff.lua). Each round reports put-to-start p50/p99 (ms, from just before the
put call to the job's first line, time.time() on both sides) and, per job, what
host load moves little: the Redis commands run (INFO commandstats: FCALL and
BLPOP are the round trips, the rest mostly run inside the scripts; the job's
stamp is one RPUSH), and the context switches (voluntary and not: wake-ups,
mostly) of the master, the fork server, the children and redis-server. With
`--profile`, the master runs under cProfile and its Python calls per job are
counted too (that slows it: read latency from a run without). Each round also
splits the latency at the put's return: the put call itself (client side), and
from its return to the start. With `--slowlog`, Redis logs every command of the
round (slowlog-log-slower-than 0, which adds a little to each) and the median
time inside Redis of each script called is reported by name (put, exchange,
pop, heartbeat). With `--no-master`, the same puts at the same rate meet no
master: no hand-off, so the put call and the put script alone. With `--pin`,
after the warm round, Redis and the putting process run on one CPU and the
worker tree on another (sched_setaffinity), to see what the kernel's placement
of a woken master costs.

    .venv/bin/python -m bench.put_to_start --jobs 300 --repeat 5
    .venv/bin/python -m bench.put_to_start --jobs 300 --profile
    .venv/bin/python -m bench.put_to_start --jobs 200 --repeat 2 --slowlog
    .venv/bin/python -m bench.put_to_start --jobs 200 --repeat 2 --slowlog --no-master
    .venv/bin/python -m bench.put_to_start --jobs 300 --repeat 3 --pin
"""

from __future__ import annotations

import argparse
import json
import os
import pstats
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.peers import cost
from bench.server import connect, private_server
from bench.tree_cost import _roles, _switches
from bench.worker import Master, _namespace
from runtime import Client
from runtime.queue.embedded import ServerProcess

WARM = 20  # jobs of the first round, not counted
TOP = 40  # functions shown


def _percentile(values: list[float], q: int) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


def _commands(conn: Any) -> dict[str, int]:
    info = conn.info("commandstats")
    return {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in info.items()}


def _script_times(conn: Any) -> dict[str, float]:
    """The median µs inside Redis of each script in the slowlog, by name (put,
    pop, ...: named as the headline's profile names them)."""
    times: dict[str, list[int]] = {}
    for entry in conn.slowlog_get(cost.SLOWLOG_READ):
        command = entry["command"]
        name = cost.label((command.decode() if isinstance(command, bytes) else command).split())
        if name.startswith("FCALL "):
            times.setdefault(name.removeprefix("FCALL "), []).append(int(entry["duration"]))
    return {name: statistics.median(v) for name, v in sorted(times.items())}


def _pin(server: ServerProcess, master: Master) -> None:
    """Redis and this process (the putting client) on the first CPU, the worker
    tree (master, fork server, children; every thread) on the second."""
    assert server.process is not None
    first, second, *_ = sorted(os.sched_getaffinity(0))
    roles = _roles(master.proc.pid)
    for pids, cpu in (
        ([server.process.pid, os.getpid()], first),
        ([master.proc.pid, *roles["forkserver"], *roles["children"]], second),
    ):
        for pid in pids:
            for task in os.listdir(f"/proc/{pid}/task"):
                os.sched_setaffinity(int(task), {cpu})


def _round(
    server: ServerProcess, master: Master | None, ns: str, n: int, rate: float, slowlog: bool
) -> dict[str, Any]:
    client = Client.from_url(server.url, namespace=ns)
    q = client.queue("bench")
    conn = connect(server)  # the harness's own: over the unix socket
    key = f"bench:stamps:{ns}:{time.monotonic_ns()}"
    assert server.process is not None
    roles = {**(_roles(master.proc.pid) if master else {}), "redis": [server.process.pid]}
    switched = {r: sum(_switches(pid) for pid in pids) for r, pids in roles.items()}
    if slowlog:
        conn.config_set("slowlog-max-len", cost.SLOWLOG_READ)
        conn.config_set("slowlog-log-slower-than", 0)
        conn.slowlog_reset()
    commands = _commands(conn)
    put_at, returned_at = {}, {}
    for i in range(n):
        put_at[i] = time.time()
        q.put("bench.jobs:stamp", {"url": server.url, "key": key, "n": i})
        returned_at[i] = time.time()
        time.sleep(max(0.0, put_at[i] + 1 / rate - time.time()))
    deadline = time.monotonic() + 60
    while master and conn.llen(key) < n and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.1)  # the last job's report
    scripts = {}
    if slowlog:
        conn.config_set("slowlog-log-slower-than", 10_000)
        scripts = _script_times(conn)
        conn.slowlog_reset()
    switches = {
        r: (sum(_switches(pid) for pid in pids) - switched[r]) / n for r, pids in roles.items()
    }
    after = _commands(conn)
    # the harness's own polls left out (its INFO, LLEN); a job's stamp is one RPUSH
    ours = {"llen", "info"}
    ran = {k: (v - commands.get(k, 0)) / n for k, v in after.items() if k not in ours}
    ran = {k: round(v, 2) for k, v in sorted(ran.items()) if v > 0}
    started = {}
    for raw in conn.lrange(key, 0, -1):
        index, when = (raw.decode() if isinstance(raw, bytes) else raw).split()
        started[int(index)] = float(when)
    ms = [(started[i] - put_at[i]) * 1000 for i in range(n) if i in started]
    call_ms = [(returned_at[i] - put_at[i]) * 1000 for i in range(n)]
    after_ms = [(started[i] - returned_at[i]) * 1000 for i in range(n) if i in started]
    return {
        "p50_ms": _percentile(ms, 50) if master else None,
        "p99_ms": _percentile(ms, 99) if master else None,
        "put_call_p50_ms": _percentile(call_ms, 50),
        "after_put_p50_ms": _percentile(after_ms, 50) if master else None,
        "script_us": scripts,
        "missing": n - len(ms) if master else 0,
        "switches": switches,
        "commands": ran,
    }


def _profiled_master(server: ServerProcess, ns: str, prof: Path, args: list[str]) -> Master:
    popen = subprocess.Popen

    def profiled(argv: list[str], *a: Any, **kw: Any) -> Any:
        if argv[1:3] == ["-m", "runtime"]:
            argv = [argv[0], "-m", "cProfile", "-o", str(prof), *argv[1:]]
        return popen(argv, *a, **kw)

    setattr(subprocess, "Popen", profiled)  # noqa: B010 - bench.worker starts the master with it
    try:
        return Master(server, ns, "--concurrency", "2", *args)
    finally:
        setattr(subprocess, "Popen", popen)  # noqa: B010


def _calls(prof: Path) -> dict[str, int]:
    stats = pstats.Stats(str(prof))
    prof.unlink()
    return {
        f"{Path(f).name}:{line}({name})": c
        for (f, line, name), (_, c, *_) in stats.stats.items()  # type: ignore[attr-defined]
    }


@dataclass(frozen=True)
class Mode:
    slowlog: bool = False  # each script's time inside Redis
    master: bool = True  # False: puts with no master waiting (no hand-off)
    pin: bool = False  # Redis and the client on one CPU, the worker tree on another


def _session(
    server: ServerProcess,
    n: int,
    rate: float,
    repeat: int,
    args: list[str],
    prof: Path | None,
    mode: Mode = Mode(),
) -> list[dict[str, Any]]:
    """One master (or none): a warm round of WARM jobs, then `repeat` rounds of n."""
    ns = _namespace()
    master: Master | None = None
    if mode.master:
        master = (
            Master(server, ns, "--concurrency", "2", *args)
            if prof is None
            else _profiled_master(server, ns, prof, args)
        )
    cpus = os.sched_getaffinity(0)
    try:
        _round(server, master, ns, WARM, rate, False)  # connections, imports, caches
        if mode.pin and master:
            _pin(server, master)
        return [_round(server, master, ns, n, rate, mode.slowlog) for _ in range(repeat)]
    finally:
        os.sched_setaffinity(0, cpus)
        if master:
            master.stop()


def run(
    n: int, rate: float, repeat: int, profile: bool, args: list[str], mode: Mode = Mode()
) -> dict[str, Any]:
    """`repeat` rounds on one master; with `profile`, the master under cProfile, and
    its calls per job counted as the difference to a master that ran the warm
    round alone (its start-up and shutdown left out)."""
    prof = Path(f"/tmp/rt-put-to-start-{os.getpid()}.prof")
    out: dict[str, Any] = {}
    with private_server(tcp=True) as server:
        out["rounds"] = _session(server, n, rate, repeat, args, prof if profile else None, mode)
        if profile:
            calls = _calls(prof)
            _session(server, n, rate, 0, args, prof)
            base = _calls(prof)
            jobs = n * repeat
            per_job = {k: (c - base.get(k, 0)) / jobs for k, c in calls.items()}
            out["master_calls_per_job"] = sum(per_job.values())
            top = sorted(per_job.items(), key=lambda kv: -kv[1])[:TOP]
            out["top_per_job"] = {k: round(c, 2) for k, c in top}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.put_to_start")
    parser.add_argument("--jobs", type=int, default=300, help="jobs a round")
    parser.add_argument("--rate", type=float, default=50.0, help="puts a second")
    parser.add_argument("--repeat", type=int, default=3, help="rounds on one master")
    parser.add_argument("--profile", action="store_true", help="the master under cProfile")
    parser.add_argument("--json", action="store_true", help="print every round as JSON")
    parser.add_argument(
        "--slowlog", action="store_true", help="each script's median time inside Redis"
    )
    parser.add_argument(
        "--no-master", action="store_true", help="no master: the put alone, no hand-off"
    )
    parser.add_argument(
        "--pin", action="store_true", help="Redis and the client on one CPU, the workers on another"
    )
    parser.add_argument("worker_args", nargs="*", help="more `runtime worker` arguments")
    args = parser.parse_args(argv)
    if args.no_master and (args.profile or args.pin):
        parser.error("--profile and --pin need the master: not with --no-master")
    if args.pin and len(os.sched_getaffinity(0)) < 2:
        parser.error("--pin needs two CPUs")
    mode = Mode(slowlog=args.slowlog, master=not args.no_master, pin=args.pin)
    out = run(args.jobs, args.rate, args.repeat, args.profile, args.worker_args, mode)
    rounds = out["rounds"]
    if args.json:
        print(json.dumps(out, indent=2))
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"{args.repeat} rounds of {args.jobs} jobs at {args.rate:g}/s (load {load})")
    labels = {"put_call_p50_ms": "the put call p50_ms"}
    if not args.no_master:
        labels = {
            "p50_ms": "put-to-start p50_ms",
            "p99_ms": "put-to-start p99_ms",
            **labels,
            "after_put_p50_ms": "from the put's return to the start p50_ms",
        }
    for key, label in labels.items():
        values = [r[key] for r in rounds]
        print(
            f"{label}: min {min(values):.2f}, median {statistics.median(values):.2f}"
            f" ({', '.join(f'{v:.2f}' for v in values)})"
        )
    if args.slowlog:
        for name in rounds[-1]["script_us"]:
            values = [r["script_us"].get(name, 0.0) for r in rounds]
            print(f"inside Redis, script {name}: median µs {statistics.median(values):.1f}")
    for role in rounds[0]["switches"]:
        values = [r["switches"][role] for r in rounds]
        print(f"context switches per job, {role}: median {statistics.median(values):.2f}")
    print(f"Redis commands per job (last round): {rounds[-1]['commands']}")
    if args.profile:
        print(f"master Python calls per job: {out['master_calls_per_job']:.1f}")
        for name, c in out["top_per_job"].items():
            print(f"  {name}: {c}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
