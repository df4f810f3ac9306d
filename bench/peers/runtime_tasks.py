"""runtime's benchmark jobs: each takes the job context."""

from __future__ import annotations

from typing import Any

from bench.peers import common


def noop(job: Any) -> None:
    """Never run: only queued for the enqueue and memory measures."""


def count(job: Any) -> None:
    common.job_count()


def stamp(job: Any) -> None:
    common.job_stamp(job.data["n"], job.data.get("key", common.STAMPS))
