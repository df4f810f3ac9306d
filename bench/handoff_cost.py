"""`python -m bench.handoff_cost [DIR] [--idle-s 20] [--jobs 40]`: what idle masters
and the hand-off cost Redis, counted with INFO commandstats, and what a master
killed while idle costs the jobs put after it (issue 22). Not a test: prints
its numbers.

Runs the checkout DIR (default: this one) against a private redis-server on TCP
loopback (AOF everysec), with two masters (`bench.jobs`, one child each) on one
queue:

    idle     both masters wait: Redis commands and script calls per master
             and idle second (their safety polls)
    handed   jobs put one at a time, each after the last completed (every
             one handed to a waiting master): commands (those of scripts
             included), script calls, BLPOPs and Redis CPU (commandstats
             usec) per job, the put and the client's wait included
    handed_sparse  the same, 1.2 s between a job's end and the next put (a
             look at the end of each first lease is not absorbed by the
             next job)
    crash    one master SIGKILLed while idle, then jobs put one at a time:
             the longest put-to-start
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

NAMESPACE = "bench-handoff"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _stats(redis: Any) -> dict[str, float]:
    """Calls, script calls, BLPOPs and usec since the last reset."""
    info = redis.info("commandstats")
    calls = sum(int(v["calls"]) for v in info.values())
    usec = sum(int(v["usec"]) for v in info.values())
    scripts = ("cmdstat_fcall", "cmdstat_evalsha")
    fcalls = sum(int(v["calls"]) for k, v in info.items() if k in scripts)
    blpops = int(info.get("cmdstat_blpop", {}).get("calls", 0))
    return {"calls": calls, "fcalls": fcalls, "blpops": blpops, "usec": usec}


def _idle_registered(client: Any, count: int) -> bool:
    return int(client.redis.zcard(client.keys.key("idle", queue="q"))) == count


def _wait(probe: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not probe():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.01)


def run(checkout: Path, idle_s: float, jobs: int, sparse: int) -> dict[str, Any]:
    sys.path.insert(0, str(checkout))
    from runtime import Client  # noqa: PLC0415 - the checkout's runtime
    from runtime.queue.embedded import ServerProcess, find_server_binary  # noqa: PLC0415

    directory = Path(tempfile.mkdtemp(prefix="rt-hcost-", dir="/tmp"))
    port = _free_port()
    server = ServerProcess(
        find_server_binary(), directory, appendonly=True, extra=f"port {port}\nbind 127.0.0.1"
    )
    server.start()
    url = f"redis://127.0.0.1:{port}"
    env = {
        **os.environ,
        "REDIS_URL": url,
        "RUNTIME_NAMESPACE": NAMESPACE,
        "RUNTIME_STATE_DIR": str(directory),
        "PYTHONPATH": str(checkout),
    }
    argv = [sys.executable, "-m", "runtime", "worker", "bench.jobs", "--queues", "q", "-c", "1"]
    masters = []
    out: dict[str, Any] = {"checkout": str(checkout)}
    try:
        client = Client.from_url(url, namespace=NAMESPACE)
        redis = client.redis
        quiet = subprocess.DEVNULL
        for n in (1, 2):
            master = subprocess.Popen(argv, cwd=checkout, env=env, stdout=quiet, stderr=quiet)
            masters.append(master)
            _wait(lambda n=n: _idle_registered(client, n), 60, "a master to wait")
        redis.config_resetstat()
        time.sleep(idle_s)
        got = _stats(redis)
        out["idle"] = {k: round(v / idle_s / 2, 3) for k, v in got.items()}
        for name, gap_s, count in (("handed", 0.0, jobs), ("handed_sparse", 1.2, sparse)):
            redis.config_resetstat()
            for _ in range(count):
                jid = client.queue("q").put("bench.jobs:noop", {})
                client.wait(jid, timeout=30)
                _wait(lambda: _idle_registered(client, 2), 30, "both masters waiting again")
                time.sleep(gap_s)  # sparse: each job's first lease has ended before the next
            time.sleep(1.2)  # a look at a handed job's first lease end is part of its cost
            got = _stats(redis)
            out[name] = {k: round(v / count, 2) for k, v in got.items()}
        masters[0].send_signal(signal.SIGKILL)
        masters[0].wait()
        worst = 0.0
        for _ in range(4):
            jid = client.queue("q").put("bench.jobs:noop", {})
            client.wait(jid, timeout=60)
            job = client.get_job(jid)
            assert job is not None
            popped = [e.at_ms for e in job.history if e.event == "popped"]
            worst = max(worst, (popped[-1] - job.history[0].at_ms) / 1000)
        out["crash_worst_put_to_pop_s"] = round(worst, 3)
    finally:
        for master in masters:
            if master.poll() is None:
                master.kill()
                master.wait()
        server.stop()
        shutil.rmtree(directory, ignore_errors=True)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkout", nargs="?", default=str(Path(__file__).resolve().parents[1]))
    parser.add_argument("--idle-s", type=float, default=20.0)
    parser.add_argument("--jobs", type=int, default=40)
    parser.add_argument("--sparse-jobs", type=int, default=15)
    args = parser.parse_args(argv)
    print(run(Path(args.checkout).resolve(), args.idle_s, args.jobs, args.sparse_jobs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
