"""The headline (issue 19, "Cost per job at or below the lightest peer"): what a job
costs runtime and the lightest peers, counted as well as timed, over TCP loopback
first (as deployed), then over a unix socket.

Systems: runtime (one master, two children), the same with `--prefetch 0
--pipeline 0`, four masters of concurrency 1; Huey (two worker processes),
Dramatiq (two processes of eight threads), Celery (prefork 2, acks_late) and the
reference: a bare BLMOVE, job, LREM loop in two processes. One harness for all:
the side-by-side suite's adapters (bench/peers), each call in a process group of
its own on one private redis-server (AOF everysec), flushed between calls, the
repetitions interleaved. The drain's job is the same everywhere: a no-op that
increments a counter (common.job_count).

Counted inside each adapter over the drain (from the first job to the n-th) and
over the puts (bench/peers/cost.py): Redis CPU (`INFO cpu` deltas), Redis commands
(`INFO commandstats` deltas, the meter's own left out), script calls, worker-tree
CPU (/proc of every process under the adapter). The cost of each script and
command comes from a separate profiled drain per system over TCP, with the slowlog
logging every command (slowlog-log-slower-than 0) and read in chunks: logging
every command costs the server time of its own, so that drain's rate and CPU are
not used.
"""

from __future__ import annotations

import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from bench import server as bench_server
from bench import side
from bench.peers import cost
from bench.side import Measure, System
from runtime.queue.embedded import ServerProcess

Role = Literal["runtime", "peer", "reference"]
Transport = Literal["tcp", "unix"]
TRANSPORTS: tuple[Transport, ...] = ("tcp", "unix")


@dataclass(frozen=True)
class Row:
    """A row of the tables: a system, what it is to runtime, what it is measured on."""

    system: System
    role: Role
    measures: frozenset[str]


EVERY = frozenset(
    {"enqueue_one", "enqueue_bulk", "drain", "latency", "lateness", "memory", "profile"}
)
DRAIN = frozenset({"drain", "profile"})
ROWS = (
    Row(
        System("runtime", "runtime", None, "", True, True, "1 master, 2 forked children"),
        "runtime",
        EVERY,
    ),
    Row(
        System(
            "runtime p0", "runtime", None, "p0", True, True, "the same, `--prefetch 0 --pipeline 0`"
        ),
        "runtime",
        DRAIN,
    ),
    Row(
        System("runtime 4x1", "runtime", None, "4x1", True, True, "4 masters of `--concurrency 1`"),
        "runtime",
        DRAIN,
    ),
    Row(
        System("huey", "huey", "huey", "", True, False, "`huey_consumer -k process -w 2`"),
        "peer",
        EVERY,
    ),
    Row(
        System(
            "dramatiq 2x8",
            "dramatiq",
            "dramatiq",
            "2x8",
            True,
            True,
            "`dramatiq --processes 2 --threads 8`",
        ),
        "peer",
        EVERY,
    ),
    Row(
        System(
            "celery",
            "celery",
            "celery",
            "",
            True,
            True,
            "`celery worker --pool prefork --concurrency 2`, acks_late",
        ),
        "peer",
        EVERY,
    ),
    Row(
        System("bare", "bare", None, "", True, True, "2 processes of BLMOVE, the job, LREM"),
        "reference",
        EVERY - {"lateness"},
    ),
)
PRIMARY = ("runtime", "huey", "dramatiq 2x8", "celery", "bare")  # one row per system

_SIDE = {m.key: m for m in side.MEASURES}
MEASURES = {
    **{k: _SIDE[k] for k in ("enqueue_one", "enqueue_bulk", "drain", "latency", "lateness")},
    "memory": _SIDE["memory"],
    "profile": Measure("profile", "A drain with every command in the slowlog", "drain", 0, ()),
}
PLAN: dict[Transport, tuple[str, ...]] = {
    "tcp": ("enqueue_one", "enqueue_bulk", "drain", "latency", "lateness", "memory", "profile"),
    "unix": ("enqueue_one", "drain"),
}
SIZES = {  # jobs by measure: the full run, the short headline, a check of the harness
    "full": {
        "enqueue_one": 20_000,
        "enqueue_bulk": 20_000,
        "drain": 20_000,
        "latency": 300,
        "lateness": 100,
        "memory": 100_000,
        "profile": 20_000,
    },
    "short": {
        "enqueue_one": 5000,
        "enqueue_bulk": 5000,
        "drain": 5000,
        "latency": 100,
        "lateness": 50,
        "memory": 20_000,
        "profile": 3000,
    },
    "quick": {
        "enqueue_one": 2000,
        "enqueue_bulk": 2000,
        "drain": 2000,
        "latency": 50,
        "lateness": 50,
        "memory": 5000,
        "profile": 2000,
    },
}
SLOWLOG = {"slowlog-log-slower-than": "0", "slowlog-max-len": str(cost.SLOWLOG_READ)}


# --- the run ----------------------------------------------------------------------


def measure_once(
    row: Row, measure: Measure, server: ServerProcess, n: int, log: Path
) -> dict[str, Any]:
    conn = bench_server.connect(server)
    conn.flushall()
    before = int(conn.info("memory")["used_memory"])
    env: dict[str, str] = {}
    saved: dict[str, str] = {}
    if measure.key == "profile":
        saved = {k: str(conn.config_get(k)[k]) for k in SLOWLOG}
        for k, v in SLOWLOG.items():
            conn.config_set(k, v)
        env[cost.SLOWLOG_ENV] = "1"
    reply = side.call(row.system, measure, server.url, n, log, **env)
    if measure.key == "memory" and "error" not in reply and not reply.get("unsupported"):
        reply["bytes_per_job"] = (int(conn.info("memory")["used_memory"]) - before) / n
    for k, v in saved.items():
        conn.config_set(k, v)
    conn.slowlog_reset()
    conn.flushall()
    conn.close()
    if reply.get("redis_cpu_us"):
        reply["ceiling"] = 1e6 / reply["redis_cpu_us"]  # one Redis core's jobs/s
    if reply.get("script_calls"):
        reply["jobs_per_script_call"] = 1 / reply["script_calls"]
    return reply


def run(
    size: Literal["full", "short", "quick"] = "full",
    systems: list[str] | None = None,
    transports: list[str] | None = None,
    repeat: int = 3,
) -> dict[str, Any]:
    rows = [r for r in ROWS if not systems or r.system.name in systems]
    for name in sorted({r.system.venv for r in rows if r.system.venv}):
        side.ensure_venv(name)
    repeat = 1 if size == "quick" else repeat
    logs = side.HERE / ".work" / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    results: dict[str, dict[str, dict[str, list[dict[str, Any]]]]] = {}
    reference: dict[str, list[float]] = {}
    for transport in [t for t in TRANSPORTS if not transports or t in transports]:
        with bench_server.private_server(tcp=transport == "tcp") as server:
            if not reference:
                requests = 100_000 if size == "full" else 20_000
                for cmd, v in bench_server.redis_benchmark(server, 1, requests).items():
                    reference[f"redis-benchmark {cmd}, 1 connection, unix socket (ops/s)"] = [v]
            for key in PLAN[transport]:
                measure, n = MEASURES[key], SIZES[size][key]
                table = results.setdefault(transport, {}).setdefault(key, {})
                for rep in range(1 if key == "profile" else repeat):
                    for row in [r for r in rows if key in r.measures]:
                        tag = f"{transport}-{key}-{row.system.adapter}{row.system.variant}-{rep}"
                        log = logs / f"headline-{tag}.log"
                        log.unlink(missing_ok=True)
                        started = time.monotonic()
                        reply = measure_once(row, measure, server, n, log)
                        reply["wall_s"] = round(time.monotonic() - started, 1)
                        table.setdefault(row.system.name, []).append(reply)
                        print(
                            f"bench headline: {transport} {key} {row.system.name} #{rep + 1}: "
                            f"{_brief(reply)}",
                            file=sys.stderr,
                        )
    used = {r.system.venv for r in rows}
    return {
        "jobs": f"{SIZES[size]['drain']:,} drained",
        "size": size,
        "sizes": SIZES[size],
        "repeat": repeat,
        "versions": {k: v for k, v in side.versions().items() if k in used},
        "systems": [{**r.system.__dict__, "role": r.role} for r in rows],
        "results": results,
        "measures": reference,
    }


def _brief(reply: dict[str, Any]) -> str:
    keep = (
        "rate",
        "commands",
        "redis_cpu_us",
        "tree_cpu_us",
        "script_us",
        "p50",
        "p99",
        "bytes_per_job",
        "error",
        "unsupported",
    )
    return " ".join(
        f"{k}={side._num(reply[k]) if isinstance(reply[k], float) else reply[k]}"
        for k in keep
        if k in reply
    )


# --- the report -------------------------------------------------------------------

# (measure, field, column title, better): the headline table's columns
COLUMNS = (
    ("enqueue_one", "rate", "put one at a time /s", "higher"),
    ("enqueue_one", "redis_cpu_us", "Redis CPU µs per put", "lower"),
    ("enqueue_one", "script_us", "script µs per put", "lower"),
    ("enqueue_bulk", "rate", "bulk put /s", "higher"),
    ("drain", "rate", "drain jobs/s", "higher"),
    ("drain", "ceiling", "one Redis core's ceiling jobs/s", "higher"),
    ("drain", "commands", "Redis commands per job", "lower"),
    ("drain", "jobs_per_script_call", "jobs per script call", "higher"),
    ("drain", "redis_cpu_us", "Redis CPU µs per job", "lower"),
    ("drain", "tree_cpu_us", "worker-tree CPU µs per job", "lower"),
    ("latency", "p50", "put-to-start p50 ms", "lower"),
    ("latency", "p99", "put-to-start p99 ms", "lower"),
    ("lateness", "p99", "scheduled lateness p99 ms", "zero"),
    ("memory", "bytes_per_job", "bytes per queued job", "lower"),
)
UNIX_COLUMNS = tuple(c for c in COLUMNS if c[0] in PLAN["unix"])


def _median(res: dict[str, Any], key: str, name: str, field: str) -> float | None:
    values = side._values(res.get(key, {}).get(name, []), field)
    return statistics.median(values) if values else None


def _table(result: dict[str, Any], transport: str, columns: tuple[Any, ...]) -> list[str]:
    res = result["results"].get(transport, {})
    names = [s["name"] for s in result["systems"]]
    lines = [
        "| system | " + " | ".join(c[2] for c in columns) + " |",
        "| --- |" + " ---: |" * len(columns),
    ]
    for name in names:
        cells = [
            side._cell(res.get(key, {}).get(name, []), field) if name in res.get(key, {}) else ""
            for key, field, _, _ in columns
        ]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines


def _ratios(result: dict[str, Any], transport: str, columns: tuple[Any, ...]) -> list[str]:
    """runtime's median over each other system's, column by column."""
    res = result["results"].get(transport, {})
    others = [s["name"] for s in result["systems"] if s["role"] != "runtime"]
    lines = [
        "| runtime / | " + " | ".join(c[2] for c in columns) + " |",
        "| --- |" + " ---: |" * len(columns),
    ]
    for other in others:
        cells = []
        for key, field, _, _ in columns:
            ours, theirs = _median(res, key, "runtime", field), _median(res, key, other, field)
            cells.append(_ratio(ours / theirs) if ours is not None and theirs else "")
        lines.append(f"| {other} | " + " | ".join(cells) + " |")
    return lines


def _ratio(value: float) -> str:
    return f"{value:.2f}" if abs(value) >= 0.1 else f"{value:.3f}"


def _profile(result: dict[str, Any], top: int = 8) -> list[str]:
    res = result["results"].get("tcp", {}).get("profile", {})
    lines = [
        "| system | command or script | calls per job | µs per call | µs per job |",
        "| --- | --- | ---: | ---: | ---: |",
    ]
    for name, replies in res.items():
        profile = next((r["profile"] for r in replies if "profile" in r), None)
        if profile is None:
            lines.append(f"| {name} | (no profile: {replies[0].get('error', '-')}) | | | |")
            continue
        rows = sorted(profile["by_label"].items(), key=lambda kv: -kv[1]["us_per_job"])
        sent = [(k, row) for k, row in rows if not k.startswith("(in scripts)")]
        inner = [(k, row) for k, row in rows if k.startswith("(in scripts)")]
        for label, row in sent[:top] + inner[: top // 2]:
            lines.append(
                f"| {name} | {label} | {row['calls_per_job']:.3f} | "
                f"{row['us_per_call']:.1f} | {row['us_per_job']:.1f} |"
            )
        lost = f"; {profile['lost']:,} entries missed" if profile["lost"] else ""
        lines.append(
            f"| {name} | all sent by clients ({len(sent)} kinds{lost}) | "
            f"{sum(r['calls_per_job'] for _, r in sent):.2f} | | "
            f"{sum(r['us_per_job'] for _, r in sent):.1f} |"
        )
        if inner:
            lines.append(
                f"| {name} | all run inside scripts ({len(inner)} kinds; in the "
                f"scripts' time) | {sum(r['calls_per_job'] for _, r in inner):.2f} "
                "| | |"
            )
    return lines


def targets(result: dict[str, Any]) -> list[str]:
    """The targets of issues 19 and 34 (34's where they differ: put >= 0.9x Huey's,
    30 µs inside Redis, p50 too), each judged on this run's medians over TCP."""
    res = result["results"].get("tcp", {})
    peers = [s["name"] for s in result["systems"] if s["role"] == "peer"]

    def best(key: str, field: str, higher: bool) -> tuple[str, float] | None:
        """The best peer's median; lower is better by size (lateness: nearest 0)."""
        found = {p: v for p in peers if (v := _median(res, key, p, field)) is not None}
        if not found:
            return None
        name = max(found, key=lambda p: found[p] if higher else -abs(found[p]))
        return name, found[name]

    def of(name: str, key: str, field: str) -> tuple[str, float] | None:
        value = _median(res, key, name, field)
        return None if value is None else (name, value)

    cpu = ("drain", "redis_cpu_us")
    tree = ("drain", "tree_cpu_us")
    checks: list[tuple[str, tuple[str, str], tuple[str, float] | None, str, float]] = [
        # (label, runtime's (measure, field), compared with, "<=" or ">=", wanted ratio)
        ("Redis CPU per job while draining <= 1.0x Huey's", cpu, of("huey", *cpu), "<=", 1.0),
        (
            "Redis CPU per job while draining <= Dramatiq's",
            cpu,
            of("dramatiq 2x8", *cpu),
            "<=",
            1.0,
        ),
        ("moonshot: Redis CPU per job <= the bare loop's", cpu, of("bare", *cpu), "<=", 1.0),
        ("worker-tree CPU per job <= 1.0x Huey's", tree, of("huey", *tree), "<=", 1.0),
        (
            "drain >= 1.0x the best peer of any kind",
            ("drain", "rate"),
            best("drain", "rate", True),
            ">=",
            1.0,
        ),
        (
            "moonshot: drain >= the bare loop",
            ("drain", "rate"),
            of("bare", "drain", "rate"),
            ">=",
            1.0,
        ),
        (
            "put one at a time >= 0.9x Huey's",
            ("enqueue_one", "rate"),
            of("huey", "enqueue_one", "rate"),
            ">=",
            0.9,
        ),
        (
            "a single put <= 30 µs inside Redis (its script's time)",
            ("enqueue_one", "script_us"),
            ("30 µs", 30.0),
            "<=",
            1.0,
        ),
        (
            "bulk put >= 2x the best bulk API",
            ("enqueue_bulk", "rate"),
            best("enqueue_bulk", "rate", True),
            ">=",
            2.0,
        ),
        ("put-to-start p50 <= Huey's", ("latency", "p50"), of("huey", "latency", "p50"), "<=", 1.0),
        ("put-to-start p99 <= Huey's", ("latency", "p99"), of("huey", "latency", "p99"), "<=", 1.0),
        (
            "scheduled lateness p99 the best",
            ("lateness", "p99"),
            best("lateness", "p99", False),
            "<=",
            1.0,
        ),
        (
            "Redis bytes per queued job <= 1.2x Huey's",
            ("memory", "bytes_per_job"),
            of("huey", "memory", "bytes_per_job"),
            "<=",
            1.2,
        ),
    ]
    lines = [
        "| target | runtime | compared with | ratio | met |",
        "| --- | ---: | --- | ---: | --- |",
    ]
    for label, (key, field), other, way, wanted in checks:
        lines.append(_check(label, _median(res, key, "runtime", field), other, way, wanted))
    for field, what in (("redis_cpu_us", "Redis"), ("tree_cpu_us", "worker-tree")):
        lines.append(
            _check(
                f"`--prefetch 0 --pipeline 0`: {what} CPU per job <= 1.5x the default's",
                _median(res, "drain", "runtime p0", field),
                of("runtime", "drain", field),
                "<=",
                1.5,
            )
        )
    lines.append(
        _check(
            "4 masters of concurrency 1 drain >= 1.0x one master of 2 (a proxy "
            "for: scales as far as two cores allow)",
            _median(res, "drain", "runtime 4x1", "rate"),
            of("runtime", "drain", "rate"),
            ">=",
            1.0,
        )
    )
    return lines


def _check(
    label: str, ours: float | None, other: tuple[str, float] | None, way: str, wanted: float
) -> str:
    if ours is None or other is None or not other[1]:
        return f"| {label} | - | - | - | not measured |"
    ratio = abs(ours) / abs(other[1])
    met = ratio >= wanted if way == ">=" else ratio <= wanted
    return (
        f"| {label} | {side._num(ours)} | {other[0]}: {side._num(other[1])} | "
        f"{_ratio(ratio)} | {'yes' if met else 'no'} |"
    )


def render(result: dict[str, Any]) -> list[str]:
    lines = [
        "| system | version | concurrency | own processes | acks after the job |",
        "| --- | --- | --- | --- | --- |",
    ]
    for s in result["systems"]:
        version = result["versions"].get(s["venv"] or "", result["machine"].get("runtime", ""))
        if s["role"] == "reference":
            version = f"redis-py {result['machine'].get('redis-py', '')}"
        own, acks = ("yes" if s[k] else "no" for k in ("processes", "ack_after"))
        lines.append(f"| {s['name']} | {version} | {s['how']} | {own} | {acks} |")
    sizes = result.get("sizes", {})
    lines += [
        "",
        f"### Over TCP loopback ({sizes.get('drain', 0):,} queued jobs drained, "
        f"{sizes.get('enqueue_one', 0):,} put one at a time)",
        "",
    ]
    lines += [*_table(result, "tcp", COLUMNS), "", "runtime's median over each system's:", ""]
    lines += [*_ratios(result, "tcp", COLUMNS), ""]
    lines += ["### Targets (issues 19 and 34), over TCP", "", *targets(result), ""]
    if "unix" in result["results"]:
        lines += ["### Over a unix socket", "", *_table(result, "unix", UNIX_COLUMNS), ""]
        lines += ["runtime's median over each system's:", ""]
        lines += [*_ratios(result, "unix", UNIX_COLUMNS), ""]
    if result["results"].get("tcp", {}).get("profile"):
        lines += [
            f"### What each command and script costs inside Redis, over TCP (one drain "
            f"of {sizes.get('profile', 0):,} jobs with every command in the slowlog; "
            "time inside the command, no I/O)",
            "",
            *_profile(result),
            "",
            "Logging every command costs time of its own, most inside scripts that "
            "run many commands: read these times as shares, and the tables above "
            "(no slowlog) for the totals.",
            "",
        ]
    return lines
