"""The scheduler's side of a client (`client.scheduling`): when and after what
jobs run (dependencies, priority, running a job again), tags and tracking (with
the events of tracked jobs), recurring jobs and domain rate limits."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from runtime.errors import BadArgument
from runtime.queue import ops, recur, wire
from runtime.queue.connection import Connection
from runtime.queue.job import Job
from runtime.queue.recur import Recurrence
from runtime.queue.wire import JobSpec

_IDENT = r"[A-Za-z_]\w*"
_DOTTED = rf"{_IDENT}(?:\.{_IDENT})*"
KLASS_RE = re.compile(rf"(?:{_DOTTED}:{_DOTTED}|{_IDENT}(?:\.{_IDENT})+)", re.ASCII)


def check_klass(klass: str) -> str:
    """A klass as lua/lib/util.lua accepts it: "pkg.module:function" or "pkg.module.function"."""
    if len(klass) > 512 or not KLASS_RE.fullmatch(klass):
        raise BadArgument(
            f'klass must be an import path like "package.module:function", got {klass!r}'
        )
    return klass


class Scheduling:
    """The scheduler's operations over a client's connection."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def _jobs(self, jids: list[str]) -> list[Job]:
        """The jobs of `jids` that exist, in order."""
        return [j for j in self.conn.call(ops.get(jids)) if j is not None] if jids else []

    # --- one job's schedule -------------------------------------------------------

    def depend(self, jid: str, *on: str) -> str:
        """Makes a job that has not run yet wait on more jobs; returns its state."""
        return self.conn.call(ops.depends(jid, "on", on))

    def undepend(self, jid: str, *on: str) -> str:
        """Stops a job waiting on these jobs; with none left it moves on."""
        return self.conn.call(ops.depends(jid, "off", on))

    def requeue(self, jid: str, queue: str | None = None) -> str:
        """Runs a failed, complete or scheduled job again now (retries renewed)."""
        if queue is not None:
            self.conn.shards.check(self.conn.keys.namespace, queue, "a job requeued")
        return self.conn.call(ops.requeue(jid, "" if queue is None else wire.check_queue(queue)))

    def set_priority(self, jid: str, priority: int) -> str:
        return self.conn.call(ops.priority(jid, wire.check_priority(priority)))

    # --- tags and tracking --------------------------------------------------------

    def tag(self, jid: str, *tags: str) -> list[str]:
        """Adds tags to a job; returns its tags."""
        return self.conn.call(ops.tag(jid, "add", tags))

    def untag(self, jid: str, *tags: str) -> list[str]:
        return self.conn.call(ops.tag(jid, "remove", tags))

    def tagged(self, tag: str, start: int = 0, count: int = 25) -> tuple[int, list[Job]]:
        """(how many jobs carry `tag`, a page of them, newest first)."""
        key = self.conn.keys.key("tag", tag=tag)
        page = ops.members(key, start, start + count - 1, newest_first=True)
        total, jids = self.conn.calls([ops.cardinality(key), page])
        return total, self._jobs(jids)

    def track(self, jid: str) -> None:
        """Lists the job among the tracked ones and publishes its events."""
        self.conn.call(ops.track(jid, True))

    def untrack(self, jid: str) -> None:
        self.conn.call(ops.track(jid, False))

    def tracked(self) -> list[Job]:
        return self._jobs(self.conn.call(ops.members(self.conn.keys.key("tracked"), 0, 999)))

    def events(self, idle_s: float | None = None) -> Iterator[dict[str, Any]]:
        """Yields the events of tracked jobs as they happen; stops after `idle_s`
        seconds without one (never, by default)."""
        return follow([self.conn], idle_s)

    # --- recurring jobs -----------------------------------------------------------

    def recur(
        self,
        queue: str,
        klass: str | Any,
        data: Mapping[str, Any] | None = None,
        *,
        every: float | None = None,
        cron: str | None = None,
        tz: str = "UTC",
        policy: str = "once",
        grace: float = 60.0,
        first_at: Any = None,
        id: str | None = None,
        **job_options: Any,
    ) -> Recurrence:
        """Puts a job on `queue` every `every` seconds or at each `cron` tick (in `tz`),
        once per tick however many masters run. Ticks missed while nothing popped the
        queue follow `policy`: all (a job each), once (one job), skip (none later than
        `grace` seconds). `id` (default "<queue>/<klass>") names it; recurring again
        with the same id replaces it. Job options: priority, retries, tags, backoff,
        timeout, domain."""
        spec = JobSpec.build(queue, klass, data, **job_options)
        self.conn.shards.check(self.conn.keys.namespace, queue, "a recurrence")
        check_klass(spec.klass)  # before it names the recurrence: blame the klass, not the id
        if policy not in recur.POLICIES:
            raise BadArgument(f"policy must be one of {', '.join(recur.POLICIES)}")
        if (every is None) == (cron is None):
            raise BadArgument("give every (seconds) or cron, one of them")
        # a recurrence's jobs are not the children of the span that defined it
        dropped = ("jid", "depends", "delay_ms", "at_ms", "unique_key", "traceparent")
        options = {k: v for k, v in spec.options.items() if v is not None and k not in dropped}
        definition: dict[str, Any] = {
            "id": id or f"{queue}/{spec.klass}",
            "queue": queue,
            "policy": policy,
            "grace": wire.check_seconds("grace", grace),
            "tz": tz,
            "spec": {"klass": spec.klass, **options},
        }
        ticks: list[int] = []
        if every is not None:
            definition["every"] = wire.check_seconds("every", every)
            if first_at is not None:
                definition["first_ms"] = wire.epoch_ms(first_at)
        else:
            recur.zone(tz)
            definition["cron"] = recur.check_cron(cron or "")
            ticks = recur.cron_ticks(definition["cron"], tz, self.conn.now_ms())
        return self.conn.call(ops.recur(wire.dumps(definition), spec.data_json, ticks))

    def unrecur(self, id: str) -> bool:
        """Removes a recurrence (the jobs it spawned stay); False if there was none."""
        return self.conn.call(ops.unrecur(id))

    def recurrences(self) -> list[Recurrence]:
        return self.conn.call(ops.recurrences(self.conn.keys))

    # --- domain rate limits -------------------------------------------------------

    def set_domain_limit(
        self,
        domain: str,
        rate: float | None = None,
        period: float = 1.0,
        burst: int | None = None,
        concurrency: int | None = None,
    ) -> None:
        """Limits `domain` to `rate` job starts per `period` seconds (+ `burst`) and/or
        to `concurrency` jobs holding a lease at once, every queue and master
        together (without a rate, the default rate applies). Takes effect at once,
        also for the domain's jobs already throttled in any queue; replaces the
        domain's earlier limits (a pause stays)."""
        limit = wire.domain_limit(domain, rate, period, burst, concurrency)
        self.conn.call(ops.domain_limit(domain, limit))

    def pause_domain(self, domain: str) -> None:
        """No job of `domain` starts, in any queue, until `resume_domain`; its jobs
        stay throttled (running ones go on) and other domains run."""
        self.conn.call(ops.domain_pause(wire.check_domain(domain), True))

    def resume_domain(self, domain: str) -> None:
        self.conn.call(ops.domain_pause(wire.check_domain(domain), False))

    def domain_limits(self) -> dict[str, dict[str, float]]:
        """{domain: {"rate", "period", "burst"}} for the domains with a limit of their own."""
        return self.conn.call(ops.domain_limits(self.conn.keys))

    def clear_domain_limit(self, domain: str) -> None:
        """Removes `domain`'s own limit (the default limit applies, if one is set);
        its throttled jobs are re-scheduled at once."""
        self.conn.call(ops.domain_limit(domain, ""))


def follow(conns: Sequence[Connection], idle_s: float | None) -> Iterator[dict[str, Any]]:
    """The events of tracked jobs of every namespace of `conns` (each its own
    pub/sub connection, read in turn), as they happen; stops after `idle_s`
    seconds without one (None: never)."""
    subscribed: list[tuple[Connection, Any]] = []
    try:
        for conn in conns:
            pubsub = conn.redis.pubsub(ignore_subscribe_messages=True)  # type: ignore[no-untyped-call]
            subscribed.append((conn, pubsub))
            with conn.reaching():
                pubsub.subscribe(conn.keys.key("events"))
        turn_s = 1.0 / max(1, len(subscribed))  # each listened to about once a second
        last = time.monotonic()
        while idle_s is None or time.monotonic() - last < idle_s:
            for conn, pubsub in subscribed:
                with conn.reaching():
                    message = pubsub.get_message(timeout=turn_s)
                if message is not None:
                    last = time.monotonic()
                    yield ops.event(message["data"])
    finally:
        for _, pubsub in subscribed:
            pubsub.close()
