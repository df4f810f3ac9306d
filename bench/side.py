"""Side by side: runtime against RQ, Celery, Dramatiq, arq, Huey and saq in one run,
on one private redis-server (AOF everysec) that this module starts and stops.

Each system runs in a virtual env of its own (bench/.work/venvs/<venv>, built from
bench/peers/requirements/<venv>.txt; runtime uses the project's own env), because
the peers' pins conflict. Every measure of every system is one adapter call
(`python -m bench.peers.<adapter> MEASURE ...`, see bench/peers/common.py) in a
process group of its own that is killed afterwards, so no worker outlives its
call; the server is flushed between calls. Repetitions are interleaved (all systems
once, then again), so a slow minute of the machine hurts every system alike.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import server as bench_server
from runtime.queue.embedded import ServerProcess

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
VENVS = HERE / ".work" / "venvs"
REQUIREMENTS = HERE / "peers" / "requirements"
CALL_TIMEOUT_S = 420.0  # one adapter call: a 60 s drain cap plus filling and start-up


@dataclass(frozen=True)
class System:
    """One column of the tables: an adapter (with a variant) in a virtual env."""

    name: str
    adapter: str  # bench.peers.<adapter>_adapter
    venv: str | None  # None: runtime's own environment
    variant: str
    processes: bool  # the two concurrent jobs run in separate processes
    ack_after: bool  # a job whose worker dies mid-job runs again (acked only on completion)
    how: str  # concurrency 2, as this system offers it


SYSTEMS = (
    System(
        "runtime",
        "runtime",
        None,
        "",
        True,
        True,
        "1 master, 2 forked children; lease renewed by the master, ended by complete",
    ),
    System(
        "rq fork",
        "rq",
        "rq",
        "fork",
        True,
        False,
        "2 `rq worker` processes, a fork per job; dequeue moves the job to a registry",
    ),
    System(
        "rq simple",
        "rq",
        "rq",
        "simple",
        True,
        False,
        "2 `rq worker --worker-class SimpleWorker` processes, jobs run in-process",
    ),
    System(
        "celery",
        "celery",
        "celery",
        "",
        True,
        True,
        "`celery worker --pool prefork --concurrency 2`, acks_late=True",
    ),
    System(
        "dramatiq",
        "dramatiq",
        "dramatiq",
        "",
        True,
        True,
        "`dramatiq --processes 2 --threads 1`; acks after the actor returns",
    ),
    System(
        "dramatiq prefetch",
        "dramatiq",
        "dramatiq",
        "prefetch",
        True,
        True,
        "the same, with dramatiq_queue_prefetch=64 (default: 2 per thread)",
    ),
    System(
        "arq 2 procs",
        "arq",
        "arq",
        "procs",
        True,
        True,
        "2 arq worker processes, max_jobs=1, poll_delay 10 ms (default 0.5 s)",
    ),
    System(
        "arq async 2",
        "arq",
        "arq",
        "async",
        False,
        True,
        "1 arq worker process, max_jobs=2, poll_delay 10 ms (default 0.5 s)",
    ),
    System(
        "huey",
        "huey",
        "huey",
        "",
        True,
        False,
        "`huey_consumer -k process -w 2`; dequeue removes the message",
    ),
    System(
        "saq 2 procs",
        "saq",
        "saq",
        "procs",
        True,
        False,
        "2 saq worker processes, concurrency 1; asyncio jobs in the worker process",
    ),
    System(
        "saq async 2", "saq", "saq", "async", False, False, "1 saq worker process, concurrency 2"
    ),
)


@dataclass(frozen=True)
class Measure:
    """One table: an adapter measure, its size, and the rows read from its reply."""

    key: str
    title: str
    call: str
    n: int
    rows: tuple[tuple[str, str, str], ...]  # (reply field, row label, better: BETTER)
    seconds: float = 0.0


BETTER = {"higher": "higher is better", "lower": "lower is better", "zero": "nearer 0 is better"}


MEASURES = (
    Measure(
        "enqueue_one",
        "Enqueue, one call per job (jobs/s)",
        "enqueue_one",
        20_000,
        (("rate", "20,000 no-op jobs, 100-byte data", "higher"),),
    ),
    Measure(
        "enqueue_bulk",
        "Enqueue in bulk, the system's batch API (jobs/s)",
        "enqueue_bulk",
        20_000,
        (("rate", "20,000 no-op jobs, 100-byte data", "higher"),),
    ),
    Measure(
        "drain",
        "Drain with total concurrency 2 (jobs/s)",
        "drain",
        20_000,
        (("rate", "20,000 queued jobs, each increments a counter", "higher"),),
    ),
    Measure(
        "latency",
        "Put-to-start latency at light load: 300 jobs at 50/s (ms)",
        "latency",
        300,
        (("p50", "p50", "lower"), ("p95", "p95", "lower"), ("p99", "p99", "lower")),
    ),
    Measure(
        "lateness",
        "Scheduled-job lateness: 100 jobs due 2 s after their put (ms after "
        "the due time; negative: started early)",
        "lateness",
        100,
        (
            ("p50", "p50", "zero"),
            ("p99", "p99", "zero"),
            ("early", "jobs started before their due time", "lower"),
        ),
    ),
    Measure(
        "memory",
        "Redis memory per queued job (bytes)",
        "fill",
        100_000,
        (("bytes_per_job", "100,000 queued jobs, 100-byte data", "lower"),),
    ),
    Measure(
        "ratelimit",
        "A 20 jobs/s limit on one key while another runs free, 30 s",
        "ratelimit",
        0,
        (
            ("observed", "limited key: starts/s (20 wanted)", "none"),
            ("error_pct", "limited key: error (%)", "zero"),
            ("max_1s", "limited key: most starts in any 1 s", "lower"),
            ("free_rate", "free key: jobs/s meanwhile", "higher"),
        ),
        seconds=30.0,
    ),
)
QUICK = {
    "enqueue_one": 2000,
    "enqueue_bulk": 2000,
    "drain": 2000,
    "latency": 50,
    "lateness": 100,
    "memory": 5000,
}


# --- environments -----------------------------------------------------------------


def python_of(system: System) -> str:
    if system.venv is None:
        return sys.executable
    return str(VENVS / system.venv / "bin" / "python")


def ensure_venv(name: str) -> None:
    """Builds bench/.work/venvs/<name> from its requirements file (again when it changes)."""
    venv, requirements = VENVS / name, REQUIREMENTS / f"{name}.txt"
    stamp = venv / ".installed"
    if stamp.exists() and stamp.stat().st_mtime >= requirements.stat().st_mtime:
        return
    print(f"bench side: building the {name} env ...", file=sys.stderr)
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
    subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-m",
            "pip",
            "install",
            "-q",
            "--disable-pip-version-check",
            "-r",
            str(requirements),
        ],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    stamp.touch()


def versions() -> dict[str, str]:
    """The pinned version of each peer, read from its requirements file."""
    out = {}
    for name in sorted({s.venv for s in SYSTEMS if s.venv}):
        for line in (REQUIREMENTS / f"{name}.txt").read_text().splitlines():
            if line.lower().startswith(f"{name}=="):
                out[name] = line.split("==", 1)[1]
    return out


# --- one call ---------------------------------------------------------------------


def call(
    system: System, measure: Measure, url: str, n: int, log: Path, **extra_env: str
) -> dict[str, Any]:
    """Runs one adapter call in its own process group; kills the group afterwards."""
    argv = [
        python_of(system),
        "-m",
        f"bench.peers.{system.adapter}_adapter",
        measure.call,
        "--url",
        url,
        "--n",
        str(n),
        "--seconds",
        str(measure.seconds),
    ]
    if system.variant:
        argv += ["--variant", system.variant]
    env = {**os.environ, "PYTHONPATH": str(REPO), "BENCH_LOG": str(log), **extra_env}
    env.pop("REDIS_URL", None)
    with log.open("ab") as err:
        proc = subprocess.Popen(
            argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=err, start_new_session=True
        )
        try:
            out, _ = proc.communicate(timeout=CALL_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            out = b""
        finally:
            _kill_group(proc.pid)
            proc.wait()
    lines = out.decode(errors="replace").strip().splitlines()
    if proc.returncode != 0 or not lines:
        return {"error": f"exit {proc.returncode}, see {log.name}"}
    reply: dict[str, Any] = json.loads(lines[-1])
    return reply


def _kill_group(pgid: int) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        time.sleep(0.5)


def measure_once(
    system: System, measure: Measure, server: ServerProcess, n: int, log: Path
) -> dict[str, Any]:
    conn = bench_server.connect(server)
    conn.flushall()
    before = int(conn.info("memory")["used_memory"])
    reply = call(system, measure, server.url, n, log)
    if measure.key == "memory" and "error" not in reply and not reply.get("unsupported"):
        reply["bytes_per_job"] = (int(conn.info("memory")["used_memory"]) - before) / n
    conn.flushall()
    conn.close()
    return reply


# --- the run ----------------------------------------------------------------------


def run(
    quick: bool = False,
    systems: list[str] | None = None,
    measures: list[str] | None = None,
    repeat: int = 3,
) -> dict[str, Any]:
    chosen = [s for s in SYSTEMS if not systems or s.name in systems or s.adapter in systems]
    wanted = [m for m in MEASURES if not measures or m.key in measures]
    for name in sorted({s.venv for s in chosen if s.venv}):
        ensure_venv(name)
    repeat = 1 if quick else repeat
    logs = HERE / ".work" / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    results: dict[str, dict[str, list[dict[str, Any]]]] = {}
    with bench_server.private_server() as server:
        reference = {
            f"redis-benchmark {cmd}, 1 connection (ops/s)": [v]
            for cmd, v in bench_server.redis_benchmark(server, 1, 100_000).items()
        }
        for measure in wanted:
            n = QUICK.get(measure.key, measure.n) if quick else measure.n
            table = results.setdefault(measure.key, {})
            for rep in range(repeat):
                for system in chosen:
                    log = logs / f"{measure.key}-{system.adapter}{system.variant}-{rep}.log"
                    log.unlink(missing_ok=True)
                    started = time.monotonic()
                    reply = measure_once(system, measure, server, n, log)
                    reply["wall_s"] = round(time.monotonic() - started, 1)
                    table.setdefault(system.name, []).append(reply)
                    print(
                        f"bench side: {measure.key} {system.name} #{rep + 1}: {_brief(reply)}",
                        file=sys.stderr,
                    )
    return {
        "jobs": "see each table",
        "repeat": repeat,
        "versions": versions(),
        "systems": [s.__dict__ for s in chosen],
        "results": results,
        "measures": reference,
    }


def _brief(reply: dict[str, Any]) -> str:
    keep = ("rate", "p50", "p99", "bytes_per_job", "observed", "error", "unsupported", "done")
    return json.dumps({k: reply[k] for k in keep if k in reply})


# --- the report -------------------------------------------------------------------


def _num(value: float) -> str:
    if float(value).is_integer() and abs(value) < 1e9:
        return f"{int(value):,}"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.1f}" if abs(value) >= 10 else f"{value:.2f}"


def _values(replies: list[dict[str, Any]], field: str) -> list[float]:
    return [float(r[field]) for r in replies if field in r and r[field] is not None]


def _cell(replies: list[dict[str, Any]], field: str) -> str:
    values = _values(replies, field)
    if not values:
        if any(r.get("unsupported") for r in replies):
            return "n/a"
        return "error" if any("error" in r for r in replies) else "-"
    median = statistics.median(values)
    if len(values) == 1:
        return _num(median)
    return f"{_num(median)} ({_num(min(values))}-{_num(max(values))})"


def best_peer(
    table: dict[str, list[dict[str, Any]]], field: str, better: str, only: set[str] | None = None
) -> tuple[str, float] | None:
    medians = {
        name: statistics.median(values)
        for name, replies in table.items()
        if name != "runtime" and (only is None or name in only)
        for values in [_values(replies, field)]
        if values
    }
    if not medians:
        return None
    if better == "higher":
        name = max(medians, key=lambda k: medians[k])
    elif better == "lower":
        name = min(medians, key=lambda k: medians[k])
    else:
        name = min(medians, key=lambda k: abs(medians[k]))
    return name, medians[name]


def render(result: dict[str, Any]) -> list[str]:
    systems = [s["name"] for s in result["systems"]]
    lines = [
        "| system | version | concurrency 2 is | own processes | acks after the job |",
        "| --- | --- | --- | --- | --- |",
    ]
    for s in result["systems"]:
        version = result["versions"].get(s["venv"] or "", result["machine"].get("runtime", ""))
        own, acks = ("yes" if s[k] else "no" for k in ("processes", "ack_after"))
        lines.append(f"| {s['name']} | {version} | {s['how']} | {own} | {acks} |")
    lines.append("")
    for measure in MEASURES:
        table = result["results"].get(measure.key)
        if not table:
            continue
        lines += [f"### {measure.title}", ""]
        lines.append("| | " + " | ".join(systems) + " | runtime / best peer |")
        lines.append("| --- |" + " ---: |" * (len(systems) + 1))
        for field, label, better in measure.rows:
            cells = [_cell(table.get(name, []), field) for name in systems]
            lines.append(
                f"| {label} | " + " | ".join(cells) + f" | {_ratio(table, field, better)} |"
            )
        lines.append("")
    return [*lines, "### Targets (issue: benchmarks side by side)", "", *targets(result), ""]


def _ratio(table: dict[str, list[dict[str, Any]]], field: str, better: str) -> str:
    """runtime's median over the best peer's, and who that is ("-" where a ratio says
    nothing: no peer measured it, or the row is context only)."""
    best = best_peer(table, field, better) if better in BETTER else None
    ours = _values(table.get("runtime", []), field)
    if not best or not ours:
        return "-"
    if not best[1]:
        return f"- (best: {best[0]}, {_num(best[1])}; {BETTER[better]})"
    mine = statistics.median(ours)
    ratio = abs(mine) / abs(best[1]) if better == "zero" else mine / best[1]
    return f"{ratio:.2f} (best: {best[0]}; {BETTER[better]})"


def _median(table: dict[str, list[dict[str, Any]]], name: str, field: str) -> float | None:
    values = _values(table.get(name, []), field)
    return statistics.median(values) if values else None


def targets(result: dict[str, Any]) -> list[str]:
    """The issue's targets, each checked against this run's medians."""
    res, systems = result["results"], result["systems"]
    strict = {s["name"] for s in systems if s["processes"] and s["ack_after"]} - {"runtime"}
    checks: list[tuple[str, str, str, str, float, set[str] | None]] = [
        # (label, measure, field, higher is better, wanted ratio, peers compared)
        (
            "drain >= 2x the best peer with separate processes and acks after the job",
            "drain",
            "rate",
            "higher",
            2.0,
            strict,
        ),
        ("drain >= 1x the best peer of any kind", "drain", "rate", "higher", 1.0, None),
        ("enqueue one at a time >= 1.5x the best peer", "enqueue_one", "rate", "higher", 1.5, None),
        ("enqueue in bulk >= 1.5x the best peer", "enqueue_bulk", "rate", "higher", 1.5, None),
        ("put-to-start latency p99 below every peer", "latency", "p99", "lower", 1.0, None),
        ("scheduled lateness p99 below every peer", "lateness", "p99", "zero", 1.0, None),
        (
            "bytes per queued job within 1.5x the smallest peer",
            "memory",
            "bytes_per_job",
            "lower",
            1.5,
            None,
        ),
    ]
    lines = ["| target | runtime | best peer | ratio | met |", "| --- | ---: | --- | ---: | --- |"]
    for label, key, field, better, wanted, only in checks:
        table = res.get(key, {})
        ours = _median(table, "runtime", field)
        best = best_peer(table, field, better, only)
        if ours is None or best is None or not best[1]:
            lines.append(f"| {label} | - | - | - | not measured |")
            continue
        ratio = abs(ours) / abs(best[1]) if better == "zero" else ours / best[1]
        met = ratio >= wanted if better == "higher" else ratio <= wanted
        if better != "higher" and wanted == 1.0:  # "below every peer": strictly
            met = ratio < 1.0
        lines.append(
            f"| {label} | {_num(ours)} | {best[0]}: {_num(best[1])} | {ratio:.2f} | "
            f"{'yes' if met else 'no'} |"
        )
    return lines
