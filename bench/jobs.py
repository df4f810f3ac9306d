"""Jobs the benchmarks run."""

from __future__ import annotations

import time
from typing import Any

DATA_100B = {"payload": "x" * 85}  # exactly 100 bytes of JSON


def noop(job: Any) -> None:
    """Does nothing: the benchmarks measure the runtime, not the job."""


_conns: dict[str, Any] = {}


def _redis(url: str) -> Any:
    import redis  # noqa: PLC0415 - the bench jobs talk to Redis themselves, by URL in data

    if url not in _conns:
        _conns[url] = redis.Redis.from_url(url)
    return _conns[url]


def stamp(job: Any) -> None:
    """Records when it started (time.time()) in the list data["key"]."""
    started = time.time()
    _redis(job.data["url"]).rpush(job.data["key"], f"{job.data.get('n', 0)} {started}")


def count(job: Any) -> None:
    """Increments the counter data["key"]: proof that the job really ran."""
    _redis(job.data["url"]).incr(job.data["key"])


def count_and_print(job: Any) -> None:
    """`count`, printing one line on the way (the master logs it with the job's jid
    and klass and keeps it in the job's output)."""
    print(f"counting for {job.data['key']} in attempt {job.attempt}")
    count(job)


def chatter(job: Any) -> None:
    """Prints a line every data["every_s"] for data["seconds"] (a job to follow)."""
    end = time.monotonic() + float(job.data.get("seconds", 5))
    i = 0
    while time.monotonic() < end:
        print(f"line {i}", flush=True)
        i += 1
        time.sleep(float(job.data.get("every_s", 0.01)))
