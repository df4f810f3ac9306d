"""The bare loop's worker: the reliable-queue pattern in plain redis-py, as
bench/bare.py does it, with the jobs every system runs (common.job_count and
common.job_stamp, on a connection of their own as elsewhere).

    python -m bench.peers.bare_tasks

BLMOVE moves an item from the queue to this process's processing list, the job
runs, LREM takes the item off that list: three commands a counting job, one a
side. Items: `count`, or `stamp N` (the latency measure). Runs until killed.
"""

from __future__ import annotations

import os
import sys

from bench.peers import common

QUEUE = f"{common.QUEUE}:bare"
BLOCK_S = 1.0


def run(item: bytes) -> None:
    kind, _, rest = item.decode().partition(" ")
    if kind == "count":
        common.job_count()
    elif kind == "stamp":
        common.job_stamp(int(rest))


def main() -> int:
    r = common.conn()
    processing = f"{QUEUE}:processing:{os.getpid()}"
    while True:
        item = r.blmove(QUEUE, processing, BLOCK_S, "RIGHT", "LEFT")  # type: ignore[arg-type]
        if item is None:
            continue
        run(item)
        r.lrem(processing, 1, item)


if __name__ == "__main__":
    sys.exit(main())
