"""`python -m bench.master_calls OLD NEW`: what a job costs the master, counted: the
Python function calls a master makes per job in the worker suite's drain (counting
jobs, `--concurrency 2`, TCP loopback as deployed), under cProfile, for two
versions of runtime, rounds interleaved. Counts move far less with the host's load
than CPU time does, though not at all is too much to ask: a slower host means more
passes of the loop per job (the per-job "passes" row says how many), so compare
the counts of one function more than the totals. Also counted per job: calls of
`asyncio.get_running_loop` (each makes a getpid syscall), reads of the children's
output pipes, sends to children (each wakes one) and the FCALLs Redis ran.

Each version runs from its own checkout (a commit is checked out as a detached
worktree under /tmp and removed afterwards), on its own redis-server (AOF on); the
master is started as `python -m cProfile -o FILE -m runtime worker ...`, which
writes its profile when TERM stops it.

    .venv/bin/python -m bench.master_calls 34aab4c HEAD --jobs 10000
"""

from __future__ import annotations

import argparse
import json
import os
import pstats
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

TOP = 40  # functions shown per side


def probe(jobs: int, keep: Path | None = None, extra: tuple[str, ...] = ()) -> dict[str, Any]:
    """Runs inside a checkout (cwd): one profiled drain."""
    sys.path[0] = os.getcwd()  # the checkout's runtime and bench, not this file's
    import redis  # noqa: PLC0415 - the checkout's environment, like runtime

    import runtime  # noqa: PLC0415 - imported from the checkout, after sys.path is set
    from bench import worker  # noqa: PLC0415
    from runtime.queue.embedded import ServerProcess, find_server_binary  # noqa: PLC0415

    class TcpServer(ServerProcess):
        port = 0

        @property
        def url(self) -> str:
            return f"redis://127.0.0.1:{self.port}"

    directory = Path(tempfile.mkdtemp(prefix="rt-calls-", dir="/tmp"))
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    server = TcpServer(find_server_binary(), directory, appendonly=True,
                       extra=f"port {port}\nbind 127.0.0.1")  # fmt: skip
    server.port = port
    out = directory / "master.prof"
    popen = subprocess.Popen

    def profiled(argv: list[str], *args: Any, **kwargs: Any) -> Any:
        if argv[1:3] == ["-m", "runtime"]:
            argv = [argv[0], "-m", "cProfile", "-o", str(out), *argv[1:]]
        return popen(argv, *args, **kwargs)

    server.start()
    try:
        worker.drain(server, 500)  # warm, unprofiled: the library loaded, the files cached
        setattr(subprocess, "Popen", profiled)  # noqa: B010 - bench.worker starts the master with it
        redis_client = redis.Redis.from_url(server.url)
        redis_client.config_resetstat()
        drained = worker.drain(server, jobs, *extra)
        fcalls = redis_client.info("commandstats").get("cmdstat_fcall", {}).get("calls", 0)
        stats = pstats.Stats(str(out))
        if keep is not None:
            shutil.copyfile(out, keep)
    finally:
        server.stop()
        shutil.rmtree(directory, ignore_errors=True)
    calls = {f"{Path(f).name}:{line}({name})": n for (f, line, name), (_, n, *_) in
             stats.stats.items()}  # type: ignore[attr-defined]  # fmt: skip
    passes = sum(n for name, n in calls.items() if name.endswith("(_pass)"))
    top = dict(sorted(calls.items(), key=lambda kv: -kv[1])[:TOP])
    return {
        "runtime": runtime.__file__,
        "rate": drained["rate"],
        "calls_per_job": stats.total_calls / jobs,  # type: ignore[attr-defined]
        "passes_per_job": passes / jobs,
        # what a call costs beyond Python: get_running_loop makes a getpid syscall
        # (a fork check), os.read reads a child's output, a socket send wakes a child
        "get_running_loop_per_job": _count(calls, "_asyncio.get_running_loop>)") / jobs,
        "output_reads_per_job": _count(calls, "(<built-in method posix.read>)") / jobs,
        "sends_to_children_per_job": _count(calls, "'send' of '_socket.socket' objects>)") / jobs,
        "redis_fcalls_per_job": fcalls / jobs,  # the drain's own counter reads are GETs
        "top_per_job": {name: n / jobs for name, n in top.items()},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.master_calls")
    parser.add_argument("old", nargs="?", help="commit or checkout directory")
    parser.add_argument("new", nargs="?", help="commit or checkout directory")
    parser.add_argument("--jobs", type=int, default=10_000, help="jobs each drain runs")
    parser.add_argument("--repeat", type=int, default=2, help="rounds (each runs both)")
    parser.add_argument("--out", type=Path, help="write every run here as JSON")
    parser.add_argument("--probe", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument(
        "--worker-args",
        default="",
        help="more `runtime worker` arguments, e.g. '--prefetch 0 --pipeline 0'",
    )
    parser.add_argument("--keep", type=Path, help="with --probe: keep the profile here")
    args = parser.parse_args(argv)
    if args.probe:
        print(json.dumps(probe(args.jobs, args.keep, tuple(args.worker_args.split()))))
        return 0
    if not (args.old and args.new):
        raise SystemExit("python -m bench.master_calls OLD NEW: two commits or checkouts")
    # not imported by a probe, which runs as a script in a checkout without `bench` on its path
    from bench.compare import _checkout, _git, run_in_checkout  # noqa: PLC0415

    made: list[Path] = []
    runs: dict[str, list[dict[str, Any]]] = {"old": [], "new": []}
    try:
        trees = {"old": _checkout(args.old, made), "new": _checkout(args.new, made)}
        commits = {side: _git(tree, "rev-parse", "HEAD") for side, tree in trees.items()}
        for index in range(args.repeat):
            for side in ("old", "new") if index % 2 == 0 else ("new", "old"):
                probe_args = ["--probe", "--jobs", str(args.jobs)]
                if args.worker_args:
                    probe_args.append(f"--worker-args={args.worker_args}")
                runs[side].append(run_in_checkout(__file__, trees[side], probe_args, 1800))
    finally:
        for path in made:
            _git(Path.cwd(), "worktree", "remove", "--force", str(path))
    if args.out:
        args.out.write_text(json.dumps({"commits": commits, "jobs": args.jobs, "runs": runs},
                                       indent=2) + "\n")  # fmt: skip
    print(
        f"OLD {commits['old']}, NEW {commits['new']}: a drain of {args.jobs:,} jobs over "
        f"TCP, the master under cProfile; per job, median of {args.repeat} (min to max)\n"
    )
    print("| | OLD | NEW | NEW/OLD |\n| --- | ---: | ---: | ---: |")
    for key in ("calls_per_job", "passes_per_job", *COUNTED, "rate"):
        old = [r[key] for r in runs["old"]]
        new = [r[key] for r in runs["new"]]
        print(f"| {key} | {_cell(old)} | {_cell(new)} | "
              f"{statistics.median(new) / statistics.median(old):.3f} |")  # fmt: skip
    for side in ("old", "new"):
        print(f"\n{side.upper()}'s most called, per job (last run):\n")
        for name, n in runs[side][-1]["top_per_job"].items():
            print(f"- {name}: {n:.2f}")
    return 0


COUNTED = ("get_running_loop_per_job", "output_reads_per_job", "sends_to_children_per_job",
           "redis_fcalls_per_job")  # fmt: skip


def _count(calls: dict[str, int], suffix: str) -> int:
    return sum(n for name, n in calls.items() if name.endswith(suffix))


def _cell(values: list[float]) -> str:
    return f"{statistics.median(values):,.2f} ({min(values):,.2f} to {max(values):,.2f})"


if __name__ == "__main__":
    sys.exit(main())
