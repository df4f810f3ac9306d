"""Why a child ended, in words a person can read, and the failure group it files under."""

from __future__ import annotations

import signal
from dataclasses import dataclass

from runtime.children import child

FENCED = "runtime.LeaseExpired"  # a child that stopped itself: its lease ran out


@dataclass(frozen=True)
class Ending:
    group: str
    reason: str


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def of_exit(code: int | None, sig: int | None, *, cpu_limit_s: float | None = None) -> Ending:
    """How a child that the master did not kill ended."""
    if sig is not None:
        name = signal_name(sig)
        if sig == signal.SIGXCPU:
            limit = f"CPU limit {cpu_limit_s:g} s" if cpu_limit_s else "CPU limit"
            return Ending("runtime.CPULimit", f"killed by signal {sig} ({limit})")
        return Ending("runtime.ChildCrashed", f"killed by signal {sig} ({name})")
    if code == child.EXIT_FENCED:
        return Ending(FENCED, "stopped itself: its lease was not renewed in time")
    if code == child.EXIT_SANDBOX:
        return Ending("runtime.SandboxError", "could not build its sandbox (see the master's log)")
    if code == child.EXIT_TERMINATED:
        return Ending("runtime.ChildCrashed", "terminated by SIGTERM")
    return Ending("runtime.ChildCrashed", f"exited with code {code} before reporting")


def killed(sig: int, why: str, group: str) -> Ending:
    """A child the master killed, and why."""
    return Ending(group, f"killed by signal {sig} ({why})")
