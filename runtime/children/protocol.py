"""Messages between a master and its children, and their framing on the pipe.

A frame is a 4-byte big-endian length, then that many bytes of UTF-8 JSON: one
object with a `kind`. Frames above `MAX_FRAME_BYTES` are a protocol error, as is
anything that does not decode to a known message. Never pickle.

master -> child   run, lease, withdraw, stop
child -> master   ready, heartbeat, done, failed, skipped, put, progress

A job's output is not framed here: the child's stdout and stderr are a pipe the
master reads. When the child is done with a job (ran or skipped it) it writes an
end marker line on the pipe (MARK_END), before it says so on this socket: the
master knows whose every line is (runtime/master/output.py), and has all of a
job's output when its outcome comes. Log records go on the pipe as marked lines
(MARK_LOG).

A child runs its jobs one at a time in the order they came; while jobs are short
the master sends the next one or two before the running one ends (a pipeline),
so a child never waits for the master between jobs.

Messages are plain values, never changed once made; they are not frozen
dataclasses only because a frozen one sets each field through object.__setattr__,
several times slower to make, and a job takes two of them on each side.
"""

from __future__ import annotations

import json
import json.encoder
import json.scanner
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, TypeVar

from runtime.errors import ProtocolError

HEADER = struct.Struct("!I")
MAX_FRAME_BYTES = 96 * 1024 * 1024  # largest job data (64 MiB) and a traceback, with room


class Message:
    """A message: a dataclass with a `kind`; `names`, its fields' names, is set by
    `kinds` (below), which makes the table a decoder knows messages by."""

    kind: ClassVar[str]
    names: ClassVar[frozenset[str]]


M = TypeVar("M", bound=Message)


def kinds(*classes: type[M]) -> dict[str, type[M]]:
    """The message classes by kind, as `decode` takes them; each learns its fields."""
    for cls in classes:
        cls.names = frozenset(f.name for f in fields(cls))  # type: ignore[arg-type]
    return {cls.kind: cls for cls in classes}


@dataclass
class Run(Message):
    """Run one job. `deadline` is the CLOCK_MONOTONIC time the lease is safe until;
    `start_at`, for a job leased before its turn, the CLOCK_MONOTONIC time it starts."""

    kind: ClassVar[str] = "run"
    jid: str
    klass: str
    queue: str
    data: dict[str, Any] = field(repr=False)  # reprs reach logs and error reports
    attempt: int
    retries: int
    remaining: int
    deadline: float
    cpu_limit_s: float | None = None
    start_at: float | None = None
    batch: str | None = None  # the bid of the job's batch (ctx.batch)
    traceparent: str | None = None  # of the span that put it (runtime/children/tracing.py)


@dataclass
class Deadline(Message):
    """The lease on the running job was renewed: safe until `deadline` (monotonic)."""

    kind: ClassVar[str] = "deadline"
    jid: str
    deadline: float


@dataclass
class Withdraw(Message):
    """Do not start this job after all (it waits behind a long one, or its lease was
    lost): answered by `skipped` unless the job has already started."""

    kind: ClassVar[str] = "withdraw"
    jid: str


@dataclass
class Stop(Message):
    """Exit once idle (recycling, fewer children, shutdown)."""

    kind: ClassVar[str] = "stop"


@dataclass
class Ready(Message):
    """A child is up. `threads` and `loop_running` describe the process it was forked
    from at the moment of the fork (a clean fork point has one thread, no loop)."""

    kind: ClassVar[str] = "ready"
    pid: int
    parent: int
    threads: int
    loop_running: bool


@dataclass
class Heartbeat(Message):
    kind: ClassVar[str] = "heartbeat"
    jid: str


@dataclass
class Done(Message):
    """The job returned. `result`: its return value as JSON text ("" for None);
    `note`: why a value it returned is not kept (not JSON, too large); `cpu_s`,
    `max_rss_mb`, `rss_of_job`: what the attempt cost (runtime/children/usage.py;
    None: not measured)."""

    kind: ClassVar[str] = "done"
    jid: str
    result: str = field(default="", repr=False)
    note: str = ""
    cpu_s: float | None = None
    max_rss_mb: float | None = None
    rss_of_job: bool = True


@dataclass
class Put(Message):
    """The job puts a job: `spec` and `data` as JobSpec.to_wire() makes them. It goes
    with the job's completion (none if the job does not complete), or at once (`now`)."""

    kind: ClassVar[str] = "put"
    jid: str
    spec: str
    data: str = field(repr=False)
    now: bool = False


@dataclass
class Progress(Message):
    kind: ClassVar[str] = "progress"
    jid: str
    done: float
    total: float | None = None
    message: str | None = None


@dataclass
class Failed(Message):
    """The job raised. `retry` False: fail now (e.g. klass not allowed).
    `delay` None: the backoff policy decides when to retry."""

    kind: ClassVar[str] = "failed"
    jid: str
    group: str
    message: str
    retry: bool = True
    delay: float | None = None
    details: dict[str, Any] = field(default_factory=dict)
    cpu_s: float | None = None  # what the attempt cost, as in Done
    max_rss_mb: float | None = None
    rss_of_job: bool = True


@dataclass
class Skipped(Message):
    """A job the child did not and will not start: `why` is "withdrawn" or "lease"
    (its lease deadline had passed when its turn came)."""

    kind: ClassVar[str] = "skipped"
    jid: str
    why: str


KINDS: dict[str, type[Message]] = kinds(
    Run, Deadline, Withdraw, Stop, Ready, Heartbeat, Done, Failed, Skipped, Put, Progress
)

# Marker lines the child writes on its output pipe (stdout and stderr share it):
# MARK_END + b"<jid>\n" when it is done with a job (after what the job printed), and
# MARK_LOG + JSON {"level", "name", "message"} + b"\n" for a log record of the job.
MARK = b"\x00runtime:"
MARK_END, MARK_LOG = MARK + b"end ", MARK + b"log "

# JSON's C encoder and scanner, each made once: json.dumps with options and
# JSONEncoder.encode make a new encoder for every call, json.loads goes through
# three Python layers, and every job takes two frames on each side.
_dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode
_c_encoder = getattr(json.encoder, "c_make_encoder", None)
_encode_c = (
    _c_encoder(None, None, json.encoder.encode_basestring, None, ":", ",", False, False, True)
    if _c_encoder is not None
    else None
)
# the scanner json.loads uses (C); typeshed's stub of make_scanner names the wrong type
_scan = json.scanner.make_scanner(json.JSONDecoder())  # type: ignore[arg-type]


def _json(obj: dict[str, Any]) -> str:
    return "".join(_encode_c(obj, 0)) if _encode_c is not None else _dumps(obj)


def encode(message: Message) -> bytes:
    body = _json({"kind": message.kind, **vars(message)}).encode()  # vars: its fields
    size = len(body)
    if size > MAX_FRAME_BYTES:
        raise ProtocolError(f"{message.kind} message of {size} bytes is over the frame limit")
    return HEADER.pack(size) + body


def decode(body: bytes, known: Mapping[str, type[Message]] = KINDS) -> Message:
    """A frame's body as the message of `known` it names (a child's pipe: KINDS)."""
    try:
        text = body.decode()  # text: no guessing its encoding
        obj, end = _scan(text, 0)  # as json.loads, without its Python layers
        if end != len(text) and not text[end:].isspace():
            raise ValueError(f"extra data after the message at {end}")
        cls = known[obj.pop("kind")]
        if not cls.names.issuperset(obj):
            unknown = set(obj).difference(cls.names)
            raise ProtocolError(f"unknown fields {sorted(unknown)} in {cls.kind}")
        return cls(**obj)
    except ProtocolError:
        raise
    except StopIteration:  # the scanner found no value where one starts
        raise ProtocolError("malformed message: no JSON value") from None
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        raise ProtocolError(f"malformed message: {err!r}"[:200]) from None


class FrameBuffer:
    """Accumulates bytes from a stream and yields complete messages."""

    def __init__(self, limit: int = MAX_FRAME_BYTES) -> None:
        self.limit = limit
        self.buffer = bytearray()

    def feed(self, data: bytes) -> list[Message]:
        self.buffer += data
        out: list[Message] = []
        while len(self.buffer) >= HEADER.size:
            (size,) = HEADER.unpack_from(self.buffer)
            if size > self.limit:
                raise ProtocolError(f"frame of {size} bytes is over the limit of {self.limit}")
            end = HEADER.size + size
            if len(self.buffer) < end:
                break
            out.append(decode(bytes(self.buffer[HEADER.size : end])))
            del self.buffer[:end]
        return out


def read_message(sock: Any) -> Message | None:
    """Blocking read of one message from a socket; None at end of stream."""
    header = _read_exact(sock, HEADER.size)
    if header is None:
        return None
    (size,) = HEADER.unpack(header)
    if size > MAX_FRAME_BYTES:
        raise ProtocolError(f"frame of {size} bytes is over the limit")
    body = _read_exact(sock, size)
    if body is None:
        raise ProtocolError("stream ended inside a frame")
    return decode(body)


def _read_exact(sock: Any, size: int) -> bytes | None:
    chunks = bytearray()
    while len(chunks) < size:
        chunk = sock.recv(size - len(chunks))
        if not chunk:
            if chunks:
                raise ProtocolError("stream ended inside a frame")
            return None
        chunks += chunk
    return bytes(chunks)
