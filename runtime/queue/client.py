"""Client and Queue: one typed method per script, for applications and tools.

`Client()` reaches Redis at `REDIS_URL` (or the config file), else the
embedded default server (connection.py). Jobs, queues, failures and the lease
holder's reports are here; the scheduler's operations (tags, tracking,
statistics, recurring jobs, domain limits) in scheduling.py. The master uses
the same operations through `runtime.queue.aio.AsyncClient`.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterable, Mapping
from typing import Any

from runtime import config
from runtime.errors import Error, JobExists, JobFailed, WaitTimeout
from runtime.queue import ops, wire
from runtime.queue.connection import default_worker_id, redact, resolve_url, text
from runtime.queue.job import Job
from runtime.queue.leases import CompleteRow, FailRow, ProgressRow, RetryRow
from runtime.queue.ops import Heartbeat
from runtime.queue.scheduling import Scheduling
from runtime.queue.wire import JobSpec
from runtime.vocabulary import JobState

# the helpers of runtime.queue.connection stay importable from here
__all__ = ["Client", "Heartbeat", "Queue", "default_worker_id", "redact", "resolve_url", "text"]

WAIT_SLICE_S = 5.0  # a wait blocks at most this long per round trip (under the socket timeout)
WAIT_MIN_S = 0.001  # BLPOP takes milliseconds (and 0 would wait forever)


class Client(Scheduling):
    """A connection to one deployment (a namespace in one Redis): jobs, queues,
    failures and the lease holder's reports here; tags, tracking, statistics,
    recurring jobs and domain limits in `Scheduling`.

    Redis errors arrive typed (runtime.errors): `RedisTransient` for conditions
    that pass, after retrying calls safe to repeat (reads, put, and the lease
    holder's reports with their token) for up to `retry_for_s` seconds."""

    # --- queues and jobs --------------------------------------------------------

    def queue(self, name: str) -> Queue:
        return Queue(self, wire.check_queue(name))

    def put_many(self, specs: Iterable[JobSpec]) -> list[str]:
        """Puts many jobs in one atomic call; nothing is written if one is bad. A
        put retried after a lost reply that finds its jobs there (JobExists) knows
        its first try landed, and answers their jids."""
        specs = list(specs)
        if not specs:
            return []

        def landed(err: Error) -> list[str] | None:
            return [s.options["jid"] for s in specs] if self._all_put(err, specs) else None

        return self.call(ops.put(specs), landed)

    def _all_put(self, err: Error, specs: list[JobSpec]) -> bool:
        """Whether every job of `specs` exists, as these specs describe it."""
        if not isinstance(err, JobExists):
            return False
        found = self.get_jobs([s.options["jid"] for s in specs])
        return all(
            job is not None and job.klass == spec.klass and job.data == json.loads(spec.data_json)
            for job, spec in zip(found, specs, strict=True)
        )

    def get_job(self, jid: str) -> Job | None:
        return self.get_jobs([jid])[0]

    def get_jobs(self, jids: list[str]) -> list[Job | None]:
        return self.call(ops.get(jids, self)) if jids else []

    def message_status(self, jid: str) -> str | None:
        """queued, queued-with-backoff, locked, locked-with-requeue, done-awaiting-gc,
        done-with-backoff, or None: the job's state as a de-duplicating queue names it."""
        return self.call(ops.message_status(jid))

    def cancel(self, *jids: str) -> list[str]:
        """Deletes the jobs; refuses (DependedOn) while others depend on one of them."""
        return self.call(ops.cancel(jids)) if jids else []

    def depend(self, jid: str, *on: str) -> str:
        """Makes a job that has not run yet wait on more jobs; returns its state."""
        return self.call(ops.depends(jid, "on", on))

    def undepend(self, jid: str, *on: str) -> str:
        """Stops a job waiting on these jobs; with none left it moves on."""
        return self.call(ops.depends(jid, "off", on))

    def wait(self, jid: str, timeout: float | None = None) -> Any:
        """Waits for the job to end and returns its result (None for none). Raises
        JobFailed (with its group and message) if it failed for good, WaitTimeout
        after `timeout` seconds (None: no limit), NoSuchJob if there is no such
        job or it was cancelled. No polling: the script that ends the job wakes
        the waiters (lua/lib/wait.lua); each wake-up and the read of the job go
        in one round trip. The jid a job's duplicate put was given (ctx.put under
        a unique key) waits for the job it was folded into."""
        limit_s = None if timeout is None else wire.check_seconds("timeout", timeout)
        deadline = None if limit_s is None else time.monotonic() + limit_s
        ending = self.call(ops.wait(jid, _ms(_slice_s(deadline))))
        jid = ending.jid or jid
        key = self.keys.waited(jid)
        while not ending.ended:
            block_s = _slice_s(deadline)
            if block_s <= 0:
                raise WaitTimeout(jid, limit_s or 0.0)
            # blocks, then reads the job (and registers for the next slice) at once
            next_s = _slice_s(None if deadline is None else deadline - block_s)
            _, ending = self.calls([ops.wait_for_end(key, round(block_s, 3)),
                                    ops.wait(jid, _ms(next_s))])  # fmt: skip
        if ending.state == JobState.FAILED:
            raise JobFailed(jid, ending.group, ending.message)
        return ending.result

    def requeue(self, jid: str, queue: str | None = None) -> str:
        """Runs a failed, complete or scheduled job again now (retries renewed)."""
        return self.call(ops.requeue(jid, "" if queue is None else wire.check_queue(queue)))

    def set_priority(self, jid: str, priority: int) -> str:
        return self.call(ops.priority(jid, wire.check_priority(priority)))

    def queues(self) -> list[str]:
        return self.call(ops.members(self.keys.key("queues")))

    def status(self, *queues: str) -> dict[str, dict[str, int | bool]]:
        """Counts by state for the queues (all known queues when none are named)."""
        counts: dict[str, dict[str, int | bool]] = self.call(ops.counts(queues))
        return counts

    def progressing(self, *queues: str, count: int = 10) -> list[Job]:
        """Running jobs that told their progress (job.progress), the latest told
        first, at most `count` per queue (all known queues when none are named)."""
        names = [wire.check_queue(q) for q in queues] or self.queues()
        if not names:
            return []
        keys = [self.keys.key("progressing", queue=q) for q in names]
        pages = self.calls([ops.members(k, 0, count - 1, newest_first=True) for k in keys])
        found = [j for j in self.get_jobs([jid for page in pages for jid in page]) if j]
        running = [j for j in found if j.state == JobState.RUNNING and j.progress is not None]
        return sorted(running, key=lambda j: -int((j.progress or {}).get("at_ms") or 0))

    def workers(self) -> dict[str, dict[str, Any]]:
        return self.call(ops.workers())

    # --- failures ---------------------------------------------------------------

    def failed(self) -> dict[str, int]:
        """Failed jobs by group: {group: count}."""
        return self.call(ops.failed_groups())

    def failed_jobs(self, group: str, start: int = 0, count: int = 25) -> tuple[int, list[Job]]:
        """(how many failed in `group`, a page of them, newest first)."""
        return self.call(ops.failed_jobs(group, start, count, self))

    def unfail(self, group: str, queue: str | None, count: int = 25) -> int:
        """Moves up to `count` failed jobs of `group` back to `queue` (None: each to
        its own), oldest first."""
        return self.call(ops.unfail(group, "" if queue is None else wire.check_queue(queue), count))

    # --- the lease holder's side (a master, or a script popping by hand) --------

    def heartbeat(
        self, worker: str, leases: Mapping[str, str], *, strict: bool = False
    ) -> Heartbeat:
        """Renews leases {jid: token}; with strict, a lost one raises LeaseLost."""
        result = self.call(ops.heartbeat(worker, leases))
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
        pairs = [spec.to_wire() for spec in puts]
        options = wire.complete_options(next, delay, depends, None, pairs)
        row = CompleteRow(jid, token, options, wire.result_json(result), output)
        return _single(self.call(ops.complete(worker, [row])), jid)

    def complete_many(self, worker: str, leases: Mapping[str, str]) -> dict[str, str | Error]:
        """Completes many leased jobs {jid: token} in one call: {jid: state or error}."""
        rows = [CompleteRow(jid, token, "{}", "", "") for jid, token in leases.items()]
        return self.call(ops.complete(worker, rows)) if rows else {}

    def fail(
        self, jid: str, worker: str, token: str, group: str, message: str, *, output: str = ""
    ) -> str:
        return _single(
            self.call(ops.fail(worker, [FailRow(jid, token, group, message, output)])), jid
        )

    def progress(
        self, jid: str, worker: str, token: str, done: float, total: float | None = None,
        message: str | None = None,
    ) -> str:  # fmt: skip
        """Tells a leased job's progress (stored on it, published if it is tracked)."""
        total = None if total is None else wire.check_progress(total)
        row = ProgressRow(jid, token, wire.check_progress(done), total, message)
        return _single(self.call(ops.progress(worker, [row])), jid)

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
        return _single(self.call(ops.retry(worker, [row])), jid)

    def release(self, jid: str, worker: str, token: str) -> str:
        """Gives a leased job back unfinished (not an attempt: its retries are kept)."""
        return _single(self.call(ops.release(worker, {jid: token})), jid)

    # --- settings -----------------------------------------------------------------

    def config_get(self) -> dict[str, float]:
        """Every shared setting: the defaults, overlaid with what is set in Redis."""
        values = {name: s.default for name, s in config.SHARED.items()}
        for name, raw in self.call(ops.hash_of(self.keys.key("config"))).items():
            values[name] = float(raw)
        return values

    def config_set(self, name: str, value: str | float) -> float:
        parsed = config.shared_setting(name).parse(value)
        self.call(ops.set_setting(self.keys, name, repr(parsed)))
        return parsed

    def config_unset(self, name: str) -> None:
        config.shared_setting(name)
        self.call(ops.unset_setting(self.keys, name))


class Queue:
    """A named queue of one deployment; created on first use."""

    def __init__(self, client: Client, name: str) -> None:
        self.client = client
        self.name = name

    def __repr__(self) -> str:
        return f"Queue({self.name!r})"

    def put(
        self,
        klass: str | Any,
        data: Mapping[str, Any] | None = None,
        *,
        priority: int = 0,
        delay: float = 0,
        at: Any = None,
        tags: Iterable[str] = (),
        retries: int = config.DEFAULT_RETRIES,
        depends: Iterable[str] = (),
        domain: str | None = None,
        unique_key: str | None = None,
        unique_for: float | None = None,
        requeue_if_running: bool = False,
        jid: str | None = None,
        backoff: tuple[float, float] | None = None,
        timeout: float | None = None,
        tracked: bool = False,
    ) -> str:
        """Puts one job; returns its jid (or, for a duplicate of a unique key, the jid
        of the job holding that key)."""
        spec = JobSpec.build(
            self.name, klass, data, priority=priority, delay=delay, at=at, tags=tags,
            retries=retries, depends=depends, domain=domain, unique_key=unique_key,
            unique_for=unique_for, requeue_if_running=requeue_if_running,
            jid=jid, backoff=backoff, timeout=timeout, tracked=tracked,
        )  # fmt: skip
        return self.client.put_many([spec])[0]

    def spec(self, klass: str | Any, data: Mapping[str, Any] | None = None, **opts: Any) -> JobSpec:
        """A job for `Client.put_many` (same options as `put`)."""
        return JobSpec.build(self.name, klass, data, **opts)

    def pop(self, count: int = 1, worker: str | None = None) -> list[Job]:
        """Leases up to `count` jobs to `worker` (default: this process)."""
        worker = worker or default_worker_id()
        return self.client.call(ops.pop_jobs(worker, count, self.name, self.client))

    def peek(self, count: int = 10) -> list[Job]:
        return self.client.call(ops.peek(self.name, count, self.client))

    def counts(self) -> dict[str, int | bool]:
        return self.client.status(self.name)[self.name]

    def pause(self) -> None:
        self.client.call(ops.set_paused(self.name, True))

    def resume(self) -> None:
        self.client.call(ops.set_paused(self.name, False))


def _slice_s(deadline: float | None) -> float:
    """How long the next blocking read of a wait may last: WAIT_SLICE_S at most,
    0 once less than WAIT_MIN_S is left before `deadline` (monotonic)."""
    if deadline is None:
        return WAIT_SLICE_S
    left_s = min(WAIT_SLICE_S, deadline - time.monotonic())
    return left_s if left_s >= WAIT_MIN_S else 0.0


def _ms(seconds: float) -> int:
    return math.ceil(seconds * 1000)


def _single(states: dict[str, str | Error], jid: str) -> str:
    """The state of the one job of a report, or its error raised."""
    state = states[jid]
    if isinstance(state, Error):
        raise state
    return state
