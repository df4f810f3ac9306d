"""Sample jobs for `runtime demo` and the README's quick start.

`put_samples` puts one of each: two that succeed, one that asks for a retry
once, one that always fails (and so ends `failed` after its retries), and one
delayed by a second.
"""

from __future__ import annotations

import logging
from typing import Any

from runtime.errors import Retry
from runtime.queue.client import Client

log = logging.getLogger(__name__)
QUEUE = "demo"


def greet(job: Any) -> str:
    """Succeeds at once."""
    return f"hello, {job.data.get('name', 'world')}"


def add(job: Any) -> int:
    """Succeeds with the sum of data["numbers"]."""
    return sum(int(n) for n in job.data["numbers"])


def flaky(job: Any) -> str:
    """Asks for a retry on its first attempt, then succeeds."""
    if job.attempt == 1:
        raise Retry(delay=0.5, reason="first attempt always asks again")
    return f"worked on attempt {job.attempt}"


def broken(job: Any) -> None:
    """Always fails: ends `failed` with its traceback once its retries are spent."""
    raise ValueError(f"cannot process order {job.data.get('order')}")


def put_samples(client: Client) -> list[str]:
    queue = client.queue(QUEUE)
    return [
        queue.put(greet, {"name": "runtime"}),
        queue.put(add, {"numbers": [1, 2, 3]}),
        queue.put(flaky, {}, retries=2),
        queue.put(broken, {"order": 42}, retries=1, backoff=(0.2, 0.5)),
        queue.put(greet, {"name": "later"}, delay=1.0),
    ]
