"""The words Python and Lua share: job states and runtime's failure groups.

Spelled once, here. `runtime.queue.scripts` generates them into the Lua prelude
(`lua_vocabulary`), the way `keys.py` renders the key schema: each state a
local of the same name as its member (`WAITING`, compared as `meta.s ==
WAITING`), the groups a table `GROUP` (`GROUP.CORRUPT_JOB`): reading a local
costs a comparison nothing more than the literal did. Neither Python
nor Lua spells a state or a group as a quoted literal anywhere else;
tests/unit/test_vocabulary.py greps for them.

The members are `StrEnum`s: they compare, hash and serialize as the very strings
docs/semantics.md names (*States*, *Counts*, *Failure groups*), so
`job.state == "waiting"` and the keys of `counts()` stay what users know.

Not here: `message_status` answers (queued, locked ...) are another vocabulary,
that of a message queue (docs/semantics.md, *Message status*), and share no
word with these. Neither do the history events (put, popped, failed ...), the
kinds of a lease report (complete, retry, fail, release) or the operations'
names, though some are spelled like a state: those are named where they are
defined.

A pure module: it imports nothing from runtime.
"""

from __future__ import annotations

from enum import StrEnum


class JobState(StrEnum):
    """A job's state (docs/semantics.md, *States*). A stored job is in one of them
    except THROTTLED, which a reader sees for a waiting job whose domain is over
    its limit. CANCELLED is a tombstone: what is left of a job cancelled before it
    ended (when, by what), its data gone, kept for the retention window."""

    SCHEDULED = "scheduled"
    WAITING = "waiting"
    RUNNING = "running"
    COMPLETE = "complete"
    FAILED = "failed"
    DEPENDS = "depends"
    THROTTLED = "throttled"
    CANCELLED = "cancelled"


# The states stored in a job's record (meta.s).
STORED_STATES = tuple(s for s in JobState if s is not JobState.THROTTLED)
# The states a job has ended in.
ENDED_STATES = (JobState.COMPLETE, JobState.FAILED, JobState.CANCELLED)
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
    JobState.CANCELLED,
)


class CancelledBy(StrEnum):
    """What cancelled a job, as its tombstone tells (`Job.cancellation.by`)."""

    CLI = "cli"  # runtime cancel
    DASHBOARD = "dashboard"
    API = "api"  # Client.cancel, the default
    DEPENDENCY = "dependency"  # a job it depends on failed, and its caller cancelled it


class Count(StrEnum):
    """The keys of a queue's counts (`counts()`, docs/semantics.md, *Counts*), in
    the order they are shown: the states, and STALLED (running jobs whose lease has expired and that
    no pop has taken back yet; counted apart from RUNNING, not a state)."""

    WAITING = JobState.WAITING.value
    THROTTLED = JobState.THROTTLED.value
    SCHEDULED = JobState.SCHEDULED.value
    RUNNING = JobState.RUNNING.value
    STALLED = "stalled"
    DEPENDS = JobState.DEPENDS.value
    COMPLETE = JobState.COMPLETE.value
    FAILED = JobState.FAILED.value
    CANCELLED = JobState.CANCELLED.value  # tombstones still kept by retention


class FailureGroup(StrEnum):
    """The groups runtime files a job's failed attempt under (docs/semantics.md,
    *Failure groups*), besides the class paths of the exceptions jobs raise. An
    attempt that ends in a group of the last block is not a failure: its job
    goes back to its queue or is gone, and the group only names why in the
    master's log."""

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
    (each state a record stores, to its JSON text: a set that replies reuse), a
    table `GROUP` and the set `CANCELLED_BY` (what may cancel a job)."""
    words = {**{s.name: s.value for s in JobState}, **{c.name: c.value for c in Count}}
    names = ", ".join(words)
    values = ", ".join(f"'{value}'" for value in words.values())
    stored = ", ".join(f"[{s.name}] = '\"{s.value}\"'" for s in STORED_STATES)
    groups = ", ".join(f"{g.name} = '{g.value}'" for g in FailureGroup)
    by = ", ".join(f"['{b.value}'] = true" for b in CancelledBy)
    return "\n".join(
        (
            f"local {names} = {values}",
            f"local STORED_STATES = {{{stored}}}",
            f"local GROUP = {{{groups}}}",
            f"local CANCELLED_BY = {{{by}}}",
        )
    )
