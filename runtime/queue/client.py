"""Client and Queue: what an application needs, over one connection.

`Client()` reaches Redis at `REDIS_URL` (or the config file), else the
embedded default server (connection.py). Its own methods are an application's:
queues and putting jobs, reading, waiting for and cancelling them, the counts
of queues, failures by group, domain limits. The rest is in parts sharing its
one `Connection` (`client.conn`):

    client.admin       operating reads and bulk actions (runtime.queue.admin)
    client.scheduling  dependencies, priority, tags, tracking, recurring jobs,
                       domain limits (runtime.queue.scheduling)
    client.leases      the lease holder's side: pop, heartbeat, reports
                       (runtime.queue.holder); a pop returns `Lease` handles

A `Job` is a plain value (runtime.queue.job). The master uses the same
operations through `runtime.queue.aio.AsyncClient`.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterable, Mapping
from typing import Any, Self

import redis

from runtime import config
from runtime.errors import Error, JobExists, JobFailed, WaitTimeout
from runtime.queue import ops, wire
from runtime.queue.admin import Admin
from runtime.queue.connection import RETRY_FOR_S, Connection
from runtime.queue.holder import Lease, Leases
from runtime.queue.job import Job
from runtime.queue.keys import Keys
from runtime.queue.scheduling import Scheduling
from runtime.queue.wire import JobSpec
from runtime.vocabulary import JobState

WAIT_SLICE_S = 5.0  # a wait blocks at most this long per round trip (under the socket timeout)
WAIT_MIN_S = 0.001  # BLPOP takes milliseconds (and 0 would wait forever)


class Client:
    """A connection to one deployment (a namespace in one Redis), made of parts:
    jobs, queues and failures here; `admin`, `scheduling` and `leases` beside.

    Redis errors arrive typed (runtime.errors): `RedisTransient` for conditions
    that pass, after retrying calls safe to repeat (reads, put, and the lease
    holder's reports with their token) for up to `retry_for_s` seconds."""

    def __init__(
        self,
        url: str | None = None,
        *,
        namespace: str | None = None,
        settings: config.Settings | None = None,
        retry_for_s: float = RETRY_FOR_S,
        **redis_kwargs: Any,
    ) -> None:
        conn = Connection(
            url, namespace=namespace, settings=settings, retry_for_s=retry_for_s, **redis_kwargs
        )
        self.conn = conn
        self.admin = Admin(conn)
        self.scheduling = Scheduling(conn)
        self.leases = Leases(conn)

    @classmethod
    def from_url(cls, url: str, namespace: str | None = None, **redis_kwargs: Any) -> Self:
        return cls(url, namespace=namespace, **redis_kwargs)

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Client({self.conn.keys.root!r})"

    # --- the connection's facts ------------------------------------------------------

    @property
    def url(self) -> str:
        return self.conn.url

    @property
    def settings(self) -> config.Settings:
        return self.conn.settings

    @property
    def keys(self) -> Keys:
        return self.conn.keys

    @property
    def redis(self) -> redis.Redis:
        """The redis-py client of the node serving the namespace (for tools and tests)."""
        return self.conn.redis

    # --- queues and jobs --------------------------------------------------------

    def queue(self, name: str) -> Queue:
        return Queue(self, wire.check_queue(name))

    def queues(self) -> list[str]:
        return self.conn.call(ops.members(self.keys.key("queues")))

    def status(self, *queues: str) -> dict[str, dict[str, int | bool]]:
        """Counts by state for the queues (all known queues when none are named)."""
        counts: dict[str, dict[str, int | bool]] = self.conn.call(ops.counts(queues))
        return counts

    def put_many(self, specs: Iterable[JobSpec]) -> list[str]:
        """Puts many jobs in one atomic call; nothing is written if one is bad. A
        put retried after a lost reply that finds its jobs there (JobExists) knows
        its first try landed, and answers their jids."""
        specs = list(specs)
        if not specs:
            return []
        shards = self.conn.shards
        if shards.sharded:  # an unsharded deployment holds every queue
            for spec in specs:
                shards.check(self.keys.namespace, spec.queue)

        def landed(err: Error) -> list[str] | None:
            return [s.options["jid"] for s in specs] if self._all_put(err, specs) else None

        return self.conn.call(ops.put(specs), landed)

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
        return self.conn.call(ops.get(jids)) if jids else []

    def message_status(self, jid: str) -> str | None:
        """queued, queued-with-backoff, locked, locked-with-requeue, done-awaiting-gc,
        done-with-backoff, or None: the job's state as a de-duplicating queue names it."""
        return self.conn.call(ops.message_status(jid))

    def cancel(self, *jids: str) -> list[str]:
        """Deletes the jobs; refuses (DependedOn) while others depend on one of them."""
        return self.conn.call(ops.cancel(jids)) if jids else []

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
        ending = self.conn.call(ops.wait(jid, _ms(_slice_s(deadline))))
        jid = ending.jid or jid
        key = self.keys.waited(jid)
        while not ending.ended:
            block_s = _slice_s(deadline)
            if block_s <= 0:
                raise WaitTimeout(jid, limit_s or 0.0)
            # blocks, then reads the job (and registers for the next slice) at once
            next_s = _slice_s(None if deadline is None else deadline - block_s)
            _, ending = self.conn.calls(
                [ops.wait_for_end(key, round(block_s, 3)), ops.wait(jid, _ms(next_s))]
            )
        if ending.state == JobState.FAILED:
            raise JobFailed(jid, ending.group, ending.message)
        return ending.result

    # --- failures and domains ---------------------------------------------------------

    def failed(self) -> dict[str, int]:
        """Failed jobs by group: {group: count}."""
        return self.conn.call(ops.failed_groups())

    def unfail(self, group: str, queue: str | None, count: int = 25) -> int:
        """Moves up to `count` failed jobs of `group` back to `queue` (None: each to
        its own), oldest first."""
        target = "" if queue is None else wire.check_queue(queue)
        return self.conn.call(ops.unfail(group, target, count))

    def set_domain_limit(
        self,
        domain: str,
        rate: float | None = None,
        period: float = 1.0,
        burst: int | None = None,
        concurrency: int | None = None,
    ) -> None:
        """Limits `domain` to `rate` job starts per `period` seconds (+ `burst`)
        and/or to `concurrency` jobs holding a lease at once (client.scheduling
        has the other domain operations)."""
        self.scheduling.set_domain_limit(domain, rate, period, burst, concurrency)


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
        expires_in: float | None = None,
        debounce: float | None = None,
    ) -> str:
        """Puts one job; returns its jid (or, for a duplicate of a unique key, the jid
        of the job holding that key)."""
        spec = JobSpec.build(
            self.name,
            klass,
            data,
            priority=priority,
            delay=delay,
            at=at,
            tags=tags,
            retries=retries,
            depends=depends,
            domain=domain,
            unique_key=unique_key,
            unique_for=unique_for,
            requeue_if_running=requeue_if_running,
            jid=jid,
            backoff=backoff,
            timeout=timeout,
            tracked=tracked,
            expires_in=expires_in,
            debounce=debounce,
        )
        return self.client.put_many([spec])[0]

    def spec(self, klass: str | Any, data: Mapping[str, Any] | None = None, **opts: Any) -> JobSpec:
        """A job for `Client.put_many` (same options as `put`)."""
        return JobSpec.build(self.name, klass, data, **opts)

    def pop(self, count: int = 1, worker: str | None = None) -> list[Lease]:
        """Leases up to `count` jobs to `worker` (default: this process): their lease
        handles, which report on them (for workers and tools: a master pops for
        the jobs it runs)."""
        return self.client.leases.pop(self.name, count, worker)

    def peek(self, count: int = 10) -> list[Job]:
        """The jobs a pop would take next, without leasing them."""
        return self.client.admin.peek(self.name, count)

    def counts(self) -> dict[str, int | bool]:
        return self.client.status(self.name)[self.name]

    def pause(self) -> None:
        self.client.conn.call(ops.set_paused(self.name, True))

    def resume(self) -> None:
        self.client.conn.call(ops.set_paused(self.name, False))


def _slice_s(deadline: float | None) -> float:
    """How long the next blocking read of a wait may last: WAIT_SLICE_S at most,
    0 once less than WAIT_MIN_S is left before `deadline` (monotonic)."""
    if deadline is None:
        return WAIT_SLICE_S
    left_s = min(WAIT_SLICE_S, deadline - time.monotonic())
    return left_s if left_s >= WAIT_MIN_S else 0.0


def _ms(seconds: float) -> int:
    return math.ceil(seconds * 1000)
