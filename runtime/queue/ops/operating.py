"""Plain commands (PING, settings, sorted sets, lists, hashes) and the operator's
reads and actions: a queue's jobs by state, forgetting a queue, retention, the
masters at work, the domains, statistics, throughput and one read of
everything a metrics scrape shows. runtime.queue.api.admin and scheduling,
the master (runtime.queue.aio) and the command line send them.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date
from typing import Any

from runtime import vocabulary
from runtime.queue import stats, wire
from runtime.queue.job import RECORDS, Job
from runtime.queue.keys import Keys
from runtime.queue.ops.call import (
    Call,
    as_none,
    as_object,
    as_page,
    as_pairs,
    as_text_or_none,
    cmd,
    op,
    read_json,
    text,
)
from runtime.queue.recur import Recurrence
from runtime.queue.stats import QueueStats

# --- plain commands -------------------------------------------------------------------------


def ping() -> Call[None]:
    return cmd("PING", decode=lambda _: None)


def delete(key: str) -> Call[None]:
    return cmd("DEL", key, decode=as_none)


def hash_of(key: str) -> Call[dict[str, str]]:
    return cmd("HGETALL", key, decode=as_pairs)


def recurrences(keys: Keys) -> Call[list[Recurrence]]:
    def decode(reply: Any) -> list[Recurrence]:
        found = (Recurrence.from_definition(v) for v in as_pairs(reply).values())
        return sorted(found, key=lambda r: r.id)

    return cmd("HGETALL", keys.key("recur"), decode=decode)


def domain_limits(keys: Keys) -> Call[dict[str, dict[str, float]]]:
    def decode(reply: Any) -> dict[str, dict[str, float]]:
        return {domain: as_object(limit) for domain, limit in as_pairs(reply).items()}

    return cmd("HGETALL", keys.key("domain_limits"), decode=decode)


def throughput(minutes: int) -> Call[stats.Throughput]:
    """Jobs completed and failed per minute, all queues, the last `minutes` of them."""
    return op(
        "throughput", minutes, decode=lambda r: stats.throughput(read_json(r)), repeatable=True
    )


def queue_stats(keys: Keys, queue: str, day: date) -> Call[QueueStats]:
    key = keys.key("stats", queue=queue, day=stats.day_number(day))
    return cmd("HGETALL", key, decode=lambda reply: stats.parse(queue, day, as_pairs(reply)))


def setting(keys: Keys, name: str) -> Call[str | None]:
    """One shared setting as stored (None: not set, its default applies)."""
    return cmd("HGET", keys.key("config"), name, decode=as_text_or_none)


def set_setting(keys: Keys, name: str, value: str) -> Call[None]:
    return cmd("HSET", keys.key("config"), name, value, decode=as_none)


def unset_setting(keys: Keys, name: str) -> Call[None]:
    return cmd("HDEL", keys.key("config"), name, decode=as_none)


def members(
    key: str, start: int = 0, stop: int = -1, newest_first: bool = False
) -> Call[list[str]]:
    """Members of a sorted set by rank (ZRANGE / ZREVRANGE)."""
    name = "ZREVRANGE" if newest_first else "ZRANGE"
    return cmd(name, key, start, stop, decode=lambda r: [text(m) for m in r])


def cardinality(key: str) -> Call[int]:
    return cmd("ZCARD", key, decode=int)


# --- operating: listing, forgetting, workers, metrics ---------------------------------------

LISTED_STATES = vocabulary.LISTED_STATES


def jobs(
    queue: str, state: str, start: int, count: int, oldest_first: bool
) -> Call[tuple[int, list[Job]]]:
    """A page of a queue's jobs in one state (lua/jobs.lua): (total, jobs)."""
    order = "oldest" if oldest_first else "newest"
    return op("jobs", queue, state, start, count, order, decode=as_page, repeatable=True)


def queue_forget(queue: str) -> Call[bool]:
    """Forgets an empty queue (WrongState if it is not); False if it was not known."""
    return op("queue_forget", queue, decode=bool, repeatable=True)


def retention(batch: int) -> Call[int]:
    """Deletes up to `batch` completed jobs past retention; how many (runs while Redis is full)."""
    return op("retention", batch, decode=int, repeatable=True)


def queue_known(keys: Keys, queue: str) -> Call[bool]:
    """Whether the queue was ever used (it is in the list of queues)."""
    return cmd("ZSCORE", keys.key("queues"), queue, decode=lambda r: r is not None)


def register_worker(
    worker: str, *, host: str, pid: int, queues: Sequence[str], concurrency: int,
    started_ms: int | None = None,
) -> Call[None]:  # fmt: skip
    """A master tells who it is (lua/worker_info.lua): where it runs, what it serves."""
    info = {"host": host, "pid": pid, "queues": list(queues), "concurrency": concurrency,
            "started_ms": started_ms, "records": RECORDS}  # fmt: skip
    return op("worker_info", worker, wire.dumps(info), decode=as_none, repeatable=True)


def metrics(up_ms: int) -> Call[dict[str, Any]]:
    """Everything a scrape shows, in one call (lua/metrics.lua)."""
    return op("metrics", up_ms, decode=as_object, repeatable=True)


def server_info() -> Call[dict[str, str]]:
    """INFO (its default sections) as {field: value}."""

    def decode(reply: Any) -> dict[str, str]:
        fields = (line.partition(":") for line in text(reply).splitlines())
        return {k: v for k, sep, v in fields if sep and not k.startswith("#")}

    return cmd("INFO", decode=decode)


def domains(count: int) -> Call[dict[str, dict[str, Any]]]:
    """Domains with a limit of their own or a spent budget (lua/domains.lua)."""
    return op("domains", count, decode=as_object, repeatable=True)


def list_range(key: str, start: int, stop: int) -> Call[list[str]]:
    """Entries of a list by index (LRANGE; negative indexes count from the tail)."""
    return cmd("LRANGE", key, start, stop, decode=lambda r: [text(m) for m in r])
