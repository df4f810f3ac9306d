"""The physical reference for draining: a bare redis-py loop, BLMOVE then LREM
per item (the reliable-queue pattern), run as one of N processes.

    python -m bench.bare URL SOURCE PROCESSING GO_KEY

Each process connects, waits for a token on GO_KEY (so interpreter start-up is
not timed), drains SOURCE, and prints the time.time() of its last item.
"""

from __future__ import annotations

import sys
import time

import redis


def main(url: str, source: str, processing: str, go: str) -> int:
    conn = redis.Redis.from_url(url)
    conn.ping()
    conn.rpush(go + ":ready", "1")
    conn.blpop([go], 0)
    last = time.time()
    while True:
        item = conn.blmove(source, processing, 0.05, "RIGHT", "LEFT")  # type: ignore[arg-type]
        if item is None:
            print(last, flush=True)
            return 0
        conn.lrem(processing, 1, item)  # type: ignore[arg-type]
        last = time.time()


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:5]))
