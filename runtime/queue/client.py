"""Client and Queue: one typed method per script, for applications and tools.

`Client()` reaches Redis at `REDIS_URL` (or the config file), else the
embedded default server (connection.py). Jobs, queues, failures and the lease
holder's reports are here; the scheduler's operations (tags, tracking,
statistics, recurring jobs, domain limits) in scheduling.py. The master uses
the same operations through `runtime.queue.aio.AsyncClient`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from runtime import config
from runtime.errors import Error
from runtime.queue import wire
from runtime.queue.connection import default_worker_id, redact, resolve_url, text
from runtime.queue.job import Job
from runtime.queue.scheduling import Scheduling
from runtime.queue.wire import JobSpec

# the helpers of runtime.queue.connection stay importable from here
__all__ = ["Client", "Heartbeat", "Queue", "default_worker_id", "redact", "resolve_url", "text"]


@dataclass(frozen=True)
class Heartbeat:
    renewed: tuple[str, ...]
    lost: tuple[str, ...]


class Client(Scheduling):
    """A connection to one deployment (a namespace in one Redis): jobs, queues,
    failures and the lease holder's reports here; tags, tracking, statistics,
    recurring jobs and domain limits in `Scheduling`."""

    # --- queues and jobs --------------------------------------------------------

    def queue(self, name: str) -> Queue:
        return Queue(self, wire.check_queue(name))

    def put_many(self, specs: Iterable[JobSpec]) -> list[str]:
        """Puts many jobs in one atomic call; nothing is written if one is bad."""
        args: list[str] = []
        for spec in specs:
            args += spec.to_wire()
        if not args:
            return []
        jids: list[str] = self.run_json("put", *args)
        return jids

    def get_job(self, jid: str) -> Job | None:
        return self.get_jobs([jid])[0]

    def get_jobs(self, jids: list[str]) -> list[Job | None]:
        replies = self.run_json("get", *jids) if jids else []
        return [None if r is None else Job.from_reply(r, self) for r in replies]

    def message_status(self, jid: str) -> str | None:
        """queued, queued-with-backoff, locked, locked-with-requeue, done-awaiting-gc,
        done-with-backoff, or None: the job's state as a de-duplicating queue names it."""
        status = self.run("message_status", jid)
        return None if status is None else text(status)

    def cancel(self, *jids: str) -> list[str]:
        """Deletes the jobs; refuses (DependedOn) while others depend on one of them."""
        cancelled: list[str] = self.run_json("cancel", *jids) if jids else []
        return cancelled

    def depend(self, jid: str, *on: str) -> str:
        """Makes a job that has not run yet wait on more jobs; returns its state."""
        return text(self.run("depends", jid, "on", *on))

    def undepend(self, jid: str, *on: str) -> str:
        """Stops a job waiting on these jobs; with none left it moves on."""
        return text(self.run("depends", jid, "off", *on))

    def requeue(self, jid: str, queue: str | None = None) -> str:
        """Runs a failed, complete or scheduled job again now (retries renewed)."""
        return text(self.run("requeue", jid, "" if queue is None else wire.check_queue(queue)))

    def set_priority(self, jid: str, priority: int) -> str:
        return str(self.run("priority", jid, wire.check_priority(priority)), "utf-8")

    def queues(self) -> list[str]:
        with self._reaching():
            names = self.redis.zrange(self.keys.key("queues"), 0, -1)
        return [text(n) for n in names]

    def status(self, *queues: str) -> dict[str, dict[str, int | bool]]:
        """Counts by state for the queues (all known queues when none are named)."""
        counts: dict[str, dict[str, int | bool]] = self.run_json("counts", *queues)
        return counts

    def workers(self) -> dict[str, dict[str, Any]]:
        workers: dict[str, dict[str, Any]] = self.run_json("workers")
        return workers

    # --- failures ---------------------------------------------------------------

    def failed(self) -> dict[str, int]:
        """Failed jobs by group: {group: count}."""
        groups: dict[str, int] = self.run_json("failed", "", 0, 0)["groups"]
        return groups

    def failed_jobs(self, group: str, start: int = 0, count: int = 25) -> tuple[int, list[Job]]:
        """(how many failed in `group`, a page of them, newest first)."""
        page = self.run_json("failed", group, start, count)
        return int(page["total"]), [Job.from_reply(r, self) for r in page["jobs"]]

    def unfail(self, group: str, queue: str, count: int = 25) -> int:
        """Moves up to `count` failed jobs of `group` back to `queue`, oldest first."""
        return int(self.run("unfail", group, queue, count))

    # --- the lease holder's side (a master, or a script popping by hand) --------

    def heartbeat(
        self, worker: str, leases: Mapping[str, str], *, strict: bool = False
    ) -> Heartbeat:
        """Renews leases {jid: token}; with strict, a lost one raises LeaseLost."""
        args = [worker]
        for jid, token in leases.items():
            args += [jid, token]
        reply = self.run_json("heartbeat", *args)
        result = Heartbeat(tuple(reply["renewed"]), tuple(reply["lost"]))
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
    ) -> str:
        options = wire.complete_options(next, delay, depends)
        return wire.single(self.run_json("complete", worker, jid, token, options))

    def complete_many(self, worker: str, leases: Mapping[str, str]) -> dict[str, str | Error]:
        """Completes many leased jobs {jid: token} in one call: {jid: state or error}."""
        args = [worker]
        for jid, token in leases.items():
            args += [jid, token, "{}"]
        return wire.outcomes(self.run_json("complete", *args)) if leases else {}

    def fail(self, jid: str, worker: str, token: str, group: str, message: str) -> str:
        args = (worker, jid, token, group, wire.cap_message(message))
        return wire.single(self.run_json("fail", *args))

    def retry(
        self,
        jid: str,
        worker: str,
        token: str,
        group: str,
        message: str,
        *,
        delay: float | None = None,
    ) -> str:
        args = (worker, jid, token, group, wire.cap_message(message), wire.delay_ms(delay))
        return wire.single(self.run_json("retry", *args))

    # --- settings -----------------------------------------------------------------

    def config_get(self) -> dict[str, float]:
        """Every shared setting: the defaults, overlaid with what is set in Redis."""
        values = {name: s.default for name, s in config.SHARED.items()}
        with self._reaching():
            stored = self.redis.hgetall(self.keys.key("config"))
        for name, raw in stored.items():
            values[text(name)] = float(text(raw))
        return values

    def config_set(self, name: str, value: str | float) -> float:
        parsed = config.shared_setting(name).parse(value)
        with self._reaching():
            self.redis.hset(self.keys.key("config"), name, repr(parsed))
        return parsed

    def config_unset(self, name: str) -> None:
        config.shared_setting(name)
        with self._reaching():
            self.redis.hdel(self.keys.key("config"), name)


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
        reply = self.client.run_json(
            "pop", worker or default_worker_id(), wire.check_count(count), wire.seed(),
            "ordered", 0, 0, self.name,
        )  # fmt: skip
        return [Job.from_reply(r, self.client) for r in reply["jobs"]]

    def peek(self, count: int = 10) -> list[Job]:
        return [
            Job.from_reply(r, self.client) for r in self.client.run_json("peek", self.name, count)
        ]

    def counts(self) -> dict[str, int | bool]:
        return self.client.status(self.name)[self.name]

    def pause(self) -> None:
        self.client.run("set_paused", self.name, "1")

    def resume(self) -> None:
        self.client.run("set_paused", self.name, "0")
