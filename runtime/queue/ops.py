"""Every operation's arguments and reply decoding, written once (sans-IO).

A `Call` says what to send (a Lua operation of lua/ with its ARGV, or a plain
command) and how to read the reply; it does no I/O. The synchronous `Client`
(connection.py), the application's `AsyncClient` (adriver.py) and the master's
`MasterClient` (aio.py) run the same Calls through the same plan
(scripts.run), so nothing else builds ARGV or parses a reply. `repeatable`
marks calls that are safe to send again when a first try's fate is unknown:
reads, put (the jid is chosen before the call), and the lease holder's reports
with the same token (the scripts answer a repeat as done).

A reply that does not decode raises `CorruptReply`, a data error about that
reply; a pop's jobs are decoded one by one (runtime.queue.leases).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date
from typing import Any, Generic, TypeVar

from runtime import vocabulary
from runtime.errors import CorruptReply, Error
from runtime.queue import stats, wire
from runtime.queue.job import RECORDS, Job
from runtime.queue.keys import Keys
from runtime.queue.leases import (
    CompleteRow,
    FailRow,
    Kind,
    Leased,
    LiveRow,
    Outcomes,
    Popped,
    ProgressRow,
    RetryRow,
)
from runtime.queue.recur import Recurrence
from runtime.queue.stats import QueueStats
from runtime.vocabulary import ENDED_STATES, JobState

T = TypeVar("T")
Arg = str | int | float | bytes
DECODE_ERRORS = (ValueError, TypeError, KeyError, IndexError, AttributeError, RecursionError)


@dataclass(frozen=True)
class Call(Generic[T]):
    """One operation: what to send and how to read its reply. `script`: `name` is
    an operation of lua/ (sent by FCALL or EVALSHA with the namespace root as its
    only key) and `args` its ARGV; else `name` and `args` are a plain command.
    `blocks_s`: the command may wait this long for data before answering."""

    name: str
    args: tuple[Arg, ...]
    decode: Callable[[Any], T]
    script: bool = True
    repeatable: bool = False
    blocks_s: float = 0.0

    def read(self, reply: Any) -> T:
        """The reply decoded; CorruptReply if it does not decode."""
        try:
            return self.decode(reply)
        except Error:
            raise
        except DECODE_ERRORS as err:
            raise CorruptReply(f"the reply to {self.name} does not decode: {err!r}") from err


def text(value: object) -> str:
    """A reply value as text (replies are bytes: the connection does not decode)."""
    return value.decode() if isinstance(value, bytes) else str(value)


_decode_json = json.JSONDecoder().decode  # json.loads of text, one call less


def read_json(reply: Any) -> Any:
    return json.loads(reply)


def _raw(reply: Any) -> Any:
    return reply


def _op(name: str, *args: Arg, decode: Callable[[Any], T], repeatable: bool = False) -> Call[T]:
    return Call(name, args, decode, script=True, repeatable=repeatable)


def _cmd(name: str, *args: Arg, decode: Callable[[Any], T], repeatable: bool = True) -> Call[T]:
    return Call(name, args, decode, script=False, repeatable=repeatable)


def raw(operation: str, *args: Arg) -> Call[Any]:
    """An operation with its reply as Redis sent it (for tests and tools)."""
    return _op(operation, *args, decode=_raw)


# --- putting and reading jobs ------------------------------------------------------------


def put(specs: Iterable[wire.JobSpec]) -> Call[list[str]]:
    """Puts jobs in one atomic call: their jids (a unique key's holder for duplicates)."""
    args = [arg for spec in specs for arg in spec.to_wire()]
    return Call("put", tuple(args), _strings, repeatable=True)


def _strings(reply: Any) -> list[str]:
    items = _decode_json(reply.decode() if isinstance(reply, bytes) else reply)
    if not isinstance(items, list) or not set(map(type, items)) <= {str}:
        raise TypeError("expected a list of text")
    return items


def get(jids: Sequence[str]) -> Call[list[Job | None]]:
    def decode(reply: Any) -> list[Job | None]:
        return [None if r is None else _job(r) for r in read_json(reply)]

    return _op("get", *jids, decode=decode, repeatable=True)


def _job(reply: Any) -> Job:
    try:
        return Job.from_reply(reply)
    except DECODE_ERRORS as err:
        jid = reply.get("jid") if isinstance(reply, dict) else None
        raise CorruptReply(f"a job does not decode: {err!r}", jid) from err


def _jobs(reply: Any) -> list[Job]:
    return [_job(r) for r in read_json(reply)]


def peek(queue: str, count: int) -> Call[list[Job]]:
    return _op("peek", queue, count, decode=_jobs, repeatable=True)


def message_status(jid: str) -> Call[str | None]:
    return _op("message_status", jid, decode=_text_or_none, repeatable=True)


def _text_or_none(reply: Any) -> str | None:
    return None if reply is None else text(reply)


def now() -> Call[int]:
    return _op("now", decode=int, repeatable=True)


def counts(queues: Iterable[str]) -> Call[dict[str, dict[str, Any]]]:
    return _op("counts", *queues, decode=_object, repeatable=True)


def workers() -> Call[dict[str, dict[str, Any]]]:
    return _op("workers", decode=_object, repeatable=True)


def _object(reply: Any) -> Any:
    value = read_json(reply)
    if not isinstance(value, dict):
        raise TypeError("expected a JSON object")
    return value


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
        value = _object(reply)
        state, folded = JobState(value["state"]), str(value.get("jid") or "")
        if state == JobState.FAILED:
            group, message = str(value["group"]), str(value["message"])
            return Ending(state, group=group, message=message, jid=folded)
        if state == JobState.CANCELLED:
            return Ending(state, at_ms=int(value["at_ms"]), by=str(value["by"]), jid=folded)
        return Ending(state, result=value.get("result"), jid=folded)

    return _op("wait", jid, for_ms, decode=decode, repeatable=True)


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
        _cmd("RPUSH", key, "1", decode=_none),
        _cmd("LTRIM", key, 0, 0, decode=_none),
        _cmd("PEXPIRE", key, round(linger_s * 1000), decode=_none),
    ]


# --- changing jobs (never sent twice: a repeat would not be the same change) ---------------


def cancel(jids: Sequence[str], by: str = vocabulary.CancelledBy.API) -> Call[list[str]]:
    """Deletes the jobs, leaving a tombstone of those not ended (where memory
    allows) that says `by` what (runtime.vocabulary.CancelledBy): the jids deleted."""
    return _op("cancel", by, *jids, decode=_strings)


def depends(jid: str, verb: str, on: Sequence[str]) -> Call[str]:
    return _op("depends", jid, verb, *on, decode=text)


def requeue(jid: str, queue: str) -> Call[str]:
    return _op("requeue", jid, queue, decode=text)


def priority(jid: str, value: int) -> Call[str]:
    return _op("priority", jid, value, decode=text)


def unfail(group: str, queue: str, count: int) -> Call[int]:
    return _op("unfail", group, queue, count, decode=int)


def tag(jid: str, verb: str, tags: Sequence[str]) -> Call[list[str]]:
    return _op("tag", jid, verb, *tags, decode=_strings)


def track(jid: str, on: bool) -> Call[bool]:
    return _op("track", jid, "on" if on else "off", decode=bool)


def set_paused(queue: str, paused: bool) -> Call[None]:
    return _op("set_paused", queue, "1" if paused else "0", decode=lambda _: None)


def domain_limit(domain: str, limit: str) -> Call[int]:
    return _op("domain_limit", domain, limit, decode=int)


def domain_pause(domain: str, paused: bool) -> Call[int]:
    return _op("domain_pause", domain, "1" if paused else "0", decode=int)


def recur(definition: str, data: str, ticks: Sequence[int]) -> Call[Recurrence]:
    return _op("recur", definition, data, *ticks, decode=Recurrence.from_definition)


def unrecur(id: str) -> Call[bool]:
    return _op("unrecur", id, decode=bool)


def recur_ticks(id: str, cron: str, ticks: Sequence[int]) -> Call[int]:
    """Ticks at or before the newest stored one are ignored: safe to repeat."""
    return _op("recur_ticks", id, cron, *ticks, decode=int, repeatable=True)


# --- batches (lua/lib/batch.lua) -------------------------------------------------------------


def batch_open(bid: str, description: str, on_success: Sequence[str],
               on_complete: Sequence[str]) -> Call[None]:  # fmt: skip
    """Creates a batch; each callback is [spec JSON, data JSON] or ["", ""]. Safe to
    repeat: the same open again changes nothing."""
    args = (bid, description, *on_success, *on_complete)
    return _op("batch_open", *args, decode=_none, repeatable=True)


def batch_close(bid: str) -> Call[dict[str, Any]]:
    """Seals a batch (safe to repeat: sealing again changes nothing)."""
    return _op("batch_close", bid, decode=_object, repeatable=True)


def batch_get(bid: str, failed_max: int) -> Call[dict[str, Any] | None]:
    """A batch as batch_get.lua answers it, None when there is none."""
    return _op("batch_get", bid, failed_max, decode=_object_or_none, repeatable=True)


def batch_retry(bid: str, count: int) -> Call[int]:
    """Runs up to `count` failed jobs of the batch again; how many."""
    return _op("batch_retry", bid, count, decode=int)


def _object_or_none(reply: Any) -> Any:
    return None if reply is None else _object(reply)


# --- failures -----------------------------------------------------------------------------


def failed_groups() -> Call[dict[str, int]]:
    return _op("failed", "", 0, 0, decode=lambda r: dict(_object(r)["groups"]), repeatable=True)


def failed_jobs(group: str, start: int, count: int) -> Call[tuple[int, list[Job]]]:
    return _op("failed", group, start, count, decode=_page, repeatable=True)


def _page(reply: Any) -> tuple[int, list[Job]]:
    """A page of jobs: (how many there are in all, these jobs)."""
    page = _object(reply)
    return int(page["total"]), [_job(r) for r in page["jobs"]]


# --- the lease holder's side ----------------------------------------------------------------


@dataclass(frozen=True)
class Heartbeat:
    renewed: tuple[str, ...]
    lost: tuple[str, ...]


def pop(
    worker: str, count: int, queues: Sequence[str], order: str = "ordered",
    ahead_s: float = 0.0, idle: bool = False, rtt_s: float = 0.0,
) -> Call[Popped]:  # fmt: skip
    """Leases up to `count` jobs (a fresh seed for the tokens). Never sent twice: a
    lost reply's jobs stay leased to `worker` until their lease runs out. `idle`:
    a master that waits for work if it comes back short, with round trips to
    Redis of about `rtt_s` (the first lease of a job handed to it fits them)."""
    ahead_us, idle_ms = round(ahead_s * 1e6), wire.idle_arg(idle, rtt_s)
    args: tuple[Arg, ...] = (worker, count, wire.seed(), order, ahead_us, idle_ms, *queues)
    return _op("pop", *args, decode=lambda r: Popped.from_reply(_object(r)))


def pop_jobs(worker: str, count: int, queue: str) -> Call[list[tuple[Job, str]]]:
    """A pop by hand (not a master): each leased job as a `Job` value with its
    lease token (which the value itself never carries)."""
    args = (worker, wire.check_count(count), wire.seed(), "ordered", 0, 0, queue)
    return _op("pop", *args, decode=lambda r: [_leased_job(j) for j in _object(r)["jobs"]])


def _leased_job(reply: Any) -> tuple[Job, str]:
    job = _job(reply)
    token = reply["meta"].get("l")
    if not isinstance(token, str):
        raise CorruptReply(f"a leased job carries no lease token: {job.jid}", job.jid)
    return job, token


def heartbeat(worker: str, leases: Mapping[str, str]) -> Call[Heartbeat]:
    args = [worker, *_flat(leases.items())]
    return _op("heartbeat", *args, decode=_heartbeat, repeatable=True)


def _heartbeat(reply: Any) -> Heartbeat:
    value = _object(reply)
    return Heartbeat(tuple(map(str, value["renewed"])), tuple(map(str, value["lost"])))


def _flat(rows: Iterable[Iterable[Arg]]) -> list[Arg]:
    return [value for row in rows for value in row]


def _batch(name: str, worker: str, rows: Iterable[Iterable[Arg]]) -> Call[dict[str, str | Error]]:
    """A report on many jobs: {jid: state, or the error of that job}."""
    return _op(name, worker, *_flat(rows), decode=lambda r: wire.outcomes(read_json(r)),
               repeatable=True)  # fmt: skip


def complete(worker: str, rows: Iterable[CompleteRow]) -> Call[dict[str, str | Error]]:
    """Outputs are cut to the scripts' cap here."""
    return _batch("complete", worker, ((j, t, o, r, wire.cap_output(out), u)
                                       for j, t, o, r, out, u in rows))  # fmt: skip


def fail(worker: str, rows: Iterable[FailRow]) -> Call[dict[str, str | Error]]:
    """Messages and outputs are cut to the scripts' caps here."""
    capped = ((j, t, g, wire.cap_message(m), wire.cap_output(o), u) for j, t, g, m, o, u in rows)
    return _batch("fail", worker, capped)


def retry(worker: str, rows: Iterable[RetryRow]) -> Call[dict[str, str | Error]]:
    """Messages and outputs are cut to the scripts' caps here."""
    capped = ((j, t, g, wire.cap_message(m), d, wire.cap_output(o), u)
              for j, t, g, m, d, o, u in rows)  # fmt: skip
    return _batch("retry", worker, capped)


def progress(worker: str, rows: Iterable[ProgressRow]) -> Call[dict[str, str | Error]]:
    """Running jobs' progress."""
    flat = ((j, t, repr(wire.check_progress(d)), "" if n is None else repr(wire.check_progress(n)),
             m or "") for j, t, d, n, m in rows)  # fmt: skip
    return _batch("progress", worker, flat)


def live(worker: str, rows: Iterable[LiveRow]) -> Call[dict[str, str | Error]]:
    """What running jobs printed since their last batch (lua/live.lua)."""
    return _batch("live", worker, ((j, t, text, d) for j, t, text, d in rows))


def live_read(
    keys: Keys, jid: str, after: str = "0-0", count: int = 100
) -> Call[tuple[str, list[tuple[str, int]]]]:
    """A running job's live output after entry `after` (lua/live.lua): the last
    entry's id, and its batches as (text, lines dropped), oldest first."""
    args: tuple[Arg, ...] = ("COUNT", count, "STREAMS", keys.key("live", jid=jid), after)

    def decode(reply: Any) -> tuple[str, list[tuple[str, int]]]:
        last, batches = after, []
        streams = reply.values() if isinstance(reply, dict) else [e for _, e in reply or ()]
        for entries in streams:  # one stream: RESP3 answers a map, RESP2 a list
            for entry_id, values in entries:
                fields = {text(k): v for k, v in _entry_fields(values)}
                last = text(entry_id)
                batches.append((text(fields.get("o", b"")), int(fields.get("d", 0))))
        return last, batches

    return Call("XREAD", args, decode, script=False, repeatable=True)


def live_tail(keys: Keys, jid: str, count: int) -> Call[str]:
    """The text of a running job's last `count` live batches, oldest first."""

    def decode(reply: Any) -> str:
        texts = [text(dict(_entry_fields(values)).get(b"o", b"")) for _, values in reply or ()]
        return "".join(reversed(texts))

    key = keys.key("live", jid=jid)
    return Call("XREVRANGE", (key, "+", "-", "COUNT", count), decode, script=False, repeatable=True)


def _entry_fields(values: Any) -> Iterable[tuple[Any, Any]]:
    """A stream entry's fields as (name, value) pairs (a flat list, or a dict)."""
    if isinstance(values, dict):
        return values.items()
    return zip(values[::2], values[1::2], strict=True)


def release(
    worker: str, leases: Mapping[str, str], started: Iterable[str] = ()
) -> Call[dict[str, str | Error]]:
    """Gives jobs back unfinished; the jids in `started` had started (their attempt
    counts), the others never did."""
    ran = set(started)
    return _batch("release", worker, ((j, t, int(j in ran)) for j, t in leases.items()))


def reports(worker: str, outcomes: Outcomes) -> list[tuple[str, Call[dict[str, str | Error]]]]:
    """The calls that send a master's collected reports, one per kind: (kind, call)."""
    calls = {
        "complete": lambda: complete(worker, outcomes.complete.values()),
        "retry": lambda: retry(worker, outcomes.retry),
        "fail": lambda: fail(worker, outcomes.fail),
        "release": lambda: release(worker, outcomes.release, outcomes.started),
    }
    return [(kind, calls[kind]()) for kind in outcomes.kinds()]


@dataclass(frozen=True)
class Exchange:
    """What an exchange call answered: each report's {jid: state or error} by
    kind (complete, retry, fail), and the pop."""

    states: dict[Kind, dict[str, str | Error]]
    popped: Popped


EXCHANGED: tuple[Kind, ...] = ("complete", "retry", "fail")  # the reports an exchange carries


def exchange(
    worker: str, outcomes: Outcomes, count: int, queues: Sequence[str], order: str = "ordered",
    ahead_s: float = 0.0, idle: bool = False, rtt_s: float = 0.0,
) -> Call[Exchange]:  # fmt: skip
    """The completions, retries and failures of `outcomes` (not its releases,
    progress or puts), then a pop, in one call (lua/exchange.lua). Never sent
    twice, like a pop: the reports are safe to send again, but a lost reply's
    jobs stay leased to `worker` until their lease runs out."""
    completes = [(j, t, o, r, wire.cap_output(out), u)
                 for j, t, o, r, out, u in outcomes.complete.values()]  # fmt: skip
    retries = [(j, t, g, wire.cap_message(m), d, wire.cap_output(o), u)
               for j, t, g, m, d, o, u in outcomes.retry]  # fmt: skip
    fails = [(j, t, g, wire.cap_message(m), wire.cap_output(o), u)
             for j, t, g, m, o, u in outcomes.fail]  # fmt: skip
    args = (
        worker, count, wire.seed(), order, round(ahead_s * 1e6), wire.idle_arg(idle, rtt_s),
        len(completes), len(retries), len(fails),
        *_flat(completes), *_flat(retries), *_flat(fails), *queues,
    )  # fmt: skip
    return _op("exchange", *args, decode=_exchange)


def _exchange(reply: Any) -> Exchange:
    value = _object(reply)
    states = {kind: wire.outcomes(value[kind]) for kind in EXCHANGED}
    return Exchange(states, Popped.from_reply(value["pop"]))


def puts_at_once(outcomes: Outcomes) -> list[tuple[list[str], Call[list[str]]]]:
    """The calls that put the jobs running jobs put at once: one per job putting
    them (all or nothing for that job), with the jids of their specs."""
    calls = []
    for rows in outcomes.puts_by_job().values():
        args = [arg for row in rows for arg in (row.spec, row.data)]
        jids = [row.jid for row in rows]
        calls.append((jids, _op("put", *args, decode=_strings, repeatable=True)))
    return calls


def resumed(worker: str, outage_ms: int) -> Call[Any]:
    """A master tells that it reaches Redis again after `outage_ms` without it
    (lua/resumed.lua: leases are not reaped for a grace period). Safe to repeat."""
    return _op("resumed", worker, outage_ms, decode=_loose, repeatable=True)


def _loose(reply: Any) -> Any:
    """A reply read as JSON when it is, else as it came (an integer, a status)."""
    if isinstance(reply, bytes) and reply[:1] in (b"{", b"["):
        return read_json(reply)
    return reply


def forget_worker(worker: str, queues: Sequence[str]) -> Call[int]:
    """A goodbye: safe to repeat (a second one finds nothing to give back)."""
    return _op("forget_worker", worker, *queues, decode=int, repeatable=True)


def event(raw: Any) -> dict[str, Any]:
    """One event of a tracked job, as published on the events channel."""
    try:
        value: dict[str, Any] = _object(raw)
    except DECODE_ERRORS as err:
        raise CorruptReply(f"an event does not decode: {err!r}") from err
    return value


# --- plain commands -------------------------------------------------------------------------


def ping() -> Call[None]:
    return _cmd("PING", decode=lambda _: None)


def wait_for_work(keys: Sequence[str], timeout_s: float) -> Call[tuple[str, bytes] | None]:
    """BLPOP on the keys: (key, value) of the first to get something, None on timeout.
    Not repeatable: a lost reply lost the value it took."""

    def decode(reply: Any) -> tuple[str, bytes] | None:
        if reply is None:
            return None
        key, value = reply
        return text(key), value if isinstance(value, bytes) else str(value).encode()

    return Call("BLPOP", (*keys, timeout_s), decode, script=False, blocks_s=timeout_s)


def handed(value: bytes) -> Leased:
    """A job handed to a waiting master (its own wake-up list, handoff.lua), as
    `wait_for_work` returned it; CorruptReply (with the jid when known) if it
    does not decode."""
    try:
        reply = read_json(value)
    except DECODE_ERRORS as err:
        raise CorruptReply(f"a handed job does not decode: {err!r}") from err
    if not isinstance(reply, dict):
        raise CorruptReply("a handed job is not a JSON object")
    return Leased.from_reply(reply)


def wake_at_us(value: bytes) -> int | None:
    """When a queue's wake-up token asks its master to look (Redis time, us): a
    handed job's first lease ends then ('at:<us>', handoff.lua); None for a token
    that says look now ('1', or anything else put there)."""
    if value.startswith(b"at:") and value[3:].isdigit():
        return int(value[3:])
    return None


def give_back(key: str) -> list[Call[None]]:
    """A wake-up token put back (at most one on the list)."""
    return [_cmd("RPUSH", key, "1", decode=_none), _cmd("LTRIM", key, 0, 0, decode=_none)]


def _none(_: Any) -> None:
    return None


def delete(key: str) -> Call[None]:
    return _cmd("DEL", key, decode=_none)


def _pairs(reply: Any) -> dict[str, str]:
    """An HGETALL reply (a map in RESP3, a flat [field, value, ...] list in
    RESP2) as a dict of text."""
    if isinstance(reply, dict):
        return {text(k): text(v) for k, v in reply.items()}
    items = list(reply)
    return {text(k): text(v) for k, v in zip(items[::2], items[1::2], strict=True)}


def hash_of(key: str) -> Call[dict[str, str]]:
    return _cmd("HGETALL", key, decode=_pairs)


def recurrences(keys: Keys) -> Call[list[Recurrence]]:
    def decode(reply: Any) -> list[Recurrence]:
        found = (Recurrence.from_definition(v) for v in _pairs(reply).values())
        return sorted(found, key=lambda r: r.id)

    return _cmd("HGETALL", keys.key("recur"), decode=decode)


def domain_limits(keys: Keys) -> Call[dict[str, dict[str, float]]]:
    def decode(reply: Any) -> dict[str, dict[str, float]]:
        return {domain: _object(limit) for domain, limit in _pairs(reply).items()}

    return _cmd("HGETALL", keys.key("domain_limits"), decode=decode)


def throughput(minutes: int) -> Call[stats.Throughput]:
    """Jobs completed and failed per minute, all queues, the last `minutes` of them."""
    return _op(
        "throughput", minutes, decode=lambda r: stats.throughput(read_json(r)), repeatable=True
    )


def queue_stats(keys: Keys, queue: str, day: date) -> Call[QueueStats]:
    key = keys.key("stats", queue=queue, day=stats.day_number(day))
    return _cmd("HGETALL", key, decode=lambda reply: stats.parse(queue, day, _pairs(reply)))


def setting(keys: Keys, name: str) -> Call[str | None]:
    """One shared setting as stored (None: not set, its default applies)."""
    return _cmd("HGET", keys.key("config"), name, decode=_text_or_none)


def set_setting(keys: Keys, name: str, value: str) -> Call[None]:
    return _cmd("HSET", keys.key("config"), name, value, decode=_none)


def unset_setting(keys: Keys, name: str) -> Call[None]:
    return _cmd("HDEL", keys.key("config"), name, decode=_none)


def members(
    key: str, start: int = 0, stop: int = -1, newest_first: bool = False
) -> Call[list[str]]:
    """Members of a sorted set by rank (ZRANGE / ZREVRANGE)."""
    name = "ZREVRANGE" if newest_first else "ZRANGE"
    return _cmd(name, key, start, stop, decode=lambda r: [text(m) for m in r])


def cardinality(key: str) -> Call[int]:
    return _cmd("ZCARD", key, decode=int)


# --- operating: listing, forgetting, workers, metrics ---------------------------------------

LISTED_STATES = vocabulary.LISTED_STATES


def jobs(
    queue: str, state: str, start: int, count: int, oldest_first: bool
) -> Call[tuple[int, list[Job]]]:
    """A page of a queue's jobs in one state (lua/jobs.lua): (total, jobs)."""
    order = "oldest" if oldest_first else "newest"
    return _op("jobs", queue, state, start, count, order, decode=_page, repeatable=True)


def queue_forget(queue: str) -> Call[bool]:
    """Forgets an empty queue (WrongState if it is not); False if it was not known."""
    return _op("queue_forget", queue, decode=bool, repeatable=True)


def retention(batch: int) -> Call[int]:
    """Deletes up to `batch` completed jobs past retention; how many (runs while Redis is full)."""
    return _op("retention", batch, decode=int, repeatable=True)


def queue_known(keys: Keys, queue: str) -> Call[bool]:
    """Whether the queue was ever used (it is in the list of queues)."""
    return _cmd("ZSCORE", keys.key("queues"), queue, decode=lambda r: r is not None)


def register_worker(
    worker: str, *, host: str, pid: int, queues: Sequence[str], concurrency: int,
    started_ms: int | None = None,
) -> Call[None]:  # fmt: skip
    """A master tells who it is (lua/worker_info.lua): where it runs, what it serves."""
    info = {"host": host, "pid": pid, "queues": list(queues), "concurrency": concurrency,
            "started_ms": started_ms, "records": RECORDS}  # fmt: skip
    return _op("worker_info", worker, wire.dumps(info), decode=_none, repeatable=True)


def metrics(up_ms: int) -> Call[dict[str, Any]]:
    """Everything a scrape shows, in one call (lua/metrics.lua)."""
    return _op("metrics", up_ms, decode=_object, repeatable=True)


def server_info() -> Call[dict[str, str]]:
    """INFO (its default sections) as {field: value}."""

    def decode(reply: Any) -> dict[str, str]:
        fields = (line.partition(":") for line in text(reply).splitlines())
        return {k: v for k, sep, v in fields if sep and not k.startswith("#")}

    return _cmd("INFO", decode=decode)


def domains(count: int) -> Call[dict[str, dict[str, Any]]]:
    """Domains with a limit of their own or a spent budget (lua/domains.lua)."""
    return _op("domains", count, decode=_object, repeatable=True)


def list_range(key: str, start: int, stop: int) -> Call[list[str]]:
    """Entries of a list by index (LRANGE; negative indexes count from the tail)."""
    return _cmd("LRANGE", key, start, stop, decode=lambda r: [text(m) for m in r])
