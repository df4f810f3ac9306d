"""How a child's exit code tells its master what happened: defined once, imported
by the child (which exits with them) and by the master (which reads them, in
runtime/master/reasons.py). Pure: no imports beyond the standard library."""

from __future__ import annotations

import enum


class ExitCode(enum.IntEnum):
    STOPPED = 0  # asked to stop, or the master went away
    FENCED = 86  # the lease deadline passed: stopped itself
    TERMINATED = 87  # SIGTERM from the master (timeout, shutdown) while running a job
    SANDBOX = 88  # the sandbox could not be built
