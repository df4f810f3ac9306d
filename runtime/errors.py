"""The one exception hierarchy of runtime, and the map from Lua error codes to it.

Every error runtime raises on purpose derives from `Error`. Scripts fail with a
code from the closed list in `LUA_ERROR_CODES`; `runtime.queue.scripts` turns the
code into the class registered here, so a caller never parses Redis messages.

`Retry` is not an error: a job raises it to ask for another attempt.
"""

from __future__ import annotations


class Error(Exception):
    """Base class of every error runtime raises on purpose."""


class BadArgument(Error, ValueError):
    """An argument is malformed or out of range; nothing was written."""


class NoSuchJob(Error, LookupError):
    """The job id names no job (never put, cancelled, or removed by retention)."""


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
    """Redis cannot be reached, or refused our credentials."""


class EmbeddedRedisError(Error):
    """The embedded default Redis could not be found or started."""


class KlassNotAllowed(Error):
    """A job's klass lies outside the worker's allow-listed modules."""


class KlassNotFound(Error):
    """A job's klass is allowed but cannot be imported or found."""


class ProtocolError(Error):
    """A message on a master-child pipe was malformed or too large."""


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


# The closed list of error codes a script may raise, and the class each becomes.
LUA_ERROR_CODES: dict[str, type[Error]] = {
    "BAD_ARG": BadArgument,
    "NO_SUCH_JOB": NoSuchJob,
    "LEASE_LOST": LeaseLost,
    "JOB_EXISTS": JobExists,
    "WRONG_STATE": WrongState,
    "DEPENDED_ON": DependedOn,
}
