"""`python -m bench.compare OLD NEW`: the worker suite's drain, put-to-start latency
and delayed-job lateness for two versions of runtime in one run, interleaved.

OLD and NEW are commits (checked out as detached git worktrees under /tmp and removed
afterwards) or directories holding a checkout. Each measure runs as a subprocess of
this file with its cwd in that checkout, which puts the checkout first on sys.path:
`runtime` and `bench` are imported from it, and so are the masters bench.worker
starts (their cwd is the checkout of the bench.worker that starts them) and their
fork servers. Every measure gets a fresh private redis-server (AOF everysec), so
the two versions never share loaded Redis functions. Rounds alternate the order
(OLD NEW, NEW OLD, ...) so that drift in the shared host's speed cancels; transports:
`tcp` (127.0.0.1, as deployed) and `unix` (the suite's own socket). Prints a
markdown table (median and min to max of each side, and the per-round NEW/OLD
ratios) and writes every run to --out as JSON. `--pool FILE...` prints the same
tables over the rounds of several such files (one version against one version).

    .venv/bin/python -m bench.compare 34aab4c HEAD --repeat 6 --out bench/results/x.json
    .venv/bin/python -m bench.compare --pool bench/results/x.json bench/results/y.json
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROWS = {  # row title: (measure, key)
    "drain, --concurrency 2 (jobs/s)": ("drain", "rate"),
    "drain CPU per job, master (us)": ("drain", "cpu_master_us"),
    "drain CPU per job, redis (us)": ("drain", "cpu_redis_us"),
    "drain CPU per job, children (us)": ("drain", "cpu_children_us"),
    "put-to-start latency p50 (ms)": ("latency", "p50"),
    "put-to-start latency p95 (ms)": ("latency", "p95"),
    "put-to-start latency p99 (ms)": ("latency", "p99"),
    "put-to-start latency max (ms)": ("latency", "max"),
    "start after the put call returned p50 (ms)": ("latency", "after_put_p50"),
    "start after the put call returned p99 (ms)": ("latency", "after_put_p99"),
    "delayed job lateness p50 (ms)": ("lateness", "p50"),
    "delayed job lateness p99 (ms)": ("lateness", "p99"),
    "delayed job lateness max (ms)": ("lateness", "max"),
}
TARGETS = {  # row title: the worst NEW/OLD ratio (of medians) the target allows
    "drain, --concurrency 2 (jobs/s)": 0.95,
    "put-to-start latency p50 (ms)": 1.05,
    "put-to-start latency p99 (ms)": 1.05,
}


def probe(transport: str, jobs: int, latency_n: int, lateness_n: int) -> dict[str, Any]:
    """One round of the three measures, run inside a checkout (cwd) on a fresh server."""
    sys.path[0] = os.getcwd()  # the checkout's runtime and bench, not this file's
    import runtime  # noqa: PLC0415 - imported from the checkout, after sys.path is set
    from bench import worker  # noqa: PLC0415
    from runtime.queue.embedded import ServerProcess, find_server_binary  # noqa: PLC0415

    assert Path(worker.REPO) == Path.cwd(), (worker.REPO, Path.cwd())

    class TcpServer(ServerProcess):
        port = 0

        @property
        def url(self) -> str:
            return f"redis://127.0.0.1:{self.port}"

    directory = Path(tempfile.mkdtemp(prefix="rt-cmp-", dir="/tmp"))
    server = ServerProcess(find_server_binary(), directory, appendonly=True)
    if transport == "tcp":
        with socket.socket() as free:
            free.bind(("127.0.0.1", 0))
            port = free.getsockname()[1]
        server = TcpServer(
            find_server_binary(), directory, appendonly=True, extra=f"port {port}\nbind 127.0.0.1"
        )
        server.port = port
    server.start()
    try:
        return {
            "runtime": runtime.__file__,
            "drain": worker.drain(server, jobs),
            "latency": worker.latency(server, latency_n),
            "lateness": worker.lateness(server, lateness_n),
        }
    finally:
        server.stop()
        shutil.rmtree(directory, ignore_errors=True)


def _checkout(spec: str, made: list[Path]) -> Path:
    """A directory holding `spec`: itself if it is one, else a new detached worktree."""
    if Path(spec).is_dir():
        return Path(spec).resolve()
    commit = _git(Path.cwd(), "rev-parse", "--verify", f"{spec}^{{commit}}")
    path = Path(tempfile.mkdtemp(prefix=f"bench-{commit[:7]}-", dir="/tmp"))
    _git(Path.cwd(), "worktree", "add", "--detach", str(path), commit)
    made.append(path)
    return path


def _git(cwd: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True)
    return done.stdout.strip()


def _loadavg() -> list[float]:
    return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]


def run_in_checkout(script: str, tree: Path, args: list[str], timeout_s: float) -> dict[str, Any]:
    """Runs `python script ARGS` with its cwd in `tree`, so the checkout's runtime is
    the one imported, and returns the JSON object it prints last (with "runtime":
    where it imported runtime from); SystemExit if it failed or imported another."""
    argv = [sys.executable, str(Path(script).resolve()), *args]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        argv, cwd=tree, env=env, capture_output=True, text=True, timeout=timeout_s
    )
    if done.returncode != 0:
        raise SystemExit(f"measure in {tree} failed:\n{done.stderr[-4000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    if not result["runtime"].startswith(str(tree)):
        raise SystemExit(f"{tree} imported runtime from {result['runtime']}")
    return result


def _measure(tree: Path, transport: str, args: argparse.Namespace) -> dict[str, Any]:
    load = _loadavg()
    started = time.monotonic()
    result = run_in_checkout(
        __file__,
        tree,
        [
            "--probe",
            transport,
            "--jobs",
            str(args.jobs),
            "--latency-n",
            str(args.latency_n),
            "--lateness-n",
            str(args.lateness_n),
        ],
        900,
    )
    result["loadavg"], result["seconds"] = load, round(time.monotonic() - started, 1)
    return result


def _rounds(trees: dict[str, Path], args: argparse.Namespace) -> dict[str, Any]:
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {
        t: {side: [] for side in trees} for t in args.transports
    }
    for index in range(args.repeat):
        sides = list(trees) if index % 2 == 0 else list(reversed(trees))
        for transport in args.transports:
            for side in sides:
                result = _measure(trees[side], transport, args)
                runs[transport][side].append(result)
                rate = result["drain"]["rate"]
                p50 = result["latency"]["p50"]
                print(
                    f"round {index + 1} {transport} {side}: drain {rate:,.0f}/s, "
                    f"latency p50 {p50:.2f} ms",
                    file=sys.stderr,
                )
    return runs


def _num(value: float) -> str:
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.1f}" if abs(value) >= 10 else f"{value:.2f}"


def _cell(values: list[float]) -> str:
    return f"{_num(statistics.median(values))} ({_num(min(values))} to {_num(max(values))})"


def table(runs: dict[str, list[dict[str, Any]]]) -> list[str]:
    """Markdown rows for one transport: OLD, NEW, NEW/OLD of the medians, and the
    NEW/OLD ratios of the runs paired by round (median, min to max)."""
    lines = [
        "| measure | OLD | NEW | NEW/OLD (medians) | NEW/OLD per round | target |",
        "| --- | ---: | ---: | ---: | ---: | --- |",
    ]
    for title, (measure, key) in ROWS.items():
        old = [r[measure][key] for r in runs["old"]]
        new = [r[measure][key] for r in runs["new"]]
        if min(*old, *new) <= 0:  # a ratio of times that can be negative says nothing
            lines.append(f"| {title} | {_cell(old)} | {_cell(new)} | | | |")
            continue
        ratio = statistics.median(new) / statistics.median(old)
        paired = [n / o for n, o in zip(new, old, strict=True)]
        target = ""
        if title in TARGETS:
            bound = TARGETS[title]
            met = ratio >= bound if bound < 1 else ratio <= bound
            target = f"{'>=' if bound < 1 else '<='} {bound}: {'met' if met else 'NOT met'}"
        lines.append(
            f"| {title} | {_cell(old)} | {_cell(new)} | {ratio:.3f} | "
            f"{_cell_ratio(paired)} | {target} |"
        )
    return lines


def _cell_ratio(values: list[float]) -> str:
    return f"{statistics.median(values):.3f} ({min(values):.3f} to {max(values):.3f})"


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.compare")
    parser.add_argument("old", nargs="?", help="commit or checkout directory")
    parser.add_argument("new", nargs="?", help="commit or checkout directory")
    parser.add_argument("--repeat", type=int, default=6, help="rounds (each runs both)")
    parser.add_argument("--transports", default="tcp,unix", help="comma-separated: tcp, unix")
    parser.add_argument("--jobs", type=int, default=20_000, help="jobs each drain runs")
    parser.add_argument("--latency-n", type=int, default=300, help="jobs each latency run puts")
    parser.add_argument("--lateness-n", type=int, default=100, help="delayed jobs per run")
    parser.add_argument("--out", type=Path, help="write every run here as JSON")
    parser.add_argument(
        "--pool",
        type=Path,
        nargs="+",
        metavar="FILE",
        help="print the tables over the rounds of several --out files "
        "(one OLD commit; NEW commits with the same runtime/)",
    )
    parser.add_argument("--probe", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.transports = args.transports.split(",")
    return args


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    if args.probe:
        print(json.dumps(probe(args.probe, args.jobs, args.latency_n, args.lateness_n)))
        return 0
    if args.pool:
        return pool(args.pool)
    if not (args.old and args.new):
        raise SystemExit("python -m bench.compare OLD NEW: two commits or checkouts")
    made: list[Path] = []
    try:
        trees = {"old": _checkout(args.old, made), "new": _checkout(args.new, made)}
        commits = {side: _git(tree, "rev-parse", "HEAD") for side, tree in trees.items()}
        before, started = _loadavg(), time.monotonic()
        runs = _rounds(trees, args)
        summary = {
            "commits": commits,
            "trees": {k: str(v) for k, v in trees.items()},
            "command": " ".join(["python -m bench.compare", *(argv or sys.argv[1:])]),
            "loadavg_before": before,
            "loadavg_after": _loadavg(),
            "nproc": os.cpu_count(),
            "minutes": round((time.monotonic() - started) / 60, 1),
            "runs": runs,
        }
    finally:
        for path in made:
            _git(Path.cwd(), "worktree", "remove", "--force", str(path))
    if args.out:
        args.out.write_text(json.dumps(summary, indent=2) + "\n")
    print(
        f"OLD {commits['old']}, NEW {commits['new']}; load average before "
        f"{before}, after {summary['loadavg_after']}"
    )
    for transport in args.transports:
        print(f"\n{transport}:\n")
        print("\n".join(table(runs[transport])))
    return 0


def pool(files: list[Path]) -> int:
    """The tables over every round of several runs: more rounds than one run of a
    sensible length holds, on a host whose speed drifts. The runs must share their
    OLD commit, and their NEW commits must hold the same runtime/ (comments aside)."""
    summaries = [json.loads(path.read_text()) for path in files]
    old = {s["commits"]["old"] for s in summaries}
    if len(old) != 1:
        raise SystemExit(f"the runs have different OLD commits: {sorted(old)}")
    news = [s["commits"]["new"] for s in summaries]
    for other in news[1:]:
        if not _same_code(news[0], other):
            raise SystemExit(f"NEW {news[0]} and {other} differ in runtime/: not one version")
    transports = [t for t in summaries[0]["runs"] if all(t in s["runs"] for s in summaries)]
    print(
        f"OLD {old.pop()}, NEW {', '.join(dict.fromkeys(news))} (the same runtime/, "
        f"comments aside); the rounds of {', '.join(str(p) for p in files)}"
    )
    for transport in transports:
        runs = {
            side: [r for s in summaries for r in s["runs"][transport][side]]
            for side in ("old", "new")
        }
        print(f"\n{transport}, {len(runs['old'])} rounds:\n")
        print("\n".join(table(runs)))
    return 0


def _same_code(a: str, b: str) -> bool:
    """Whether two commits hold the same runtime/, comments aside (Python files whose
    syntax trees are equal count as the same)."""
    for path in _git(Path.cwd(), "diff", "--name-only", a, b, "--", "runtime").splitlines():
        if not path.endswith(".py"):
            return False
        try:
            trees = [ast.dump(ast.parse(_git(Path.cwd(), "show", f"{c}:{path}"))) for c in (a, b)]
        except subprocess.CalledProcessError:  # added or removed
            return False
        if trees[0] != trees[1]:
            return False
    return True


if __name__ == "__main__":
    sys.exit(main())
