"""runtime: a job runtime for Python on Redis. Public names only."""

from runtime.errors import (
    BadArgument,
    ConfigError,
    DependedOn,
    EmbeddedRedisError,
    Error,
    JobExists,
    KlassNotAllowed,
    LeaseLost,
    NoSuchJob,
    RedisUnavailable,
    Retry,
    WrongState,
)
from runtime.queue.client import Client, Queue
from runtime.queue.job import Failure, HistoryEvent, Job
from runtime.queue.wire import JobSpec

__all__ = [
    "BadArgument",
    "Client",
    "ConfigError",
    "DependedOn",
    "EmbeddedRedisError",
    "Error",
    "Failure",
    "HistoryEvent",
    "Job",
    "JobExists",
    "JobSpec",
    "KlassNotAllowed",
    "LeaseLost",
    "NoSuchJob",
    "Queue",
    "RedisUnavailable",
    "Retry",
    "WrongState",
]
