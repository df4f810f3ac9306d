"""`python -m bench.redis_cost OLD NEW`: what a job costs inside Redis, counted, not
timed: the instructions redis-server executes (valgrind's callgrind) per job for
a pop and a completion of jobs in batches of 8, as a master makes them in a drain
(`--batch 1`: one job a call, as `--prefetch 0 --pipeline 0` makes them), and for
a put of one job, as an application makes it, for two versions of runtime.
Counts do not depend on what else the host is doing, so two versions differ by a
percent or two, not by the noise of a shared machine (the server runs its timers
once a second, `--hz 1`: at the default 10 a second, a slow host made a put
count up to 20 % more of them; the first put, which loads the library, is not
counted); they count work, not time
(cache misses and the like are not in them).

Each version runs from its own checkout (a commit is checked out as a detached
worktree under /tmp and removed afterwards; a directory is used as it is), on its
own redis-server under callgrind (AOF on, TCP loopback as deployed), through the
public Client:
N puts of one job each, counted; then pops of 8 and completions of those 8
(`complete_many`: no result, no output) until N jobs are done, counted together;
then N more pops alone. A completion's count is the difference. A version with
lua/exchange.lua is also counted making N jobs' exchanges (each call completes
the jobs the last one leased, then pops as many: a master's exchange), row
"exchange"; a version without it pays pop + complete (row "both") instead.
Needs valgrind (apt-get install valgrind).

Those records were all written by the server counted, recently, so its scripts
remember them and read them without checking them again (lib/job.lua). With
`--backlog B` a third count drains B jobs put beforehand with put_many (pops
and completions of 8, per job): a backlog larger than the records a server
remembers (about 10,000 jobs of this size) is read and checked in full, as in
the headline's drain of 20,000.

    .venv/bin/python -m bench.redis_cost 34aab4c HEAD --jobs 1000
    .venv/bin/python -m bench.redis_cost 34aab4c HEAD --jobs 1000 --batch 1
    .venv/bin/python -m bench.redis_cost 34aab4c HEAD --backlog 20000
    .venv/bin/python -m bench.redis_cost main HEAD --config compact-records=1

`--config NAME=VALUE` sets a shared setting in the probe's namespace before
anything is counted, for each version that knows it (the report says which).
Without it each version runs at its defaults: from issue 28 on, that stores
queued jobs compact (no master of an earlier release is registered in the
probe's namespace); `--config compact-records=0` counts JSON records.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BATCH = 8  # jobs per pop and per completion by default, about a master's in a drain


def probe(
    jobs: int, backlog: int = 0, batch: int = BATCH, settings: tuple[str, ...] = ()
) -> dict[str, Any]:
    """Runs inside a checkout (cwd): instructions per job, both calls and pops alone."""
    sys.path[0] = os.getcwd()  # the checkout's runtime, not this file's
    import runtime  # noqa: PLC0415 - imported from the checkout, after sys.path is set
    from runtime import Client  # noqa: PLC0415
    from runtime.queue import ops  # noqa: PLC0415
    from runtime.queue.embedded import find_server_binary  # noqa: PLC0415
    from runtime.queue.leases import Outcomes  # noqa: PLC0415

    directory = Path(tempfile.mkdtemp(prefix="rt-cost-", dir="/tmp"))
    server, port = start_counted(str(find_server_binary()), directory)

    def control(*args: str) -> None:
        callgrind_control(server, *args)

    try:
        client = Client.from_url(f"redis://127.0.0.1:{port}", namespace="cost")
        q = client.queue("bench")
        applied = []
        for setting in settings:  # only where the version knows the setting
            name, _, value = setting.partition("=")
            try:
                client.admin.config_set(name, value)
                applied.append(setting)
            except Exception:  # noqa: BLE001 - an older version's own error type
                pass

        def fill(n: int) -> None:
            for offset in range(0, n, 500):
                client.put_many(
                    q.spec("bench.jobs:noop", {"payload": "x" * 85})
                    for _ in range(min(500, n - offset))
                )

        def counted(name: str, complete: bool, n: int = jobs) -> None:
            control("--zero")
            control("--instr=on")
            done = 0
            while done < n:
                leased = q.pop(batch, worker="bench-1")
                if complete:
                    client.leases.complete_many("bench-1", {j.jid: j.token or "" for j in leased})
                done += len(leased)
            control("--instr=off")
            control("--dump=" + name)

        def exchanged(n: int) -> None:
            """Each call completes the jobs the last one leased and pops as many (a
            master's exchange: one call for both); the first pop is not counted."""
            leased = [(j.jid, j.token or "") for j in q.pop(batch, worker="bench-1")]
            control("--zero")
            control("--instr=on")
            done = 0
            while done < n:
                outcomes = Outcomes()
                for jid, token in leased:
                    outcomes.add_complete(jid, token)
                got = client.conn.call(ops.exchange("bench-1", outcomes, batch, ["bench"]))
                done += len(leased)
                leased = [(j.jid, j.token) for j in got.popped.jobs]
            control("--instr=off")
            control("--dump=exchange")

        q.put("bench.jobs:noop", {"payload": "x" * 85})  # warm: the library loaded
        control("--zero")
        control("--instr=on")
        for _ in range(jobs):  # one call a job, as an application puts
            q.put("bench.jobs:noop", {"payload": "x" * 85})
        control("--instr=off")
        control("--dump=put")
        fill(10 * batch)
        for _ in range(10):  # warm: the library loaded, the keys made
            leased = q.pop(batch, worker="bench-1")
            client.leases.complete_many("bench-1", {j.jid: j.token or "" for j in leased})
        counted("both", complete=True)
        fill(jobs)
        counted("pop", complete=False)
        if hasattr(ops, "exchange"):  # a version with lua/exchange.lua
            fill(jobs + batch)
            exchanged(jobs)
        if backlog:
            fill(backlog)
            counted("drain", complete=True, n=backlog)
    finally:
        server.terminate()
        server.wait(timeout=60)
    totals = {
        name: total / (backlog if name == "drain" else jobs)
        for name, total in dump_totals(directory).items()
    }
    shutil.rmtree(directory, ignore_errors=True)
    both, pop = totals["both"], totals["pop"]
    counts = {
        "runtime": runtime.__file__,
        "pop": pop,
        "complete": both - pop,
        "both": both,
        "put": totals["put"],
        "settings": applied,
    }
    if backlog:
        counts["drain"] = totals["drain"]
    if "exchange" in totals:
        counts["exchange"] = totals["exchange"]
    return counts


def start_counted(binary: str, directory: Path) -> tuple[subprocess.Popen[bytes], int]:
    """A private redis-server under callgrind, counting nothing until told
    (`callgrind_control(server, "--instr=on")`), its dumps in `directory`, once it
    answers on its TCP loopback port: AOF on, as deployed, and `--hz 1` (its timers
    run per second of wall time, and under callgrind, and on a busy host, a call
    takes long: at the default 10 counts would follow load)."""
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    argv = ["valgrind", "--tool=callgrind", "--instr-atstart=no",
            f"--callgrind-out-file={directory / 'callgrind.out'}", binary,
            "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "yes",
            "--hz", "1", "--dir", str(directory)]  # fmt: skip
    server = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not _answers(port) and time.monotonic() < deadline:
        time.sleep(0.1)
    return server, port


def callgrind_control(server: subprocess.Popen[bytes], *args: str) -> None:
    subprocess.run(["callgrind_control", *args, str(server.pid)], check=True, capture_output=True)


def dump_totals(directory: Path) -> dict[str, int]:
    """The instructions each dump in `directory` counted, by the name it was
    dumped with (`callgrind_control(server, "--dump=NAME")`)."""
    totals: dict[str, int] = {}
    for dump in directory.glob("callgrind.out.*"):
        lines = dump.read_text(errors="replace").splitlines()
        trigger = next((ln for ln in lines if ln.startswith("desc: Trigger")), "")
        total = next((ln for ln in lines if ln.startswith("totals:")), "")
        if "dump " in trigger and total:  # "desc: Trigger: dump NAME"
            totals[trigger.rpartition("dump ")[2]] = int(total.split()[1])
    return totals


def _answers(port: int) -> bool:
    import redis  # noqa: PLC0415 - the checkout's environment, like runtime

    try:
        return bool(redis.Redis(port=port, socket_timeout=5).ping())
    except redis.RedisError:  # not listening yet (valgrind starts slowly)
        return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.redis_cost")
    parser.add_argument("old", nargs="?", help="commit or checkout directory")
    parser.add_argument("new", nargs="?", help="commit or checkout directory")
    parser.add_argument("--jobs", type=int, default=1000, help="jobs counted (each way)")
    parser.add_argument(
        "--backlog", type=int, default=0, help="also count draining this many jobs put at once"
    )
    parser.add_argument("--out", type=Path, help="write the counts here as JSON")
    parser.add_argument("--batch", type=int, default=BATCH, help="jobs per pop and completion")
    parser.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a shared setting for both versions (skipped by one that does not know it)",
    )
    parser.add_argument("--probe", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.probe:
        print(json.dumps(probe(args.jobs, args.backlog, args.batch, tuple(args.config))))
        return 0
    if not (args.old and args.new):
        raise SystemExit("python -m bench.redis_cost OLD NEW: two commits or checkouts")
    # not imported by a probe, which runs as a script in a checkout without `bench` on its path
    from bench.compare import _checkout, _git, run_in_checkout  # noqa: PLC0415

    if shutil.which("valgrind") is None:
        raise SystemExit("bench.redis_cost needs valgrind: apt-get install -y valgrind")
    made: list[Path] = []
    try:
        trees = {"old": _checkout(args.old, made), "new": _checkout(args.new, made)}
        commits = {side: _git(tree, "rev-parse", "HEAD") for side, tree in trees.items()}
        counts = {
            side: run_in_checkout(
                __file__,
                tree,
                [
                    "--probe",
                    "--jobs",
                    str(args.jobs),
                    "--backlog",
                    str(args.backlog),
                    "--batch",
                    str(args.batch),
                    *(f"--config={setting}" for setting in args.config),
                ],
                1800 + args.backlog // 10,
            )
            for side, tree in trees.items()
        }
    finally:
        for path in made:
            _git(Path.cwd(), "worktree", "remove", "--force", str(path))
    if args.out:
        summary = {
            "commits": commits,
            "jobs": args.jobs,
            "backlog": args.backlog,
            "batch": args.batch,
            "counts": counts,
        }
        args.out.write_text(json.dumps(summary, indent=2) + "\n")
    print(
        f"OLD {commits['old']}, NEW {commits['new']}: redis-server instructions per job "
        f"(thousands), pops and completions of {args.batch}, puts of one"
        + (f"; drain: a backlog of {args.backlog} put with put_many" if args.backlog else "")
        + "\n"
    )
    print("| call | OLD | NEW | NEW/OLD |\n| --- | ---: | ---: | ---: |")
    calls = ("pop", "complete", "both", "exchange", "put") + (("drain",) if args.backlog else ())
    for call in calls:
        old, new = counts["old"].get(call), counts["new"].get(call)
        if old is None and new is None:
            continue
        # a version without exchange.lua pays for an exchange what pop + complete cost
        old = counts["old"]["both"] if old is None else old
        new = counts["new"]["both"] if new is None else new
        print(f"| {call} | {old / 1000:,.1f} | {new / 1000:,.1f} | {new / old:.3f} |")
    for side in ("old", "new"):
        if counts[side].get("settings"):
            print(f"\n{side.upper()} ran with {', '.join(counts[side]['settings'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
