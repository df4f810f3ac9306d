"""A lease holder's operations: pop, heartbeat and the reports on leased jobs
(complete, retry, fail, release, progress, live output), a master's `exchange`
(its reports and its next pop in one call), the puts its running jobs make,
its goodbye; and a master waiting for work on its queues' wake-up lists.
runtime.queue.aio sends them for the master, runtime.queue.api.holder for a
worker that pops by hand.

Repeats: the reports with the same token are safe to send again (the scripts
answer a repeat as done); a pop or an exchange never is, since a lost reply's
jobs stay leased to the worker until their lease runs out. A pop's jobs are
decoded one by one (runtime.queue.leases).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from runtime.errors import CorruptReply, Error
from runtime.queue import wire
from runtime.queue.job import Job
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
from runtime.queue.ops.call import (
    DECODE_ERRORS,
    Arg,
    Call,
    as_job,
    as_loose,
    as_none,
    as_object,
    as_strings,
    cmd,
    flat,
    op,
    read_json,
    text,
)


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
    return op("pop", *args, decode=lambda r: Popped.from_reply(as_object(r)))


def pop_jobs(worker: str, count: int, queue: str) -> Call[list[tuple[Job, str]]]:
    """A pop by hand (not a master): each leased job as a `Job` value with its
    lease token (which the value itself never carries)."""
    args = (worker, wire.check_count(count), wire.seed(), "ordered", 0, 0, queue)
    return op("pop", *args, decode=lambda r: [_leased_job(j) for j in as_object(r)["jobs"]])


def _leased_job(reply: Any) -> tuple[Job, str]:
    job = as_job(reply)
    token = reply["meta"].get("l")
    if not isinstance(token, str):
        raise CorruptReply(f"a leased job carries no lease token: {job.jid}", job.jid)
    return job, token


def heartbeat(worker: str, leases: Mapping[str, str]) -> Call[Heartbeat]:
    args = [worker, *flat(leases.items())]
    return op("heartbeat", *args, decode=_heartbeat, repeatable=True)


def _heartbeat(reply: Any) -> Heartbeat:
    value = as_object(reply)
    return Heartbeat(tuple(map(str, value["renewed"])), tuple(map(str, value["lost"])))


def _batch(name: str, worker: str, rows: Iterable[Iterable[Arg]]) -> Call[dict[str, str | Error]]:
    """A report on many jobs: {jid: state, or the error of that job}."""
    return op(name, worker, *flat(rows), decode=lambda r: wire.outcomes(read_json(r)),
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
        *flat(completes), *flat(retries), *flat(fails), *queues,
    )  # fmt: skip
    return op("exchange", *args, decode=_exchange)


def _exchange(reply: Any) -> Exchange:
    value = as_object(reply)
    states = {kind: wire.outcomes(value[kind]) for kind in EXCHANGED}
    return Exchange(states, Popped.from_reply(value["pop"]))


def puts_at_once(outcomes: Outcomes) -> list[tuple[list[str], Call[list[str]]]]:
    """The calls that put the jobs running jobs put at once: one per job putting
    them (all or nothing for that job), with the jids of their specs."""
    calls = []
    for rows in outcomes.puts_by_job().values():
        args = [arg for row in rows for arg in (row.spec, row.data)]
        jids = [row.jid for row in rows]
        calls.append((jids, op("put", *args, decode=as_strings, repeatable=True)))
    return calls


def resumed(worker: str, outage_ms: int) -> Call[Any]:
    """A master tells that it reaches Redis again after `outage_ms` without it
    (lua/resumed.lua: leases are not reaped for a grace period). Safe to repeat."""
    return op("resumed", worker, outage_ms, decode=as_loose, repeatable=True)


def forget_worker(worker: str, queues: Sequence[str]) -> Call[int]:
    """A goodbye: safe to repeat (a second one finds nothing to give back)."""
    return op("forget_worker", worker, *queues, decode=int, repeatable=True)


def event(raw: Any) -> dict[str, Any]:
    """One event of a tracked job, as published on the events channel."""
    try:
        value: dict[str, Any] = as_object(raw)
    except DECODE_ERRORS as err:
        raise CorruptReply(f"an event does not decode: {err!r}") from err
    return value


# --- a master waiting for work -----------------------------------------------------------


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
    return [cmd("RPUSH", key, "1", decode=as_none), cmd("LTRIM", key, 0, 0, decode=as_none)]
