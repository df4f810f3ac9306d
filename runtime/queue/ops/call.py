"""A `Call` (one operation: what to send and how to read its reply) and the
decoders the operations share. Sans-IO: nothing here sends anything; the
drivers (runtime.queue.connection, adriver, aio) run Calls through the plan of
runtime.queue.scripts.

A reply that does not decode raises `CorruptReply`, a data error about that
reply (`Call.read`); `as_job` names the jid of a job that does not decode.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from runtime.errors import CorruptReply, Error
from runtime.queue.job import Job

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


def op(name: str, *args: Arg, decode: Callable[[Any], T], repeatable: bool = False) -> Call[T]:
    """A Lua operation of lua/ (not repeatable unless said)."""
    return Call(name, args, decode, script=True, repeatable=repeatable)


def cmd(name: str, *args: Arg, decode: Callable[[Any], T], repeatable: bool = True) -> Call[T]:
    """A plain command (repeatable unless said)."""
    return Call(name, args, decode, script=False, repeatable=repeatable)


def raw(operation: str, *args: Arg) -> Call[Any]:
    """An operation with its reply as Redis sent it (for tests and tools)."""
    return op(operation, *args, decode=_raw)


def as_strings(reply: Any) -> list[str]:
    items = _decode_json(reply.decode() if isinstance(reply, bytes) else reply)
    if not isinstance(items, list) or not set(map(type, items)) <= {str}:
        raise TypeError("expected a list of text")
    return items


def as_job(reply: Any) -> Job:
    try:
        return Job.from_reply(reply)
    except DECODE_ERRORS as err:
        jid = reply.get("jid") if isinstance(reply, dict) else None
        raise CorruptReply(f"a job does not decode: {err!r}", jid) from err


def as_jobs(reply: Any) -> list[Job]:
    return [as_job(r) for r in read_json(reply)]


def as_object(reply: Any) -> Any:
    value = read_json(reply)
    if not isinstance(value, dict):
        raise TypeError("expected a JSON object")
    return value


def as_object_or_none(reply: Any) -> Any:
    return None if reply is None else as_object(reply)


def as_page(reply: Any) -> tuple[int, list[Job]]:
    """A page of jobs: (how many there are in all, these jobs)."""
    page = as_object(reply)
    return int(page["total"]), [as_job(r) for r in page["jobs"]]


def as_pairs(reply: Any) -> dict[str, str]:
    """An HGETALL reply (a map in RESP3, a flat [field, value, ...] list in
    RESP2) as a dict of text."""
    if isinstance(reply, dict):
        return {text(k): text(v) for k, v in reply.items()}
    items = list(reply)
    return {text(k): text(v) for k, v in zip(items[::2], items[1::2], strict=True)}


def as_text_or_none(reply: Any) -> str | None:
    return None if reply is None else text(reply)


def as_none(_: Any) -> None:
    return None


def as_loose(reply: Any) -> Any:
    """A reply read as JSON when it is, else as it came (an integer, a status)."""
    if isinstance(reply, bytes) and reply[:1] in (b"{", b"["):
        return read_json(reply)
    return reply


def flat(rows: Iterable[Iterable[Arg]]) -> list[Arg]:
    return [value for row in rows for value in row]
