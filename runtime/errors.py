"""The one exception hierarchy of runtime, and the map from Lua error codes to it.

Every error runtime raises on purpose derives from `Error`. Scripts fail with a
code from the closed list in `LUA_ERROR_CODES`; `runtime.queue.scripts` turns the
code into the class registered here, so a caller never parses Redis messages.

`Retry` and `Fail` are not errors of runtime: a job raises `Retry` to ask for
another attempt and `Fail` to fail at once, spending no retries.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from runtime.vocabulary import FailureGroup


class Error(Exception):
    """Base class of every error runtime raises on purpose."""


class BadArgument(Error, ValueError):
    """An argument is malformed or out of range; nothing was written."""


class CrossShard(BadArgument):
    """What cannot cross a shard of a sharded site (runtime.queue.shards): a job
    put, moved on (`next=`) or depending across two namespaces; nothing was written."""


class NoSuchJob(Error, LookupError):
    """The job id names no job (never put, cancelled, or removed by retention)."""


class JobCancelled(NoSuchJob):
    """The job waited for (`Client.wait`) was cancelled: its tombstone says when
    (`at_ms`, Redis time) and by what (`by`: cli, dashboard, api, dependency). A
    NoSuchJob, as a wait for a cancelled job raised before tombstones were kept."""

    def __init__(self, jid: str, at_ms: int, by: str) -> None:
        super().__init__(f"job {jid} was cancelled (by {by})")
        self.jid = jid
        self.at_ms = at_ms
        self.by = by


class LeaseLost(Error):
    """The caller does not hold the job's lease (wrong worker or token, or it expired)."""


class JobExists(Error):
    """A job with this jid already exists; nothing was written."""


class WrongState(Error):
    """The job is not in a state that allows this operation."""


class DependedOn(Error):
    """Other jobs depend on this one; cancel them with it or not at all."""


class ConfigError(Error):
    """A configuration value is unknown or malformed."""


class RedisUnavailable(Error):
    """Redis cannot be reached, or refused our credentials or a right we need (ACL)."""


class RedisCondition(StrEnum):
    """Why Redis cannot serve us right now: conditions that pass on their own."""

    CONNECTION = "connection"  # refused, reset, closed
    TIMEOUT = "timeout"  # no answer within the command timeout (half-open, overloaded)
    BUSY = "busy"  # a script or function runs past busy-reply-threshold
    LOADING = "loading"  # the dataset is being loaded (restart, replica sync)
    READONLY = "readonly"  # a replica now (failover, demotion)
    MASTERDOWN = "masterdown"  # a replica that lost its master, serving no stale data
    TRYAGAIN = "tryagain"  # cluster: keys of the slot are moving
    CLUSTERDOWN = "clusterdown"  # cluster: the slot is not served
    MOVED = "moved"  # cluster: the slot's owner changed again and again within one call
    NOREPLICAS = "noreplicas"  # writes refused: too few replicas (min-replicas-to-write)
    OOM = "oom"  # writes refused above maxmemory (noeviction)
    SCRIPTS = "scripts"  # our functions or scripts are gone and cannot be loaded now


# What a failed call to Redis is told under, in one word: a condition that passes,
# or "error" (anything else: the call is tried again all the same).
Condition = RedisCondition | Literal["error"]


class RedisTransient(RedisUnavailable):
    """Redis cannot serve us now, for a reason that passes (`condition`): back off
    and try again; nothing has changed if the call was refused."""

    def __init__(self, condition: RedisCondition, message: str) -> None:
        super().__init__(message)
        self.condition = condition


class RedisCommandError(Error):
    """Redis refused a command for a reason that does not pass (a bug, a module
    missing, a wrong server): retrying the same call fails the same way."""


class CorruptReply(Error):
    """A reply (or a job in it) does not decode: a data error about that reply or
    job (`jid` when it is known), not about the connection."""

    def __init__(self, message: str, jid: str | None = None) -> None:
        super().__init__(message)
        self.jid = jid


class JobFailed(Error):
    """The job waited for (`Client.wait`) failed for good: its failure `group` and
    `message` (the traceback, or why it failed), and its `jid`."""

    def __init__(self, jid: str, group: str, message: str) -> None:
        last = (message.strip().splitlines() or [""])[-1]
        super().__init__(
            f"job {jid} failed ({group}): {last}" if last else f"job {jid} failed ({group})"
        )
        self.jid = jid
        self.group = group
        self.message = message


class WaitTimeout(Error, TimeoutError):
    """The job waited for (`Client.wait`) did not end within the timeout; it goes on."""

    def __init__(self, jid: str, timeout_s: float) -> None:
        super().__init__(f"job {jid} did not end within {timeout_s:g} s")
        self.jid = jid
        self.timeout_s = timeout_s


class EmbeddedRedisError(Error):
    """The embedded default Redis could not be found or started."""


class KlassNotAllowed(Error):
    """A job's klass lies outside the worker's allow-listed modules."""


class KlassNotFound(Error):
    """A job's klass is allowed but cannot be imported or found."""


class ProtocolError(Error):
    """A message on a master-child pipe or a fork server's socket was malformed or too large."""


class SandboxError(Error):
    """One step of building a child's sandbox failed."""

    def __init__(self, step: str, cause: BaseException | str) -> None:
        super().__init__(f"sandbox step {step!r} failed: {cause}")
        self.step = step
        self.cause = cause


class Retry(Exception):
    """Raised by a job to be retried after `delay` seconds (counts against its retries)."""

    def __init__(self, delay: float | None = None, reason: str = "") -> None:
        super().__init__(reason or f"retry requested (delay={delay})")
        self.delay = delay
        self.reason = reason


class Fail(Exception):
    """Raised by a job to fail at once, spending no retries: a permanent error (a 404,
    an address that does not exist). Its failure group is `group`, else runtime.Fail."""

    def __init__(self, message: str, *, group: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.group: str = group or FailureGroup.FAIL


# The closed list of error codes a script may raise, and the class each becomes.
LUA_ERROR_CODES: dict[str, type[Error]] = {
    "BAD_ARG": BadArgument,
    "NO_SUCH_JOB": NoSuchJob,
    "LEASE_LOST": LeaseLost,
    "JOB_EXISTS": JobExists,
    "WRONG_STATE": WrongState,
    "DEPENDED_ON": DependedOn,
}
