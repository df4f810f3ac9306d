"""Why a child ended, in words a person can read, the failure group it files
under, and what becomes of its job (its `Fate`)."""

from __future__ import annotations

import enum
import signal
from dataclasses import dataclass

from runtime.children.exits import ExitCode
from runtime.vocabulary import FailureGroup


class Fate(enum.Enum):
    """What becomes of the job of a child that ended."""

    FAILED = "failed"  # the attempt failed: retried, or failed for good, with group and reason
    RELEASED = "released"  # not the job's doing: back to its queue, no retry spent
    DROPPED = "dropped"  # its lease is gone: nothing of ours to report


@dataclass(frozen=True)
class Ending:
    group: FailureGroup
    reason: str
    fate: Fate = Fate.FAILED


FENCED = Ending(
    FailureGroup.LEASE_EXPIRED, "stopped itself: its lease was not renewed in time", Fate.RELEASED
)
UNRENEWED = Ending(
    FailureGroup.LEASE_EXPIRED, "its lease could not be renewed in time", Fate.RELEASED
)
LOST = Ending(FailureGroup.LEASE_LOST, "its lease was lost", Fate.DROPPED)
SHUTDOWN = Ending(FailureGroup.RELEASED, "given back at shutdown", Fate.RELEASED)
CANCELLED = Ending(FailureGroup.CANCELLED, "cancelled", Fate.DROPPED)


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def process_ended(code: int | None, sig: int | None) -> str:
    """How a process ended, as a sentence's verb: "killed by signal 9 (SIGKILL)"."""
    if sig is not None:
        return f"killed by signal {sig} ({signal_name(sig)})"
    return f"exited with code {code}"


def of_exit(code: int | None, sig: int | None, *, cpu_limit_s: float | None = None) -> Ending:
    """How a child that the master did not kill ended."""
    if sig is not None:
        name = signal_name(sig)
        if sig == signal.SIGXCPU:
            limit = f"CPU limit {cpu_limit_s:g} s" if cpu_limit_s else "CPU limit"
            return Ending(FailureGroup.CPU_LIMIT, f"killed by signal {sig} ({limit})")
        return Ending(FailureGroup.CHILD_CRASHED, f"killed by signal {sig} ({name})")
    if code == ExitCode.FENCED:
        return FENCED
    if code == ExitCode.SANDBOX:
        return Ending(
            FailureGroup.SANDBOX_ERROR, "could not build its sandbox (see the master's log)"
        )
    if code == ExitCode.TERMINATED:
        return Ending(FailureGroup.CHILD_CRASHED, "terminated by SIGTERM")
    return Ending(FailureGroup.CHILD_CRASHED, f"exited with code {code} before reporting")


def killed(sig: int, why: str, group: FailureGroup) -> Ending:
    """A child the master killed, and why."""
    return Ending(group, f"killed by signal {sig} ({why})")
