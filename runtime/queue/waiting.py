"""Waiting for a job to end, written once for both clients (sans-IO).

`wait` is a plan of round trips: it yields the Calls (runtime.queue.ops) of
each round trip and receives their results, doing no I/O itself. The
synchronous `Client` and the asyncio `AsyncClient` drive it, each over its
own connection, so a wait sends the same commands and ends the same way on
either: the job's result, or the error `outcome` maps its ending to.

No polling: the first call reads the job and registers a waiter
(lua/wait.lua); the script that ends the job pushes to the job's wake-up list
(lua/lib/wait.lua), on which the next round trip blocks (BLPOP, at most
WAIT_SLICE_S) and, in the same round trip, reads the job again. A job that
ends after 3 s costs three commands: wait, BLPOP, wait.
"""

from __future__ import annotations

import math
import time
from collections.abc import Generator
from typing import Any

from runtime.errors import JobCancelled, JobFailed, WaitTimeout
from runtime.queue import ops, wire
from runtime.queue.keys import Keys
from runtime.queue.ops import Call, Ending
from runtime.vocabulary import JobState

WAIT_SLICE_S = 5.0  # a wait blocks at most this long per round trip (under the socket timeout)
WAIT_MIN_S = 0.001  # BLPOP takes milliseconds (and 0 would wait forever)

# A plan of round trips: yields each one's Calls, receives their decoded results.
Steps = Generator[list[Call[Any]], list[Any], Any]


def wait(keys: Keys, jid: str, timeout: float | None) -> Steps:
    """The round trips of `Client.wait(jid, timeout)`; returns the job's result or
    raises as `outcome` says (WaitTimeout when `timeout` seconds pass first). The
    jid a job's duplicate put was given (ctx.put under a unique key) waits for
    the job it was folded into."""
    limit_s = None if timeout is None else wire.check_seconds("timeout", timeout)
    deadline = None if limit_s is None else time.monotonic() + limit_s
    [ending] = yield [ops.wait(jid, _ms(_slice_s(deadline)))]
    jid = ending.jid or jid
    key = keys.waited(jid)
    while not ending.ended:
        block_s = _slice_s(deadline)
        if block_s <= 0:
            raise WaitTimeout(jid, limit_s or 0.0)
        # blocks, then reads the job (and registers for the next slice) at once
        next_s = _slice_s(None if deadline is None else deadline - block_s)
        _, ending = yield [ops.wait_for_end(key, round(block_s, 3)), ops.wait(jid, _ms(next_s))]
    return outcome(jid, ending)


def outcome(jid: str, ending: Ending) -> Any:
    """What a wait answers for a job that ended: its result, JobFailed, or
    JobCancelled for a tombstone. (A job missing, or cancelled with no tombstone
    left, never gets here: lua/wait.lua refuses it, NoSuchJob.)"""
    if ending.state == JobState.FAILED:
        raise JobFailed(jid, ending.group, ending.message)
    if ending.state == JobState.CANCELLED:
        raise JobCancelled(jid, ending.at_ms, ending.by)
    return ending.result


def blocked_on(request: list[Call[Any]]) -> tuple[str, float] | None:
    """The wake-up list a round trip of `wait` blocks on first, and for how long
    (None for a round trip that does not block). A driver may serve that BLPOP
    its own way, then send the rest of the round trip (runtime.queue.waiters:
    one BLPOP for all the waits of an asyncio connection); the plan receives
    the token (or None) in its place."""
    first = request[0] if request else None
    if first is None or first.script or first.name != "BLPOP" or len(first.args) != 2:
        return None
    key, timeout_s = first.args
    return str(key), float(timeout_s)


def blocks_s(calls: list[Call[Any]]) -> float:
    """How long a round trip of these calls may wait for data before answering."""
    return max((call.blocks_s for call in calls), default=0.0)


def _slice_s(deadline: float | None) -> float:
    """How long the next blocking read of a wait may last: WAIT_SLICE_S at most,
    0 once less than WAIT_MIN_S is left before `deadline` (monotonic)."""
    if deadline is None:
        return WAIT_SLICE_S
    left_s = min(WAIT_SLICE_S, deadline - time.monotonic())
    return left_s if left_s >= WAIT_MIN_S else 0.0


def _ms(seconds: float) -> int:
    return math.ceil(seconds * 1000)
