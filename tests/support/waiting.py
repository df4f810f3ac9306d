"""Waiting on events with deadlines, never bare sleeps."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from runtime import Client
    from runtime.queue.job import Job

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


def idle(counts: Mapping[str, int]) -> bool:
    """No job waiting or running in one queue's counts, read in one call (two
    reads of a queue a master works on may see one job in neither state)."""
    return counts["waiting"] == 0 and counts["running"] == 0


def stays(
    probe: Callable[[], object], duration_s: float, interval_s: float = 0.01, what: str = ""
) -> None:
    """Asserts that `probe` stays truthy for `duration_s`, failing at the first falsy
    answer. Only for absences no event can announce (no duplicate event, no pop while
    paused); the window must be long against the time the thing would take."""
    deadline = time.monotonic() + duration_s
    while True:
        if not probe():
            raise AssertionError(f"no longer true: {what or probe}")
        if time.monotonic() > deadline:
            return
        time.sleep(interval_s)


def ended(client: Client, jid: str, timeout_s: float = 20) -> Job:
    """The job once it is complete or failed; fails after the deadline."""

    def done() -> Job | None:
        job = client.get_job(jid)
        return job if job is not None and job.state in ("complete", "failed") else None

    job = wait_for(done, timeout_s, what=f"job {jid} to end")
    assert job is not None
    return job
