"""RQ's benchmark jobs: plain functions, found by RQ through their dotted path."""

from __future__ import annotations

from typing import Any

from bench.peers import common


def noop(data: Any = None) -> None:
    """Never run: only queued for the enqueue and memory measures."""


def count() -> None:
    common.job_count()


def stamp(n: int, key: str = common.STAMPS) -> None:
    common.job_stamp(n, key)
