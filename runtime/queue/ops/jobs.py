"""An application's operations: putting and reading jobs, the counts of queues,
waiting for a job to end (the Calls of runtime.queue.waiting's plan), changing
jobs (cancel, dependencies, priority, tags, tracking, domain limits, recurring
jobs), batches and failures. The synchronous `Client` and the `AsyncClient`
send the same ones (runtime.queue.api).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from runtime import vocabulary
from runtime.queue import wire
from runtime.queue.job import Job
from runtime.queue.ops.call import (
    Call,
    as_job,
    as_jobs,
    as_none,
    as_object,
    as_object_or_none,
    as_page,
    as_strings,
    as_text_or_none,
    cmd,
    op,
    read_json,
    text,
)
from runtime.queue.recur import Recurrence
from runtime.vocabulary import ENDED_STATES, JobState

# --- putting and reading jobs ------------------------------------------------------------


def put(specs: Iterable[wire.JobSpec]) -> Call[list[str]]:
    """Puts jobs in one atomic call: their jids (a unique key's holder for duplicates)."""
    args = [arg for spec in specs for arg in spec.to_wire()]
    return Call("put", tuple(args), as_strings, repeatable=True)


def get(jids: Sequence[str]) -> Call[list[Job | None]]:
    def decode(reply: Any) -> list[Job | None]:
        return [None if r is None else as_job(r) for r in read_json(reply)]

    return op("get", *jids, decode=decode, repeatable=True)


def peek(queue: str, count: int) -> Call[list[Job]]:
    return op("peek", queue, count, decode=as_jobs, repeatable=True)


def message_status(jid: str) -> Call[str | None]:
    return op("message_status", jid, decode=as_text_or_none, repeatable=True)


def now() -> Call[int]:
    return op("now", decode=int, repeatable=True)


def counts(queues: Iterable[str]) -> Call[dict[str, dict[str, Any]]]:
    return op("counts", *queues, decode=as_object, repeatable=True)


def workers() -> Call[dict[str, dict[str, Any]]]:
    return op("workers", decode=as_object, repeatable=True)


@dataclass(frozen=True)
class Ending:
    """How a job ended, as wait.lua answers: state "complete" (with its result),
    "failed" (with group and message), "cancelled" (its tombstone: `at_ms`, Redis
    time, and `by`), or another state while it has not ended.
    `jid`: the job's own jid when the one asked for was folded into it (a running
    job's duplicate put under a unique key), else "" ."""

    state: JobState
    result: Any = None
    group: str = ""
    message: str = ""
    jid: str = ""
    at_ms: int = 0
    by: str = ""

    @property
    def ended(self) -> bool:
        return self.state in ENDED_STATES


def wait(jid: str, for_ms: int) -> Call[Ending]:
    """How the job ended; if it has not, registers a waiter for `for_ms` (0: only
    looks). A repeat registers once more (harmless: one more wake-up token)."""

    def decode(reply: Any) -> Ending:
        value = as_object(reply)
        state, folded = JobState(value["state"]), str(value.get("jid") or "")
        if state == JobState.FAILED:
            group, message = str(value["group"]), str(value["message"])
            return Ending(state, group=group, message=message, jid=folded)
        if state == JobState.CANCELLED:
            return Ending(state, at_ms=int(value["at_ms"]), by=str(value["by"]), jid=folded)
        return Ending(state, result=value.get("result"), jid=folded)

    return op("wait", jid, for_ms, decode=decode, repeatable=True)


def wait_for_end(key: str, timeout_s: float) -> Call[str | None]:
    """BLPOP on a job's wake-up list: how it ended (complete, failed, cancelled), None
    on timeout. Repeatable: a lost token only means reading the job once more."""

    def decode(reply: Any) -> str | None:
        return None if reply is None else text(reply[1])

    return Call("BLPOP", (key, timeout_s), decode, script=False, repeatable=True,
                blocks_s=timeout_s)  # fmt: skip


def wait_for_ends(keys: Sequence[str], timeout_s: float) -> Call[tuple[str, str] | None]:
    """BLPOP on many jobs' wake-up lists (runtime.queue.waiters): (the list, how its
    job ended) of the first with a token, None on timeout. Repeatable, as
    wait_for_end is."""

    def decode(reply: Any) -> tuple[str, str] | None:
        return None if reply is None else (text(reply[0]), text(reply[1]))

    return Call("BLPOP", (*keys, timeout_s), decode, script=False, repeatable=True,
                blocks_s=timeout_s)  # fmt: skip


def wake_waiter(key: str, linger_s: float) -> list[Call[None]]:
    """A token on a waiter's own list (at most one, gone after `linger_s`): its
    BLPOP answers and starts again (runtime.queue.waiters)."""
    return [
        cmd("RPUSH", key, "1", decode=as_none),
        cmd("LTRIM", key, 0, 0, decode=as_none),
        cmd("PEXPIRE", key, round(linger_s * 1000), decode=as_none),
    ]


# --- changing jobs (never sent twice: a repeat would not be the same change) ---------------


def cancel(jids: Sequence[str], by: str = vocabulary.CancelledBy.API) -> Call[list[str]]:
    """Deletes the jobs, leaving a tombstone of those not ended (where memory
    allows) that says `by` what (runtime.vocabulary.CancelledBy): the jids deleted."""
    return op("cancel", by, *jids, decode=as_strings)


def depends(jid: str, verb: str, on: Sequence[str]) -> Call[str]:
    return op("depends", jid, verb, *on, decode=text)


def requeue(jid: str, queue: str) -> Call[str]:
    return op("requeue", jid, queue, decode=text)


def priority(jid: str, value: int) -> Call[str]:
    return op("priority", jid, value, decode=text)


def unfail(group: str, queue: str, count: int) -> Call[int]:
    return op("unfail", group, queue, count, decode=int)


def tag(jid: str, verb: str, tags: Sequence[str]) -> Call[list[str]]:
    return op("tag", jid, verb, *tags, decode=as_strings)


def track(jid: str, on: bool) -> Call[bool]:
    return op("track", jid, "on" if on else "off", decode=bool)


def set_paused(queue: str, paused: bool) -> Call[None]:
    return op("set_paused", queue, "1" if paused else "0", decode=lambda _: None)


def domain_limit(domain: str, limit: str) -> Call[int]:
    return op("domain_limit", domain, limit, decode=int)


def domain_pause(domain: str, paused: bool) -> Call[int]:
    return op("domain_pause", domain, "1" if paused else "0", decode=int)


def recur(definition: str, data: str, ticks: Sequence[int]) -> Call[Recurrence]:
    return op("recur", definition, data, *ticks, decode=Recurrence.from_definition)


def unrecur(id: str) -> Call[bool]:
    return op("unrecur", id, decode=bool)


def recur_ticks(id: str, cron: str, ticks: Sequence[int]) -> Call[int]:
    """Ticks at or before the newest stored one are ignored: safe to repeat."""
    return op("recur_ticks", id, cron, *ticks, decode=int, repeatable=True)


# --- batches (lua/lib/batch.lua) -------------------------------------------------------------


def batch_open(bid: str, description: str, on_success: Sequence[str],
               on_complete: Sequence[str]) -> Call[None]:  # fmt: skip
    """Creates a batch; each callback is [spec JSON, data JSON] or ["", ""]. Safe to
    repeat: the same open again changes nothing."""
    args = (bid, description, *on_success, *on_complete)
    return op("batch_open", *args, decode=as_none, repeatable=True)


def batch_close(bid: str) -> Call[dict[str, Any]]:
    """Seals a batch (safe to repeat: sealing again changes nothing)."""
    return op("batch_close", bid, decode=as_object, repeatable=True)


def batch_get(bid: str, failed_max: int) -> Call[dict[str, Any] | None]:
    """A batch as batch_get.lua answers it, None when there is none."""
    return op("batch_get", bid, failed_max, decode=as_object_or_none, repeatable=True)


def batch_retry(bid: str, count: int) -> Call[int]:
    """Runs up to `count` failed jobs of the batch again; how many."""
    return op("batch_retry", bid, count, decode=int)


# --- failures -----------------------------------------------------------------------------


def failed_groups() -> Call[dict[str, int]]:
    return op("failed", "", 0, 0, decode=lambda r: dict(as_object(r)["groups"]), repeatable=True)


def failed_jobs(group: str, start: int, count: int) -> Call[tuple[int, list[Job]]]:
    return op("failed", group, start, count, decode=as_page, repeatable=True)
