"""The worker host end to end: drain rate with two children next to a bare
redis-py loop (two processes doing BLMOVE then LREM), put-to-start latency at
light load, and how late delayed jobs start."""

from __future__ import annotations

import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from bench.server import connect, private_server
from runtime import Client
from runtime.queue.embedded import ServerProcess

REPO = Path(__file__).resolve().parents[1]


class Master:
    """`runtime worker bench.jobs` as a subprocess, ready when systemd would be told."""

    def __init__(self, server: ServerProcess, namespace: str, *args: str) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="rt-bm-", dir="/tmp"))
        notify = self.dir / "notify"
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(notify))
        env = {
            **os.environ,
            "REDIS_URL": server.url,
            "RUNTIME_NAMESPACE": namespace,
            "NOTIFY_SOCKET": str(notify),
            "RUNTIME_STATE_DIR": str(self.dir),
        }
        argv = [sys.executable, "-m", "runtime", "worker", "bench.jobs", "--queues", "bench", *args]
        log = (self.dir / "master.log").open("wb")
        self.proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=log, stderr=log)
        self.sock.settimeout(60)
        while b"READY=1" not in self.sock.recv(4096):
            pass
        self.sock.setblocking(False)

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=60)
        self.sock.close()


def _namespace() -> str:
    return "w" + uuid.uuid4().hex[:10]


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds a process has used."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _descendants(pid: int) -> list[int]:
    out = []
    for task in os.listdir(f"/proc/{pid}/task"):
        kids = Path(f"/proc/{pid}/task/{task}/children").read_text().split()
        for kid in map(int, kids):
            out += [kid, *_descendants(kid)]
    return out


def drain(
    server: ServerProcess, n: int, *args: str, klass: str = "bench.jobs:count"
) -> dict[str, float]:
    """n queued counting jobs, two children, timed until the counter says n; with the
    CPU each process spent per job. klass: bench.jobs:count_and_print for jobs that
    print a line."""
    ns = _namespace()
    client = Client.from_url(server.url, namespace=ns)
    key = f"bench:count:{ns}"
    data = {"url": server.url, "key": key}
    q = client.queue("bench")
    for offset in range(0, n, 1000):
        client.put_many(q.spec(klass, data) for _ in range(min(1000, n - offset)))
    conn = connect(server)
    master = Master(server, ns, "--concurrency", "2", *args)
    assert server.process is not None
    groups = {
        "master": [master.proc.pid],
        "redis": [server.process.pid],
        "children": _descendants(master.proc.pid),  # the fork server and its children
    }

    def cpu() -> dict[str, float]:
        return {name: sum(_cpu_s(pid) for pid in pids) for name, pids in groups.items()}

    before = cpu()
    start = time.perf_counter()
    while int(conn.get(key) or 0) < n:
        time.sleep(0.002)
    elapsed = time.perf_counter() - start
    used = {name: spent - before[name] for name, spent in cpu().items()}
    master.stop()
    assert int(conn.get(key) or 0) == n
    return {"rate": n / elapsed, **{f"cpu_{k}_us": v / n * 1e6 for k, v in used.items()}}


def bare(server: ServerProcess, n: int, processes: int = 2) -> float:
    """Items per second of `processes` bare loops, timed from a common start signal."""
    conn = connect(server)
    tag = uuid.uuid4().hex
    source, processing, go = f"bench:bare:{tag}", f"bench:bare:{tag}:processing", f"bench:go:{tag}"
    for offset in range(0, n, 1000):
        conn.lpush(source, *[b"x" * 100] * min(1000, n - offset))
    argv = [sys.executable, "-m", "bench.bare", server.url, source, processing, go]
    procs = [subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE) for _ in range(processes)]
    while conn.llen(go + ":ready") < processes:
        time.sleep(0.005)
    start = time.time()
    conn.rpush(go, *["go"] * processes)
    ends = [float(proc.communicate(timeout=600)[0]) for proc in procs]
    assert conn.llen(source) == 0 and conn.llen(processing) == 0
    conn.delete(go + ":ready")
    return n / (max(ends) - start)


def _stamps(conn: Any, key: str, n: int, timeout_s: float = 60) -> dict[int, float]:
    deadline = time.monotonic() + timeout_s
    while conn.llen(key) < n and time.monotonic() < deadline:
        time.sleep(0.01)
    out = {}
    for raw in conn.lrange(key, 0, -1):
        index, when = raw.decode().split()
        out[int(index)] = float(when)
    return out


def _percentiles(values_ms: list[float]) -> dict[str, float]:
    cuts = statistics.quantiles(values_ms, n=100, method="inclusive")
    return {"p50": cuts[49], "p95": cuts[94], "p99": cuts[98], "max": max(values_ms)}


def latency(server: ServerProcess, n: int = 300, rate: float = 50.0) -> dict[str, float]:
    """Put-to-start latency (ms) at light load: one put every 1/rate s to an idle master;
    also from the moment the put call returned (the put's own round trip left out)."""
    ns = _namespace()
    client = Client.from_url(server.url, namespace=ns)
    key = f"bench:stamps:{ns}"
    master = Master(server, ns, "--concurrency", "2")
    q = client.queue("bench")
    put_at, returned_at = {}, {}
    for i in range(n):
        put_at[i] = time.time()
        q.put("bench.jobs:stamp", {"url": server.url, "key": key, "n": i})
        returned_at[i] = time.time()
        time.sleep(max(0.0, put_at[i] + 1 / rate - time.time()))
    started = _stamps(connect(server), key, n)
    master.stop()
    out = _percentiles([(started[i] - put_at[i]) * 1000 for i in range(n)])
    after = _percentiles([(started[i] - returned_at[i]) * 1000 for i in range(n)])
    out["after_put_p50"], out["after_put_p99"] = after["p50"], after["p99"]
    return out


def lateness(server: ServerProcess, n: int = 100, delay_s: float = 2.0) -> dict[str, float]:
    """How long after their due time (ms) delayed jobs start."""
    ns = _namespace()
    client = Client.from_url(server.url, namespace=ns)
    key = f"bench:late:{ns}"
    master = Master(server, ns, "--concurrency", "2")
    q = client.queue("bench")
    due = {}
    for i in range(n):
        due[i] = time.time() + delay_s
        q.put("bench.jobs:stamp", {"url": server.url, "key": key, "n": i}, delay=delay_s)
        time.sleep(0.005)
    started = _stamps(connect(server), key, n, timeout_s=delay_s + 60)
    master.stop()
    return _percentiles([(started[i] - due[i]) * 1000 for i in range(n)])


def run(quick: bool = False) -> dict[str, Any]:
    n = 2000 if quick else 20_000
    repeat = 1 if quick else 3
    measures: dict[str, Any] = {}
    with private_server(tcp=True) as server:
        bare_runs = [bare(server, n) for _ in range(repeat)]
        drains, printing = [], []
        for _ in range(repeat):  # interleaved: the host's drift hits both alike
            drains.append(drain(server, n))
            printing.append(drain(server, n, klass="bench.jobs:count_and_print"))
        measures["bare redis-py loop, 2 processes, BLMOVE + LREM (items/s)"] = bare_runs
        measures["runtime drain, --concurrency 2 (jobs/s)"] = [d["rate"] for d in drains]
        ratios = [d["rate"] / b for d, b in zip(drains, bare_runs, strict=True)]
        measures["runtime / bare loop (ratio, same run)"] = ratios
        for part in ("master", "redis", "children"):
            measures[f"drain CPU per job, {part} (us)"] = [d[f"cpu_{part}_us"] for d in drains]
        measures["drain, jobs that print a line (jobs/s)"] = [d["rate"] for d in printing]
        measures["printing / silent drain (ratio, same run)"] = [
            p["rate"] / d["rate"] for p, d in zip(printing, drains, strict=True)
        ]
        lat = [latency(server, 100 if quick else 300) for _ in range(repeat)]
        for name in ("p50", "p95", "p99", "max"):
            measures[f"put-to-start latency {name} (ms)"] = [r[name] for r in lat]
        for name in ("p50", "p99"):
            measures[f"start after the put call returned {name} (ms)"] = [
                r[f"after_put_{name}"] for r in lat
            ]
        late = [lateness(server, 50 if quick else 100) for _ in range(repeat)]
        for name in ("p50", "p99", "max"):
            measures[f"delayed job lateness {name} (ms)"] = [r[name] for r in late]
    return {"jobs": n, "repeat": repeat, "measures": measures}
