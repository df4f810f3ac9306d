"""What a job cost its child: CPU seconds and peak memory, per attempt.

`cpu_s` is user + system time of the child (all its threads) and of the
subprocesses it waited for (the child is a subreaper: orphans it reaped count
too), from getrusage deltas of RUSAGE_SELF and RUSAGE_CHILDREN around the call.
`max_rss_mb` is the child's peak resident set during the job: before each job
the kernel's high-water mark is reset to the current RSS (writing "5" to
/proc/self/clear_refs, Linux 4.0+), so a light job after a heavy one on the same
child reports its own peak. Where the kernel refuses (no /proc, a child whose
identity change made /proc/self root's), the peak is the child's since it
started and `of_job` says so. The peak of a subprocess is not in it (the kernel
keeps only the largest ever for RUSAGE_CHILDREN). docs/operating.md, "Reading
usage".
"""

from __future__ import annotations

import os
import resource
from dataclasses import dataclass

_SELF, _CHILDREN = resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN
_getrusage = resource.getrusage
CLEAR_REFS = "/proc/self/clear_refs"
RESET_HIGH_WATER = b"5"  # clear_refs: reset the peak RSS to the current RSS


@dataclass
class Measured:
    cpu_s: float
    max_rss_mb: float
    of_job: bool  # False: the peak is the child's since it started


class Meter:
    """Measures one job at a time: `start()` before the call, `stop()` after."""

    def __init__(self) -> None:
        self.clear_fd = -1
        try:
            self.clear_fd = os.open(CLEAR_REFS, os.O_WRONLY | os.O_CLOEXEC)
            os.write(self.clear_fd, RESET_HIGH_WATER)
        except OSError:
            if self.clear_fd >= 0:
                os.close(self.clear_fd)
            self.clear_fd = -1
        self.cpu0 = 0.0

    @property
    def resets(self) -> bool:
        return self.clear_fd >= 0

    def start(self) -> None:
        if self.clear_fd >= 0:
            try:
                os.write(self.clear_fd, RESET_HIGH_WATER)
            except OSError:
                os.close(self.clear_fd)
                self.clear_fd = -1
        own, waited = _getrusage(_SELF), _getrusage(_CHILDREN)
        self.cpu0 = own.ru_utime + own.ru_stime + waited.ru_utime + waited.ru_stime

    def stop(self) -> Measured:
        own, waited = _getrusage(_SELF), _getrusage(_CHILDREN)
        cpu = own.ru_utime + own.ru_stime + waited.ru_utime + waited.ru_stime - self.cpu0
        # ru_maxrss of RUSAGE_SELF: the high-water mark of the child's memory, in KiB
        return Measured(max(0.0, cpu), own.ru_maxrss / 1024, self.clear_fd >= 0)
