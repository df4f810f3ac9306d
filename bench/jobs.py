"""Jobs the benchmarks run."""

from __future__ import annotations

from typing import Any

DATA_100B = {"payload": "x" * 85}  # exactly 100 bytes of JSON


def noop(job: Any) -> None:
    """Does nothing: the benchmarks measure the runtime, not the job."""
