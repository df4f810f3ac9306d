"""What a job looks like to Python: `Job`, its `Failure` and its `HistoryEvent`s.

The scripts store a job's meta with short names (see lua/lib/job.lua); this
module is the one place that maps them to the public names. Times are Redis
TIME in milliseconds since the epoch.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from runtime.vocabulary import JobState

STATES = tuple(JobState)

# The record forms this release reads (lua/lib/job.lua), told by every master
# it runs (worker_info.lua): 1 JSON metas, 2 also compact ones. A master that
# tells none runs a release before compact records.
RECORDS = 2


def usage_of(value: Any) -> dict[str, Any] | None:
    """An attempt's usage as stored ([cpu_s, max_rss_mb], a third value 0 when the
    peak is the child's since it started: lua/lib/attempt.lua) as the public
    {"cpu_s", "max_rss_mb"} (and "max_rss_of": "child" then); None for none."""
    if value is None:
        return None
    if not isinstance(value, list) or len(value) not in (2, 3):
        raise TypeError("usage must be a list of two or three numbers")
    usage: dict[str, Any] = {"cpu_s": float(value[0]), "max_rss_mb": float(value[1])}
    if len(value) == 3:
        usage["max_rss_of"] = "child"
    return usage


def _when(ms: int | None) -> datetime | None:
    return None if ms is None else datetime.fromtimestamp(ms / 1000, UTC)


@dataclass(frozen=True)
class Failure:
    group: str
    message: str
    at_ms: int
    worker: str | None

    @property
    def at(self) -> datetime | None:
        return _when(self.at_ms)


@dataclass(frozen=True)
class Cancellation:
    """What a cancelled job's tombstone tells: when (Redis time) and by what
    (runtime.vocabulary.CancelledBy: cli, dashboard, api, dependency)."""

    at_ms: int
    by: str

    @property
    def at(self) -> datetime | None:
        return _when(self.at_ms)


@dataclass(frozen=True)
class HistoryEvent:
    """One step of a job's timeline: put, popped, lease-lost, retried, failed,
    completed, unfailed, requeued, released, priority, puts (the jobs it put:
    `count`, the first `jids`), cancelled. `note`: what else there is to say
    (e.g. why a result was not stored); `by`: on a put, the job that put it; on
    a cancel, what cancelled it (cli, dashboard, api, dependency); `usage`: on
    the event that ended an attempt, what it cost ({"cpu_s", "max_rss_mb"})."""

    event: str
    at_ms: int
    worker: str | None = None
    queue: str | None = None
    group: str | None = None
    delay_ms: int | None = None
    priority: int | None = None
    starts_at_ms: int | None = None  # popped before its turn: the job starts then
    handed: bool = False  # popped: handed to a master waiting for it (no pop call)
    note: str | None = None
    count: int | None = None
    jids: tuple[str, ...] = ()
    by: str | None = None
    usage: dict[str, Any] | None = None  # the attempt that ended here: {"cpu_s", "max_rss_mb"}

    @classmethod
    def from_meta(cls, ev: dict[str, Any]) -> HistoryEvent:
        return cls(
            event=ev["e"],
            at_ms=int(ev["t"]),
            worker=ev.get("w"),
            queue=ev.get("q"),
            group=ev.get("g"),
            delay_ms=ev.get("dl"),
            priority=ev.get("p"),
            starts_at_ms=ev.get("sa"),
            handed=bool(ev.get("ho")),
            note=ev.get("n"),
            count=ev.get("c"),
            jids=tuple(ev.get("j", ())),
            by=ev.get("b"),
            usage=usage_of(ev.get("u")),
        )

    @property
    def at(self) -> datetime | None:
        return _when(self.at_ms)


def _progress(value: Any) -> dict[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise TypeError("progress must be an object")
    return value


def _history(meta: dict[str, Any]) -> tuple[HistoryEvent, ...]:
    """The timeline. A put event does not repeat its queue (every job has one, so
    it is not stored): it is the queue the first move left (`fq`), else the job's."""
    events = [HistoryEvent.from_meta(ev) for ev in meta["h"]]
    if events and events[0].event == "put" and events[0].queue is None:
        put_queue = next((ev["fq"] for ev in meta["h"] if "fq" in ev), meta.get("q"))
        events[0] = replace(events[0], queue=put_queue)
    return tuple(events)


@dataclass(frozen=True)
class Job:
    """A job as read from Redis: a plain value. A running job names its lease
    holder (`worker`), never the lease's token: that credential stays on the
    lease handle a pop returned (runtime.queue.api.holder.Lease), and reporting on
    the job takes that handle. The scripts leave it out of every read's reply."""

    jid: str
    klass: str
    queue: str
    state: JobState
    data: dict[str, Any]
    priority: int
    tags: tuple[str, ...]
    retries: int
    remaining: int
    attempt: int
    worker: str | None
    failure: Failure | None
    history: tuple[HistoryEvent, ...]
    put_at_ms: int
    due_at_ms: int | None = None
    domain: str | None = None
    unique_key: str | None = None
    timeout_s: float | None = None
    backoff: tuple[float, float] | None = None
    tracked: bool = False
    depends: tuple[str, ...] = ()
    dependents: tuple[str, ...] = ()
    lease_expires_ms: int | None = None
    result: Any = None  # a complete job's return value (decoded JSON), None for none
    output: str = ""  # the output tail of its last attempt
    progress: dict[str, Any] | None = None  # {"done", "total", "message", "at_ms"}
    batch: str | None = None  # the bid of its batch (runtime.queue.api.batches)
    usage: dict[str, Any] | None = None  # the last attempt's {"cpu_s", "max_rss_mb"}
    cancellation: Cancellation | None = None  # a tombstone's (state cancelled): when, by what
    expires_at_ms: int | None = None  # expires_in: the latest start (gone once it started)

    @classmethod
    def from_reply(cls, reply: dict[str, Any]) -> Job:
        meta: dict[str, Any] = reply["meta"]
        failure = meta.get("f")
        backoff = meta.get("bo")
        cancelled = meta.get("cn")
        return cls(
            jid=reply["jid"],
            klass=meta["k"],
            queue=meta["q"],
            state=JobState(reply.get("state", meta["s"])),
            data=reply["data"],
            priority=int(meta.get("p", 0)),
            tags=tuple(meta.get("g", ())),
            retries=int(meta["r"]),
            remaining=int(meta["m"]),
            attempt=int(meta.get("a", 0)),
            worker=meta.get("w"),
            failure=None
            if failure is None
            else Failure(failure["g"], failure["m"], int(failure["t"]), failure.get("w")),
            history=_history(meta),
            put_at_ms=int(meta["h"][0]["t"]),
            due_at_ms=meta.get("d"),
            domain=meta.get("dm"),
            unique_key=meta.get("uk"),
            timeout_s=meta.get("to"),
            backoff=None if backoff is None else (float(backoff[0]), float(backoff[1])),
            tracked=bool(meta.get("tr")),
            depends=tuple(reply.get("depends", ())),
            dependents=tuple(reply.get("dependents", ())),
            lease_expires_ms=reply.get("lease_expires_ms"),
            result=reply.get("result"),
            output=str(reply.get("output", "")),
            progress=_progress(reply.get("progress")),
            batch=meta.get("b"),
            usage=usage_of(meta.get("u")),
            cancellation=None
            if cancelled is None
            else Cancellation(int(cancelled["t"]), str(cancelled["b"])),
            expires_at_ms=meta.get("x"),
        )

    @property
    def put_at(self) -> datetime | None:
        return _when(self.put_at_ms)
