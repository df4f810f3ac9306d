"""`python -m bench.call_cost`: what one call costs inside Redis before it does
any work, counted (valgrind's callgrind, instructions per call, as
bench.redis_cost counts them): a command alone (PING, TIME), a bare function
call of a one-line library (FCALL returning 1, and one that runs TIME), and
runtime's cheapest operation, `now` (the library's own floor: its start and
end-of-call steps, the read of the shared settings, the clock),
beside a plain put of one job. What a put costs beyond its floor is its own
work. One redis-server (AOF on, `--hz 1`, TCP loopback), the current checkout:

    .venv/bin/python -m bench.call_cost --calls 500
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import redis

from bench.redis_cost import callgrind_control, dump_totals, start_counted
from runtime import Client
from runtime.queue.embedded import find_server_binary

BARE = """#!lua name=bench_bare
redis.register_function('bench_one', function(keys, args) return 1 end)
redis.register_function('bench_time', function(keys, args) redis.call('TIME') return 1 end)
"""


def run(calls: int) -> dict[str, float]:
    directory = Path(tempfile.mkdtemp(prefix="rt-call-", dir="/tmp"))
    server, port = start_counted(str(find_server_binary()), directory)
    try:
        raw = redis.Redis(port=port)
        raw.function_load(BARE)
        client = Client.from_url(f"redis://127.0.0.1:{port}", namespace="cost")
        queue = client.queue("bench")
        payload = {"payload": "x" * 85}  # bench.redis_cost's put
        steps: dict[str, Callable[[], object]] = {
            "PING": raw.ping,
            "TIME": raw.time,
            "FCALL, returns 1": lambda: raw.fcall("bench_one", 0),
            "FCALL, runs TIME": lambda: raw.fcall("bench_time", 0),
            "runtime now": client.conn.now_ms,
            "runtime put, one job": lambda: queue.put("bench.jobs:noop", payload),
        }
        for name, step in steps.items():
            step()  # warm: libraries loaded, keys made
            callgrind_control(server, "--zero")
            callgrind_control(server, "--instr=on")
            for _ in range(calls):
                step()
            callgrind_control(server, "--instr=off")
            callgrind_control(server, "--dump=" + _tag(name))
    finally:
        server.terminate()
        server.wait(timeout=60)
    totals = dump_totals(directory)
    shutil.rmtree(directory, ignore_errors=True)
    return {name: totals[_tag(name)] / calls for name in steps if _tag(name) in totals}


def _tag(name: str) -> str:
    """A step's name as a dump's (no blanks, no commas)."""
    return name.replace(" ", "_").replace(",", "")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.call_cost", description=__doc__)
    parser.add_argument("--calls", type=int, default=500, help="calls counted of each kind")
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("bench.call_cost needs valgrind: apt-get install -y valgrind")
    counts = run(args.calls)
    print("| call | instructions (thousands) |\n| --- | ---: |")
    for name, n in counts.items():
        print(f"| {name} | {n / 1000:.1f} |")


if __name__ == "__main__":
    main()
