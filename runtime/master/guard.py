"""Guards on running jobs, checked a few times a second by the master: the lease
deadline, the job's timeout (SIGTERM, then SIGKILL after a grace), the memory
limit, and the shutdown deadline that gives jobs back."""

from __future__ import annotations

import signal
import time

from runtime import config
from runtime.master import reasons
from runtime.master.children import ChildHandle
from runtime.master.leasing import safety_margin

LOST = "runtime.LeaseLost"  # the lease is gone: the outcome is not ours to report
RELEASED = "runtime.Released"  # not a failure: the job goes back unfinished


def check(busy: list[ChildHandle], worker: config.WorkerSettings, drain_at: float | None) -> None:
    """Kills the children whose job must stop, each with its reason."""
    now = time.monotonic()
    memory_limit = (worker.memory_limit_mib or 0) << 20
    for child in busy:
        job = child.job
        if job is None:
            continue
        if now >= job.lease_until - safety_margin(job.leased.lease_s) / 2:
            child.kill_for(reasons.Ending(LOST, "its lease could not be renewed in time"))
        elif job.terminated_at is None and now - job.last_sign > job.leased.timeout_s:
            why = f"timed out after {job.leased.timeout_s:g} s"
            child.kill_for(reasons.Ending("runtime.Timeout", why), signal.SIGTERM)
            job.terminated_at = now
        elif job.terminated_at is not None and now - job.terminated_at > worker.kill_grace_s:
            if job.killed_at is None and child.kill is not None:
                job.killed_at = now
                why = f"killed by signal 9, still running {worker.kill_grace_s:g} s after SIGTERM"
                child.kill = reasons.Ending(child.kill.group, f"{child.kill.reason}; {why}")
            child.send_signal(signal.SIGKILL)
        elif memory_limit and child.rss_bytes() > memory_limit:
            why = f"memory limit {worker.memory_limit_mib} MiB"
            child.kill_for(reasons.killed(9, why, "runtime.MemoryLimit"))
        elif drain_at is not None and now >= drain_at:
            child.kill_for(reasons.Ending(RELEASED, "given back at shutdown"))
