"""Waiting on events with deadlines, never bare sleeps."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(
    probe: Callable[[], T], timeout_s: float = 10.0, interval_s: float = 0.01, what: str = ""
) -> T:
    """Polls `probe` until it returns something truthy; fails after the deadline."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what or probe}")
        time.sleep(interval_s)
