"""An exchange's calls and its reply (MasterClient.exchange, runtime.queue.aio):
what goes before the reports (progress, live output, the puts made at once),
whether the reports ride in the pop's call (lua/exchange.lua), and the
ExchangeReply read back from the results, where a report refused by a passing
condition waits in `unsent` for the next exchange. Sans-IO: values in, values
out.
"""

from __future__ import annotations

from typing import Any

from runtime.errors import Error, RedisTransient
from runtime.queue import ops
from runtime.queue.leases import ExchangeReply, Outcomes, Popped
from runtime.queue.ops import Call


def together(outcomes: Outcomes) -> bool:
    """Whether an exchange's reports go in its pop's call (lua/exchange.lua): when
    it has completions, retries or failures and no releases (those go in a call
    of their own, before the pop)."""
    return not outcomes.release and bool(outcomes.complete or outcomes.retry or outcomes.fail)


First = tuple[Outcomes, Call[Any]]  # progress or puts sent first, and their call


def first_calls(worker: str, outcomes: Outcomes) -> list[First]:
    """What goes before the reports: the progress (one call), then the puts made at
    once (one call per job putting them), each with the outcomes it carries."""
    first: list[First] = []
    if outcomes.progress:
        first.append(
            (Outcomes(progress=outcomes.progress), ops.progress(worker, outcomes.progress.values()))
        )
    if outcomes.live:  # what running jobs printed: one call, in the same round trip
        first.append((Outcomes(live=outcomes.live), ops.live(worker, outcomes.live.values())))
    for rows in outcomes.puts_by_job().values():
        part = Outcomes(puts=rows)
        [(_, call)] = ops.puts_at_once(part)
        first.append((part, call))
    return first


def exchanged(
    outcomes: Outcomes,
    first: list[First],
    reports: list[tuple[Any, Call[Any]]],
    results: list[Any],
    popped: Popped | None,
    sent_at: float,
) -> ExchangeReply:
    """States of the reports and the puts; those refused by a transient condition
    go to `unsent` when the pop went through (else, if none was taken, the refusal
    is raised). The progress reports' answers are dropped."""
    states: dict[str, str | Error] = {}
    put: dict[str, str | Error] = {}
    unsent = Outcomes()
    for (part, _), value in zip(first, results, strict=False):
        if isinstance(value, RedisTransient):
            unsent.merge(part)
        elif part.puts:
            jids = [row[0] for row in part.puts]
            got = [value] * len(jids) if isinstance(value, Error) else value
            put.update(zip(jids, got, strict=True))
    for (kind, _), value in zip(reports, results[len(first) :], strict=True):
        if isinstance(value, RedisTransient):
            unsent.merge(outcomes.only(kind))
        elif isinstance(value, Error):
            states.update((jid, value) for jid in outcomes.jids(kind))
        else:
            states.update(value)
    if popped is None and len(unsent) == len(outcomes) and len(unsent):
        raise next(v for v in results if isinstance(v, RedisTransient))
    return ExchangeReply(states, popped, sent_at, unsent, put)
