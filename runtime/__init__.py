"""runtime: a job runtime for Python on Redis. Public names only.

`Client`, `AsyncClient`, `Queue` and `Lease` load redis: they are imported when first used, so
a pure module of the package (the master's book, the child's protocol) can be
imported without loading redis or asyncio."""

from typing import TYPE_CHECKING, Any

from runtime.children.context import JobContext
from runtime.config import version
from runtime.errors import (
    BadArgument,
    ConfigError,
    DependedOn,
    EmbeddedRedisError,
    Error,
    Fail,
    JobCancelled,
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
from runtime.queue.job import Cancellation, Failure, HistoryEvent, Job
from runtime.queue.wire import JobSpec
from runtime.typed import JobFunction, PutOptions, job
from runtime.vocabulary import CancelledBy

if TYPE_CHECKING:
    from runtime.queue.api.aclient import AsyncClient
    from runtime.queue.api.batches import Batch, BatchStatus
    from runtime.queue.api.client import Client
    from runtime.queue.api.holder import Lease
    from runtime.queue.api.queues import Queue

__version__ = version()
LAZY = {
    "AsyncClient": "runtime.queue.api.aclient",
    "Batch": "runtime.queue.api.batches",
    "BatchStatus": "runtime.queue.api.batches",
    "Client": "runtime.queue.api.client",
    "Queue": "runtime.queue.api.queues",
    "Lease": "runtime.queue.api.holder",
}


def __getattr__(name: str) -> Any:
    """Client, AsyncClient, Queue, Lease and the batch classes, imported on first use
    (PEP 562)."""
    if name not in LAZY:
        raise AttributeError(f"module 'runtime' has no attribute {name!r}")
    import importlib  # noqa: PLC0415 - only when a lazy name is first used

    value = getattr(importlib.import_module(LAZY[name]), name)
    globals()[name] = value
    return value


__all__ = [
    "AsyncClient",
    "BadArgument",
    "Batch",
    "BatchStatus",
    "Cancellation",
    "CancelledBy",
    "Client",
    "ConfigError",
    "DependedOn",
    "EmbeddedRedisError",
    "Error",
    "Fail",
    "Failure",
    "HistoryEvent",
    "Job",
    "JobCancelled",
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
