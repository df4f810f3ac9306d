"""`python -m bench.tree_cost`: what a job costs each process of the worker tree,
counted: CPU time (utime + stime from /proc, microseconds per job, the system
part shown apart) and context switches per job of the master, the fork server
and the children, over a drain of queued counting jobs (`--concurrency 2`, TCP
loopback as deployed); with `--strace` the system calls each of them makes per
job (`strace -c -f`; it slows the drain, so CPU is better read from a run
without it), with `--py-spy` wall-clock samples of the master and a child.

The master is paused (USR2) once ready, the jobs are put, tracers attach, and
the window opens when it is resumed (CONT): every job counted runs inside it,
and the start-up is left out. The fork server and the children are told apart
by their parent: the fork server is the master's child, the children are the
fork server's. CPU time of a process includes its threads (the child's reader
thread), not its reaped children. Counts of calls move little with the host's
load; CPU time does, so compare medians of a few rounds (`--repeat`), two
versions interleaved.

    .venv/bin/python -m bench.tree_cost --jobs 20000 --repeat 3
    .venv/bin/python -m bench.tree_cost --jobs 5000 --strace
    .venv/bin/python -m bench.tree_cost -- --prefetch 0 --pipeline 0
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

from bench.server import connect, private_server
from bench.worker import Master, _namespace
from runtime import Client
from runtime.queue.embedded import ServerProcess

ROLES = ("master", "forkserver", "children")
TICK_S = 1 / os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def _own_cpu_s(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of a process, its threads included."""
    fields = _stat(pid)
    return int(fields[11]) * TICK_S, int(fields[12]) * TICK_S


def _switches(pid: int) -> int:
    """Context switches of a process's threads (voluntary and not): wake-ups, mostly."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        for line in Path(f"/proc/{pid}/task/{task}/status").read_text().splitlines():
            if line.endswith("ctxt_switches:") or "ctxt_switches:" in line:
                total += int(line.split()[1])
    return total


def _children(pid: int) -> list[int]:
    kids: list[int] = []
    for task in os.listdir(f"/proc/{pid}/task"):
        kids += map(int, Path(f"/proc/{pid}/task/{task}/children").read_text().split())
    return kids


def _roles(master_pid: int) -> dict[str, list[int]]:
    servers = _children(master_pid)
    return {
        "master": [master_pid],
        "forkserver": servers,
        "children": [kid for server in servers for kid in _children(server)],
    }


def _strace(pids: list[int], out: Path) -> subprocess.Popen[bytes]:
    argv = ["strace", "-c", "-f", "-o", str(out)]
    for pid in pids:
        argv += ["-p", str(pid)]
    proc = subprocess.Popen(argv, stderr=subprocess.DEVNULL)
    time.sleep(0.5)  # attached (strace says nothing when it is)
    return proc


def _syscalls(out: Path) -> dict[str, int]:
    calls: dict[str, int] = {}
    for line in out.read_text().splitlines():
        parts = line.split()
        if len(parts) >= 5 and re.fullmatch(r"[\d.]+", parts[0]) and parts[-1] != "total":
            calls[parts[-1]] = int(parts[3])
    return calls


def _py_spy(pid: int, out: Path) -> subprocess.Popen[bytes]:
    argv = [
        "py-spy",
        "record",
        "--rate",
        "500",
        "--format",
        "raw",
        "--native",
        "--output",
        str(out),
        "--pid",
        str(pid),
    ]
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def drain(
    server: ServerProcess, n: int, args: list[str], strace: bool, where: Path, spy: bool = False
) -> dict[str, Any]:
    ns = _namespace()
    client = Client.from_url(server.url, namespace=ns)
    key = f"bench:count:{ns}"
    data = {"url": server.url, "key": key}
    q = client.queue("bench")
    conn = connect(server)
    master = Master(server, ns, "--concurrency", "2", *args)
    master.proc.send_signal(signal.SIGUSR2)  # paused while the jobs are put and tracers attach
    for offset in range(0, n, 1000):
        client.put_many(q.spec("bench.jobs:count", data) for _ in range(min(1000, n - offset)))
    roles = _roles(master.proc.pid)
    tracers: dict[str, subprocess.Popen[bytes]] = {}
    if strace:
        tracers = {r: _strace(pids, where / f"{r}.strace") for r, pids in roles.items()}
    if spy:  # the master and one child, sampled (py-spy on PATH)
        tracers = {r: _py_spy(roles[r][0], where / f"{r}.spy") for r in ("master", "children")}
        time.sleep(1.0)

    def cpu() -> dict[str, tuple[float, float]]:
        out = {}
        for role, pids in roles.items():
            times = [_own_cpu_s(pid) for pid in pids]
            out[role] = (sum(t[0] for t in times), sum(t[1] for t in times))
        return out

    switched = {r: sum(_switches(pid) for pid in pids) for r, pids in roles.items()}
    before = cpu()
    start = time.perf_counter()
    master.proc.send_signal(signal.SIGCONT)
    while int(conn.get(key) or 0) < n:
        time.sleep(0.005)
    elapsed = time.perf_counter() - start
    after = cpu()
    used = {r: (sum(after[r]) - sum(before[r])) / n * 1e6 for r in roles}
    system = {r: (after[r][1] - before[r][1]) / n * 1e6 for r in roles}
    switches = {
        r: (sum(_switches(pid) for pid in pids) - switched[r]) / n for r, pids in roles.items()
    }
    for tracer in tracers.values():
        tracer.send_signal(signal.SIGINT)
        tracer.wait(timeout=60)
    master.stop()
    out: dict[str, Any] = {
        "rate": n / elapsed,
        "cpu_us": used,
        "system_us": system,
        "switches": switches,
    }
    if strace:
        out["syscalls"] = {
            r: {name: c / n for name, c in _syscalls(where / f"{r}.strace").items()} for r in roles
        }
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.tree_cost")
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--strace", action="store_true", help="count system calls (slower)")
    parser.add_argument("--py-spy", action="store_true", help="sample the master and a child")
    parser.add_argument("--json", action="store_true", help="print every run as JSON")
    parser.add_argument("worker_args", nargs="*", help="more `runtime worker` arguments")
    args = parser.parse_args(argv)
    runs = []
    where = Path(f"/tmp/rt-tree-cost-{os.getpid()}")
    where.mkdir(exist_ok=True)
    with private_server(tcp=True) as server:
        for _ in range(args.repeat):
            runs.append(drain(server, args.jobs, args.worker_args, args.strace, where, args.py_spy))
    print(f"files in {where}")
    if args.json:
        print(json.dumps(runs, indent=2))
    print(
        f"a drain of {args.jobs:,} jobs, --concurrency 2 {' '.join(args.worker_args)}; "
        f"per job, median of {args.repeat}"
    )
    print(f"rate {statistics.median(r['rate'] for r in runs):,.0f} jobs/s")
    for role in ROLES:
        print(
            f"CPU {role}: {statistics.median(r['cpu_us'][role] for r in runs):.1f} us "
            f"(system {statistics.median(r['system_us'][role] for r in runs):.1f}), "
            f"context switches {statistics.median(r['switches'][role] for r in runs):.2f}"
        )
    total = [sum(r["cpu_us"].values()) for r in runs]
    print(f"CPU tree: {statistics.median(total):.1f} us")
    if args.strace:
        for role in ROLES:
            calls = runs[-1]["syscalls"][role]
            ranked = sorted(calls.items(), key=lambda kv: -kv[1])
            listed = ", ".join(f"{k} {v:.2f}" for k, v in ranked if v >= 0.01)
            print(f"syscalls {role}: {sum(calls.values()):.2f} ({listed})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
