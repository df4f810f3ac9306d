"""The words Python and Lua share: job states and runtime's failure groups.

Spelled once, here. `runtime.queue.scripts` generates them into the Lua prelude
(`lua_vocabulary`), the way `keys.py` renders the key schema: each state a
local of the same name as its member (`WAITING`, compared as `meta.s ==
WAITING`), the groups a table `GROUP` (`GROUP.CORRUPT_JOB`): reading a local
costs a comparison nothing more than the literal did. Neither Python
nor Lua spells a state or a group as a quoted literal anywhere else;
tests/unit/test_vocabulary.py greps for them.

The members are `StrEnum`s: they compare, hash and serialize as the very strings
of SPEC.md, so `job.state == "waiting"` and the keys of `counts()` stay what
users know.

Not here: `message_status` answers (queued, locked ...) are another vocabulary,
that of a message queue (SPEC 2b), and share no word with these. Neither do the
history events (put, popped, failed ...), the kinds of a lease report
(complete, retry, fail, release) or the operations' names, though some are
spelled like a state: those are named where they are defined.

A pure module: it imports nothing from runtime.
"""

from __future__ import annotations

from enum import StrEnum


class JobState(StrEnum):
    """A job's state (SPEC 2). A stored job is in one of them except THROTTLED,
    which a reader sees for a waiting job whose domain is over its limit."""

    SCHEDULED = "scheduled"
    WAITING = "waiting"
    RUNNING = "running"
    COMPLETE = "complete"
    FAILED = "failed"
    DEPENDS = "depends"
    THROTTLED = "throttled"


# The states stored in a job's record (meta.s).
STORED_STATES = tuple(s for s in JobState if s is not JobState.THROTTLED)
# The states a job has ended in.
ENDED_STATES = (JobState.COMPLETE, JobState.FAILED)
# The states a queue's jobs are listed by (`jobs`, the CLI, the dashboard), in the
# order they are offered; stalled jobs are listed with the running.
LISTED_STATES = (
    JobState.WAITING,
    JobState.THROTTLED,
    JobState.SCHEDULED,
    JobState.RUNNING,
    JobState.DEPENDS,
    JobState.COMPLETE,
    JobState.FAILED,
)


class Count(StrEnum):
    """The keys of a queue's counts (`counts()`, SPEC 3), in the order they are
    shown: the states, and STALLED (running jobs whose lease has expired and that
    no pop has taken back yet; counted apart from RUNNING, not a state)."""

    WAITING = JobState.WAITING.value
    THROTTLED = JobState.THROTTLED.value
    SCHEDULED = JobState.SCHEDULED.value
    RUNNING = JobState.RUNNING.value
    STALLED = "stalled"
    DEPENDS = JobState.DEPENDS.value
    COMPLETE = JobState.COMPLETE.value
    FAILED = JobState.FAILED.value


class FailureGroup(StrEnum):
    """The groups runtime files a job's failed attempt under (SPEC 3), besides the
    class paths of the exceptions jobs raise. An attempt that ends in a
    group of the last block is not a failure: its job goes back to its queue
    or is gone, and the group only names why in the master's log."""

    FAIL = "runtime.Fail"  # the job raised Fail without a group of its own
    CHILD_CRASHED = "runtime.ChildCrashed"
    MEMORY_LIMIT = "runtime.MemoryLimit"
    CPU_LIMIT = "runtime.CPULimit"
    TIMEOUT = "runtime.Timeout"
    PROTOCOL_ERROR = "runtime.ProtocolError"
    KLASS_NOT_ALLOWED = "runtime.KlassNotAllowed"
    KLASS_NOT_FOUND = "runtime.KlassNotFound"
    SANDBOX_ERROR = "runtime.SandboxError"
    BAD_ARGUMENT = "runtime.BadArgument"  # its data does not fit its typed function
    KILLED = "runtime.Killed"  # killed on purpose (SIGUSR1 to the master)
    CORRUPT_JOB = "runtime.CorruptJob"  # a record that does not decode
    DEPENDENCY_FAILED = "runtime.DependencyFailed"  # a job it depends on failed for good
    PUT_REFUSED = "runtime.PutRefused"  # a completion whose puts were refused
    LEASE_EXPIRED = "runtime.LeaseExpired"  # its lease expired (reaped, or fenced)
    EXPIRED = "runtime.Expired"  # not started by its expires_in deadline
    RETRY = "runtime.Retry"  # the job raised Retry
    # Not failures: the job goes back to its queue, or is no longer ours.
    LEASE_LOST = "runtime.LeaseLost"
    RELEASED = "runtime.Released"
    CANCELLED = "runtime.Cancelled"


def lua_vocabulary() -> str:
    """The Lua twin: a local per state and per count (`STALLED`), `STORED_STATES`
    (each state a record stores, to its JSON text: a set that replies reuse) and
    a table `GROUP`."""
    words = {**{s.name: s.value for s in JobState}, **{c.name: c.value for c in Count}}
    names = ", ".join(words)
    values = ", ".join(f"'{value}'" for value in words.values())
    stored = ", ".join(f"[{s.name}] = '\"{s.value}\"'" for s in STORED_STATES)
    groups = ", ".join(f"{g.name} = '{g.value}'" for g in FailureGroup)
    return "\n".join(
        (
            f"local {names} = {values}",
            f"local STORED_STATES = {{{stored}}}",
            f"local GROUP = {{{groups}}}",
        )
    )
