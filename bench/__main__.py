"""`python -m bench [SUITE...] [--quick]`: runs benchmark suites (the headline
first: runtime's cost per job against its lightest peers over TCP, then a unix
socket; `python -m bench headline --short` is its short form), stores each
suite's numbers in bench/results/<suite>.json and rewrites bench/RESULTS.md
from every stored suite and its notes (bench/results/<suite>.notes.md, the only
hand-written part; other *.notes.md there, such as bench.compare's, follow the
suites); `--render` only rewrites RESULTS.md."""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import core, headline, machine, scheduler, side, worker
from runtime.queue.embedded import find_server_binary

HERE = Path(__file__).parent
SUITES: dict[str, Callable[..., dict[str, Any]]] = {
    "headline": headline.run,
    "core": core.run,
    "worker": worker.run,
    "scheduler": scheduler.run,
    "side": side.run,
}
TITLES = {
    "headline": "The headline: cost per job against the lightest peers, over TCP "
    "(issue 19, cost per job)",
    "core": "Core operations from one process (issue: foundation)",
    "worker": "The worker host end to end (issue: the worker host)",
    "scheduler": "The embedded scheduler at scale (issue: the embedded scheduler)",
    "side": "Side by side with RQ, Celery, Dramatiq, arq, Huey and saq (issue: benchmarks)",
}


def _num(value: float) -> str:
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.1f}" if abs(value) >= 10 else f"{value:.2f}"


def _cell(runs: list[float]) -> str:
    median = statistics.median(runs)
    if len(runs) == 1:
        return _num(median)
    return f"{_num(median)} ({_num(min(runs))} to {_num(max(runs))})"


def render() -> str:
    lines = [
        "# Benchmark results",
        "",
        "Written by `./dev bench` (`python -m bench`); every number below comes from",
        "that command. Cells: median of the runs, with (min to max) when repeated.",
        "",
    ]
    for suite in SUITES:
        path = HERE / "results" / f"{suite}.json"
        if not path.exists():
            continue
        result: dict[str, Any] = json.loads(path.read_text())
        lines += [f"## {TITLES[suite]}", ""]
        size = (
            "the sizes in each table's title, repetitions interleaved"
            if suite in ("side", "headline")
            else f"{result['jobs']} jobs"
        )
        minutes = result.get("seconds", 0) / 60
        lines.append(
            f"Run {result['when']} with `{result['command']}` ({size}, "
            f"{result['repeat']} runs, {minutes:.0f} min)."
        )
        lines.append("")
        lines += ["| machine | |", "| --- | --- |"]
        lines += [f"| {k} | {v} |" for k, v in result["machine"].items()]
        lines.append("")
        if suite in ("side", "headline"):
            lines += side.render(result) if suite == "side" else headline.render(result)
            lines += ["Reference, from the same run on the same server:", ""]
        lines += ["| measure | result |", "| --- | ---: |"]
        lines += [f"| {name} | {_cell(runs)} |" for name, runs in result["measures"].items()]
        notes = HERE / "results" / f"{suite}.notes.md"
        if notes.exists():
            lines += ["", notes.read_text().strip()]
        lines.append("")
    for notes in sorted((HERE / "results").glob("*.notes.md")):  # e.g. bench.compare's runs
        if notes.name.removesuffix(".notes.md") not in SUITES:
            lines += [notes.read_text().strip(), ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench")
    parser.add_argument("suites", nargs="*", choices=[*SUITES, []], help="default: all")
    parser.add_argument("--quick", action="store_true", help="small runs to check the harness")
    parser.add_argument(
        "--short", action="store_true", help="headline: its short form (under 10 minutes)"
    )
    parser.add_argument("--systems", help="side, headline: comma-separated systems (default: all)")
    parser.add_argument("--measures", help="side: comma-separated measures (default: all)")
    parser.add_argument("--transports", help="headline: tcp, unix or tcp,unix (the default)")
    parser.add_argument(
        "--repeat", type=int, help="side, headline: runs of each measure (3; --short: 1)"
    )
    parser.add_argument(
        "--render", action="store_true", help="only rewrite RESULTS.md from results and notes"
    )
    args = parser.parse_args(argv)
    if args.render:
        (HERE / "RESULTS.md").write_text(render())
        return 0
    (HERE / "results").mkdir(exist_ok=True)
    for suite in args.suites or list(SUITES):
        started = time.monotonic()
        print(f"bench: running {suite} ...", file=sys.stderr)
        if suite == "side":
            result = side.run(
                quick=args.quick,
                systems=args.systems.split(",") if args.systems else None,
                measures=args.measures.split(",") if args.measures else None,
                repeat=args.repeat or 3,
            )
        elif suite == "headline":
            result = headline.run(
                size="quick" if args.quick else "short" if args.short else "full",
                systems=args.systems.split(",") if args.systems else None,
                transports=args.transports.split(",") if args.transports else None,
                repeat=args.repeat or (1 if args.short else 3),
            )
        else:
            result = SUITES[suite](quick=args.quick)
        result["when"] = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
        args_text = shlex.join(argv if argv is not None else sys.argv[1:])
        result["command"] = f"python -m bench {args_text}".strip()
        result["machine"] = machine.describe(find_server_binary())
        result["seconds"] = round(time.monotonic() - started, 1)
        # a quick run only checks the harness: kept out of RESULTS.md, but left to read
        out = HERE / ".work" / "quick" if args.quick else HERE / "results"
        out.mkdir(parents=True, exist_ok=True)
        (out / f"{suite}.json").write_text(json.dumps(result, indent=2) + "\n")
        print(json.dumps(result["measures"], indent=2), file=sys.stderr)
        if suite == "headline":
            print("\n".join(headline.render(result)))
    (HERE / "RESULTS.md").write_text(render())
    return 0


if __name__ == "__main__":
    sys.exit(main())
