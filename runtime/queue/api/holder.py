"""The lease holder's side, for workers and tools that pop by hand: `Leases`
(the part of `Client` at `client.leases`) sends the reports a holder makes,
and a `Lease` is the handle a pop returns: the popped `Job` value with the
worker and token that hold it, and the reports made on it.

Applications never need these: the master holds the leases of the jobs it
runs (through runtime.queue.aio). Every report is fenced by Redis: from anyone
but the holder, or after the lease was lost, it raises `LeaseLost` and changes
nothing (lua/lib/lease.lua).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from runtime.errors import Error, WrongState
from runtime.queue import ops, recur, wire
from runtime.queue.connection import Connection, default_worker_id
from runtime.queue.job import Job
from runtime.queue.leases import CompleteRow, FailRow, ProgressRow, RetryRow
from runtime.queue.ops import Heartbeat
from runtime.queue.wire import JobSpec


class Leases:
    """The lease holder's calls over a client's connection: pop, heartbeat and
    the reports (complete, fail, retry, progress, release), plus what a master
    tells of itself."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def pop(self, queue: str, count: int = 1, worker: str | None = None) -> list[Lease]:
        """Leases up to `count` jobs of `queue` to `worker` (default: this process)."""
        worker = worker or default_worker_id()
        jobs = self.conn.call(ops.pop_jobs(worker, count, wire.check_queue(queue)))
        return [Lease(job, worker, token, self) for job, token in jobs]

    def heartbeat(
        self, worker: str, leases: Mapping[str, str], *, strict: bool = False
    ) -> Heartbeat:
        """Renews leases {jid: token}; with strict, a lost one raises LeaseLost."""
        result = self.conn.call(ops.heartbeat(worker, leases))
        if strict and result.lost:
            wire.raise_lost(result.lost)
        return result

    def complete(
        self,
        jid: str,
        worker: str,
        token: str,
        *,
        next: str | None = None,
        delay: float | None = None,
        depends: Iterable[str] = (),
        result: Any = None,
        output: str = "",
        puts: Iterable[JobSpec] = (),
    ) -> str:
        """Completes a leased job: with `next`, it moves on to that queue instead.
        `result`: its return value (JSON; None for none), `output`: its output,
        `puts`: jobs put in the same step (all or none)."""
        puts = list(puts)
        shard = self.conn.keys.namespace
        for queue in [*([next] if next else []), *(spec.queue for spec in puts)]:
            self.conn.shards.check(shard, queue, "a job completed")
        pairs = [spec.to_wire() for spec in puts]
        options = wire.complete_options(next, delay, depends, None, pairs)
        row = CompleteRow(jid, token, options, wire.result_json(result), output)
        return _single(self.conn.call(ops.complete(worker, [row])), jid)

    def complete_many(self, worker: str, leases: Mapping[str, str]) -> dict[str, str | Error]:
        """Completes many leased jobs {jid: token} in one call: {jid: state or error}."""
        rows = [CompleteRow(jid, token, "{}", "", "") for jid, token in leases.items()]
        return self.conn.call(ops.complete(worker, rows)) if rows else {}

    def fail(
        self, jid: str, worker: str, token: str, group: str, message: str, *, output: str = ""
    ) -> str:
        row = FailRow(jid, token, group, message, output)
        return _single(self.conn.call(ops.fail(worker, [row])), jid)

    def progress(
        self,
        jid: str,
        worker: str,
        token: str,
        done: float,
        total: float | None = None,
        message: str | None = None,
    ) -> str:
        """Tells a leased job's progress (stored on it, published if it is tracked)."""
        total = None if total is None else wire.check_progress(total)
        row = ProgressRow(jid, token, wire.check_progress(done), total, message)
        return _single(self.conn.call(ops.progress(worker, [row])), jid)

    def retry(
        self,
        jid: str,
        worker: str,
        token: str,
        group: str,
        message: str,
        *,
        delay: float | None = None,
        output: str = "",
    ) -> str:
        row = RetryRow(jid, token, group, message, wire.delay_ms(delay), output)
        return _single(self.conn.call(ops.retry(worker, [row])), jid)

    def release(self, jid: str, worker: str, token: str) -> str:
        """Gives a leased job back unfinished (not an attempt: its retries are kept)."""
        return _single(self.conn.call(ops.release(worker, {jid: token})), jid)

    def register_worker(
        self,
        worker: str,
        *,
        host: str,
        pid: int,
        queues: Sequence[str],
        concurrency: int,
        started_ms: int | None = None,
    ) -> None:
        """What a master tells of itself (the master sends it; also for tools and tests)."""
        told = ops.register_worker(
            worker,
            host=host,
            pid=pid,
            queues=queues,
            concurrency=concurrency,
            started_ms=started_ms,
        )
        self.conn.call(told)

    def extend_recurrence(self, id: str, cron: str, tz: str, after_ms: int) -> int:
        """Adds the next cron ticks of a recurrence running low (masters do this)."""
        return self.conn.call(ops.recur_ticks(id, cron, recur.cron_ticks(cron, tz, after_ms)))


@dataclass(frozen=True)
class Lease:
    """A popped job and the lease on it: `job` (the value as popped), `worker` and
    `token` (who holds it). Its reports go through the client's connection."""

    job: Job
    worker: str
    token: str
    holder: Leases = field(repr=False, compare=False)

    @property
    def jid(self) -> str:
        return self.job.jid

    def _checked(self) -> tuple[str, str]:
        if not self.token:
            raise WrongState(f"job {self.jid} carries no lease token")
        return self.worker, self.token

    def heartbeat(self) -> None:
        """Renews this lease; raises LeaseLost if it is gone."""
        worker, token = self._checked()
        self.holder.heartbeat(worker, {self.jid: token}, strict=True)

    def complete(
        self,
        next: str | None = None,
        delay: float | None = None,
        depends: Iterable[str] = (),
        *,
        result: Any = None,
    ) -> str:
        worker, token = self._checked()
        return self.holder.complete(
            self.jid, worker, token, next=next, delay=delay, depends=depends, result=result
        )

    def fail(self, group: str, message: str) -> str:
        worker, token = self._checked()
        return self.holder.fail(self.jid, worker, token, group, message)

    def retry(self, group: str, message: str, delay: float | None = None) -> str:
        worker, token = self._checked()
        return self.holder.retry(self.jid, worker, token, group, message, delay=delay)

    def release(self) -> str:
        """Gives the job back unfinished (its retries are kept)."""
        worker, token = self._checked()
        return self.holder.release(self.jid, worker, token)


def _single(states: dict[str, str | Error], jid: str) -> str:
    """The state of the one job of a report, or its error raised."""
    state = states[jid]
    if isinstance(state, Error):
        raise state
    return state
