"""runtime: a job runtime for Python on Redis. Public names only."""

from runtime.children.context import JobContext
from runtime.config import version
from runtime.errors import (
    BadArgument,
    ConfigError,
    DependedOn,
    EmbeddedRedisError,
    Error,
    Fail,
    JobExists,
    JobFailed,
    KlassNotAllowed,
    LeaseLost,
    NoSuchJob,
    RedisUnavailable,
    Retry,
    WaitTimeout,
    WrongState,
)
from runtime.queue.client import Client, Queue
from runtime.queue.holder import Lease
from runtime.queue.job import Failure, HistoryEvent, Job
from runtime.queue.wire import JobSpec
from runtime.typed import JobFunction, PutOptions, job

__version__ = version()

__all__ = [
    "BadArgument",
    "Client",
    "ConfigError",
    "DependedOn",
    "EmbeddedRedisError",
    "Error",
    "Fail",
    "Failure",
    "HistoryEvent",
    "Job",
    "JobContext",
    "JobExists",
    "JobFailed",
    "JobFunction",
    "JobSpec",
    "KlassNotAllowed",
    "Lease",
    "LeaseLost",
    "NoSuchJob",
    "PutOptions",
    "Queue",
    "RedisUnavailable",
    "Retry",
    "WaitTimeout",
    "WrongState",
    "__version__",
    "job",
]
