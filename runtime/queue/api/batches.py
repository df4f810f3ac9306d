"""Batches: a set of jobs tracked together, with a callback job put once when
all have ended (`on_complete`) and once when all have completed (`on_success`).

    b = client.batch(on_success=("reports", "myapp.jobs:mail_report", {}))
    b.queue("pages").put("myapp.jobs:render", {"page": 1})
    b.put_many([render.spec(page=n) for n in range(2, 10)])
    b.close()                    # sealed: the callbacks may fire from now on
    client.get_batch(b.bid)      # BatchStatus: total, pending, completed, failed ...

The counting lives in the scripts (lua/lib/batch.lua), in the same step that
ends each job; this module only shapes the calls (runtime.queue.ops) and
their replies, so an asyncio client can offer the same over its own driver.
docs/writing-jobs.md ("Batches") says what is guaranteed.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from runtime import config
from runtime.errors import BadArgument, CorruptReply
from runtime.queue import ops, wire
from runtime.queue.wire import JobSpec

T = TypeVar("T")


class Conn(Protocol):
    def call(self, call: ops.Call[T]) -> T: ...


class Client(Protocol):
    """What a batch needs of its client (runtime.queue.api.client.Client)."""

    @property
    def conn(self) -> Conn: ...
    def put_many(self, specs: Iterable[JobSpec]) -> list[str]: ...
    def get_batch(self, bid: str) -> BatchStatus | None: ...


# What a callback is given as: (queue, klass, data), or a typed job's spec.
Callback = tuple[str, Any, Mapping[str, Any] | None] | JobSpec
# The fields the batch adds to a callback's data.
GIVEN = ("bid", "total", "completed", "failed")
FAILED_LISTED = 100  # failed jids a status lists


def callback_wire(what: str, callback: Callback | None) -> list[str]:
    """A callback as batch_open.lua takes it: [spec JSON, data JSON], or ["", ""]."""
    if callback is None:
        return ["", ""]
    if isinstance(callback, JobSpec):
        spec = callback
    elif isinstance(callback, tuple) and len(callback) == 3:
        queue, klass, data = callback
        spec = JobSpec.build(queue, klass, data)
    else:
        raise BadArgument(f"{what} must be (queue, klass, data) or a typed job's spec")
    if spec.options.get("batch") is not None or spec.options.get("depends"):
        raise BadArgument(f"{what} cannot be in a batch or depend on jobs")
    taken = sorted(set(GIVEN) & set(json.loads(spec.data_json)))
    if taken:
        raise BadArgument(f"{what} data cannot hold {', '.join(taken)}: the batch gives them")
    return spec.to_wire()


def in_batch(spec: JobSpec, bid: str) -> JobSpec:
    """`spec` as a job of the batch `bid`."""
    if not isinstance(spec, JobSpec):
        raise BadArgument(f"a batch puts JobSpecs (Queue.spec, a typed job's spec), got {spec!r}")
    return spec.in_batch(bid)


@dataclass(frozen=True)
class BatchStatus:
    """A batch as stored: its counts (pending = total - completed - failed;
    cancelled jobs count as failed and in `cancelled`), whether it is sealed,
    and its callbacks' jids once put. Times in ms since the epoch (Redis)."""

    bid: str
    description: str
    total: int
    pending: int
    completed: int
    failed: int
    cancelled: int
    sealed: bool
    created_ms: int
    sealed_ms: int | None
    settled_ms: int | None  # when it last had nothing pending after being sealed
    has_on_success: bool
    has_on_complete: bool
    success_jid: str | None
    complete_jid: str | None
    success_error: str | None  # why a callback could not be put (its spec no longer passed)
    complete_error: str | None
    failed_jids: tuple[str, ...]  # the failed jobs that still exist (at most FAILED_LISTED)
    ttl_ms: int  # -1 while kept; else how long until the record expires

    @property
    def open(self) -> bool:
        """Not settled: jobs pending, or not sealed yet."""
        return self.settled_ms is None

    @classmethod
    def from_reply(cls, value: Mapping[str, Any]) -> BatchStatus:
        return cls(
            bid=str(value["bid"]),
            description=str(value["description"]),
            total=int(value["total"]),
            pending=int(value["pending"]),
            completed=int(value["completed"]),
            failed=int(value["failed"]),
            cancelled=int(value["cancelled"] or 0),
            sealed=bool(value["sealed"]),
            created_ms=int(value["created_ms"]),
            sealed_ms=_int(value["sealed_ms"]),
            settled_ms=_int(value["settled_ms"]),
            has_on_success=bool(value["on_success"]),
            has_on_complete=bool(value["on_complete"]),
            success_jid=value["success_jid"],
            complete_jid=value["complete_jid"],
            success_error=value["success_error"],
            complete_error=value["complete_error"],
            failed_jids=tuple(map(str, value["failed_jids"])),
            ttl_ms=int(value["ttl_ms"]),
        )

    def as_dict(self) -> dict[str, Any]:
        """For JSON output (CLI, dashboard)."""
        return {name: getattr(self, name) for name in self.__dataclass_fields__} | {
            "failed_jids": list(self.failed_jids)
        }


def _int(value: Any) -> int | None:
    return None if value is None else int(value)


def status_call(bid: str, failed_max: int = FAILED_LISTED) -> ops.Call[BatchStatus | None]:
    """The call reading a batch (shared by every client)."""
    call = ops.batch_get(bid, failed_max)
    return ops.Call(call.name, call.args, lambda r: _status(call.read(r)), repeatable=True)


def _status(value: Any) -> BatchStatus | None:
    return None if value is None else BatchStatus.from_reply(value)


def open_call(
    on_success: Callback | None, on_complete: Callback | None, description: str | None
) -> tuple[str, ops.Call[None]]:
    """A new bid and the call that creates its batch."""
    desc = "" if description is None else wire.cap_head(str(description), _DESC_MAX)
    bid = os.urandom(16).hex()
    call = ops.batch_open(
        bid, desc, callback_wire("on_success", on_success),
        callback_wire("on_complete", on_complete),
    )  # fmt: skip
    return bid, call


_DESC_MAX = config.LIMITS["note_max_bytes"]


def close_call(bid: str) -> ops.Call[BatchStatus]:
    """The call sealing a batch (shared by every client); it answers the batch."""
    call = ops.batch_close(bid)
    return ops.Call(
        call.name, call.args, lambda r: _sealed(call.read(r)), repeatable=call.repeatable
    )


def _sealed(value: Any) -> BatchStatus:
    status = _status(value)
    if status is None:  # batch_close answers the batch or raises
        raise CorruptReply("batch_close answered no batch")
    return status


class Batch:
    """A batch being filled (`Client.batch`): put its jobs, then `close()` it."""

    def __init__(self, client: Client, bid: str) -> None:
        self.client = client
        self.bid = bid

    def __repr__(self) -> str:
        return f"Batch({self.bid!r})"

    def queue(self, name: str) -> BatchQueue:
        return BatchQueue(self, wire.check_queue(name))

    def put_many(self, specs: Iterable[JobSpec]) -> list[str]:
        """Puts jobs into the batch in one atomic call (all or none); their jids."""
        return self.client.put_many([in_batch(spec, self.bid) for spec in specs])

    def close(self) -> BatchStatus:
        """Seals the batch: no job joins it after, but from its own running jobs
        (ctx.batch.put); its callbacks fire once all its jobs have ended (at once,
        in this call, if they all have). Closing again changes nothing."""
        return self.client.conn.call(close_call(self.bid))

    def status(self) -> BatchStatus | None:
        return self.client.get_batch(self.bid)

    def __enter__(self) -> Batch:
        return self

    def __exit__(self, exc_type: object, *rest: object) -> None:
        if exc_type is None:
            self.close()


class BatchQueue:
    """A queue of the batch: what it puts joins the batch (Queue.put's options)."""

    def __init__(self, batch: Batch, name: str) -> None:
        self.batch = batch
        self.name = name

    def __repr__(self) -> str:
        return f"BatchQueue({self.batch.bid!r}, {self.name!r})"

    def spec(self, klass: str | Any, data: Mapping[str, Any] | None = None, **opts: Any) -> JobSpec:
        return in_batch(JobSpec.build(self.name, klass, data, **opts), self.batch.bid)

    def put(self, klass: str | Any, data: Mapping[str, Any] | None = None, **opts: Any) -> str:
        """Puts one job into the batch; returns its jid."""
        return self.batch.put_many([JobSpec.build(self.name, klass, data, **opts)])[0]
