"""`python -m bench.put_growth`: whether a put costs more the longer one Redis
server has run (issue 34). Puts one at a time on one private redis-server over
TCP loopback (AOF everysec), in rounds, and after each round reports the put
script's time inside Redis (INFO commandstats usec of the script commands, as
the headline counts them: the commands they run included; reset before each
round), the rate, and the Lua heap of the scripts (`used_memory_vm_functions`;
`used_memory_lua` on 6.2; outside used_memory and maxmemory). The records the
scripts remember across calls (lib/job.lua) live in that heap; their cap is
what this measures:

    .venv/bin/python -m bench.put_growth --rounds 6 --jobs 5000
"""

from __future__ import annotations

import argparse
import time

from bench import server as bench_server
from bench.peers import common, cost
from runtime import Client

NOOP = "bench.peers.runtime_tasks:noop"  # the headline's put (bench.peers.runtime_adapter)


def run(rounds: int, jobs: int) -> list[dict[str, float]]:
    out: list[dict[str, float]] = []
    with bench_server.private_server(tcp=True) as server:
        meter = bench_server.connect(server)
        queue = Client.from_url(server.url).queue(common.QUEUE)
        queue.put(NOOP, common.PAYLOAD)  # the library loaded
        done = 0
        for _ in range(rounds):
            meter.config_resetstat()
            started = time.perf_counter()
            for _ in range(jobs):
                queue.put(NOOP, common.PAYLOAD)
            rate = jobs / (time.perf_counter() - started)
            done += jobs
            stats = cost.commandstats(meter)
            calls = sum(stats.get(name, (0, 0))[0] for name in cost.SCRIPTS)
            usec = sum(stats.get(name, (0, 0))[1] for name in cost.SCRIPTS)
            memory = meter.info("memory")
            heap = memory.get("used_memory_vm_functions", memory.get("used_memory_lua", 0))
            row = {
                "puts": done,
                "rate": rate,
                "script_us": usec / max(calls, 1),
                "lua_heap_mb": int(heap) / 1e6,
            }
            out.append(row)
            print(
                f"{done:>7,} puts: {rate:,.0f}/s, script {row['script_us']:.1f} µs, "
                f"Lua heap {row['lua_heap_mb']:.1f} MB",
                flush=True,
            )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.put_growth", description=__doc__)
    parser.add_argument("--rounds", type=int, default=6, help="rounds of puts")
    parser.add_argument("--jobs", type=int, default=5000, help="puts a round")
    args = parser.parse_args()
    run(args.rounds, args.jobs)


if __name__ == "__main__":
    main()
