"""Client and Queue: one typed method per script, for applications and tools.

`Client()` reaches Redis at `REDIS_URL` (or the config file), else the
embedded default server. Connection and credential failures become
`RedisUnavailable` with the URL's password hidden. The master uses the same
operations through `runtime.queue.aio.AsyncClient`.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import date
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import redis

from runtime import config
from runtime.errors import BadArgument, ConfigError, Error, RedisUnavailable
from runtime.queue import embedded, recur, scripts, stats, wire
from runtime.queue.job import Job
from runtime.queue.keys import Keys
from runtime.queue.recur import Recurrence
from runtime.queue.stats import QueueStats
from runtime.queue.wire import JobSpec


def text(value: object) -> str:
    """A reply value as text (replies are bytes: the connection does not decode)."""
    return value.decode() if isinstance(value, bytes) else str(value)


def default_worker_id() -> str:
    """`hostname-pid`: unique per running process."""
    return f"{socket.gethostname()}-{os.getpid()}"


def redact(url: str) -> str:
    """The URL with its password replaced by ***."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(":" + parts.password + "@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


def unavailable(url: str, err: Exception) -> RedisUnavailable:
    if isinstance(err, redis.exceptions.AuthenticationError | redis.exceptions.NoPermissionError):
        if urlsplit(url).password is None and "password=" not in url:
            return RedisUnavailable(
                f"Redis at {redact(url)} requires a password (or ACL user) in the URL"
            )
        return RedisUnavailable(f"Redis at {redact(url)} refused the credentials: {err}")
    return RedisUnavailable(f"cannot reach Redis at {redact(url)}: {err}")


CONNECTION_ERRORS = (
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
    redis.exceptions.NoPermissionError,
)


def resolve_url(settings: config.Settings) -> str:
    """The configured URL, else the embedded server's (started if needed)."""
    return settings.url or embedded.ensure(settings.state_dir)


def connect(url: str, **kwargs: Any) -> redis.Redis:
    try:
        return redis.Redis.from_url(url, **kwargs)
    except ValueError as err:
        raise ConfigError(f"bad Redis URL {redact(url)}: {err}") from err


@dataclass(frozen=True)
class Heartbeat:
    renewed: tuple[str, ...]
    lost: tuple[str, ...]


class Client:
    """A connection to one deployment (a namespace in one Redis)."""

    def __init__(
        self,
        url: str | None = None,
        *,
        namespace: str | None = None,
        settings: config.Settings | None = None,
        **redis_kwargs: Any,
    ) -> None:
        if settings is None:
            settings = config.load_settings({"url": url, "namespace": namespace})
        self.settings = settings
        self.url = resolve_url(settings)
        self.keys = Keys(settings.namespace)
        self.redis = connect(self.url, **redis_kwargs)

    @classmethod
    def from_url(cls, url: str, namespace: str | None = None, **redis_kwargs: Any) -> Client:
        return cls(url, namespace=namespace, **redis_kwargs)

    def close(self) -> None:
        self.redis.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _reaching(self) -> Iterator[None]:
        try:
            yield
        except CONNECTION_ERRORS as err:
            raise unavailable(self.url, err) from err

    def run(self, operation: str, *args: Any) -> Any:
        """Runs a script of lua/ with the namespace root as its key."""
        with self._reaching():
            return scripts.call(self.redis, operation, [self.keys.root], list(args))

    def run_json(self, operation: str, *args: Any) -> Any:
        return json.loads(self.run(operation, *args))

    def now_ms(self) -> int:
        """The deployment's time (Redis TIME), in ms: schedules never use ours."""
        return int(self.run("now"))

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

    def tag(self, jid: str, *tags: str) -> list[str]:
        """Adds tags to a job; returns its tags."""
        tagged: list[str] = self.run_json("tag", jid, "add", *tags)
        return tagged

    def untag(self, jid: str, *tags: str) -> list[str]:
        tagged: list[str] = self.run_json("tag", jid, "remove", *tags)
        return tagged

    def tagged(self, tag: str, start: int = 0, count: int = 25) -> tuple[int, list[Job]]:
        """(how many jobs carry `tag`, a page of them, newest first)."""
        key = self.keys.key("tag", tag=tag)
        with self._reaching():
            total = int(self.redis.zcard(key))
            jids = [text(j) for j in self.redis.zrevrange(key, start, start + count - 1)]
        return total, [j for j in self.get_jobs(jids) if j is not None]

    def track(self, jid: str) -> None:
        """Lists the job among the tracked ones and publishes its events."""
        self.run("track", jid, "on")

    def untrack(self, jid: str) -> None:
        self.run("track", jid, "off")

    def tracked(self) -> list[Job]:
        with self._reaching():
            jids = [text(j) for j in self.redis.zrange(self.keys.key("tracked"), 0, 999)]
        return [j for j in self.get_jobs(jids) if j is not None]

    def events(self, idle_s: float | None = None) -> Iterator[dict[str, Any]]:
        """Yields the events of tracked jobs as they happen; stops after `idle_s`
        seconds without one (never, by default)."""
        pubsub = self.redis.pubsub(ignore_subscribe_messages=True)  # type: ignore[no-untyped-call]
        with self._reaching():
            pubsub.subscribe(self.keys.key("events"))
        last = time.monotonic()
        try:
            while idle_s is None or time.monotonic() - last < idle_s:
                with self._reaching():
                    message = pubsub.get_message(timeout=1.0)
                if message is not None:
                    last = time.monotonic()
                    yield json.loads(message["data"])
        finally:
            pubsub.close()

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

    def stats(self, queue: str, day: date | None = None) -> QueueStats:
        """Wait and run times, failures, failed and retries of a queue on a UTC day."""
        day = day or stats.today()
        key = self.keys.key("stats", queue=wire.check_queue(queue), day=stats.day_number(day))
        with self._reaching():
            raw = self.redis.hgetall(key)
        return stats.parse(queue, day, {text(k): text(v) for k, v in raw.items()})

    def workers(self) -> dict[str, dict[str, Any]]:
        workers: dict[str, dict[str, Any]] = self.run_json("workers")
        return workers

    # --- recurring jobs ---------------------------------------------------------

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
        if policy not in recur.POLICIES:
            raise BadArgument(f"policy must be one of {', '.join(recur.POLICIES)}")
        if (every is None) == (cron is None):
            raise BadArgument("give every (seconds) or cron, one of them")
        dropped = ("jid", "depends", "delay_ms", "at_ms", "unique_key")
        options = {k: v for k, v in spec.options.items() if v is not None and k not in dropped}
        definition: dict[str, Any] = {
            "id": id or f"{queue}/{spec.klass}", "queue": queue, "policy": policy,
            "grace": wire.check_seconds("grace", grace), "tz": tz,
            "spec": {"klass": spec.klass, **options},
        }  # fmt: skip
        ticks: list[int] = []
        if every is not None:
            definition["every"] = wire.check_seconds("every", every)
            if first_at is not None:
                definition["first_ms"] = wire.epoch_ms(first_at)
        else:
            recur.zone(tz)
            definition["cron"] = recur.check_cron(cron or "")
            ticks = recur.cron_ticks(definition["cron"], tz, self.now_ms())
        stored = self.run("recur", wire.dumps(definition), spec.data_json, *ticks)
        return Recurrence.from_definition(stored)

    def unrecur(self, id: str) -> bool:
        """Removes a recurrence (the jobs it spawned stay); False if there was none."""
        return bool(self.run("unrecur", id))

    def recurrences(self) -> list[Recurrence]:
        with self._reaching():
            raw = self.redis.hgetall(self.keys.key("recur"))
        return sorted((Recurrence.from_definition(v) for v in raw.values()), key=lambda r: r.id)

    def extend_recurrence(self, id: str, cron: str, tz: str, after_ms: int) -> int:
        """Adds the next cron ticks of a recurrence running low (masters do this)."""
        return int(self.run("recur_ticks", id, cron, *recur.cron_ticks(cron, tz, after_ms)))

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

    def set_domain_limit(
        self, domain: str, rate: float, period: float = 1.0, burst: int | None = None
    ) -> None:
        """Limits `domain` to `rate` job starts per `period` seconds (+ `burst`)."""
        limit = wire.domain_limit(domain, rate, period, burst)
        with self._reaching():
            self.redis.hset(self.keys.key("domain_limits"), domain, limit)

    def domain_limits(self) -> dict[str, dict[str, float]]:
        """{domain: {"rate", "period", "burst"}} for the domains with a limit of their own."""
        with self._reaching():
            raw = self.redis.hgetall(self.keys.key("domain_limits"))
        return {text(k): json.loads(v) for k, v in raw.items()}

    def clear_domain_limit(self, domain: str) -> None:
        with self._reaching():
            self.redis.hdel(self.keys.key("domain_limits"), domain)


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
            "ordered", self.name,
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
