"""Messages between a master and its fork server (runtime.children.forkserver),
and their framing on the control socket.

The socket is SOCK_SEQPACKET: one message is one datagram, and a spawn's file
descriptors go alongside it. A datagram holds one frame as a child's pipe
carries it (runtime.children.protocol: a 4-byte length, then UTF-8 JSON with a
`kind`), of at most MAX_DATAGRAM bytes; a length that does not match the
datagram (one cut short by a receiver's buffer) is a protocol error, as is an
unknown kind or field. Never pickle.

    master -> server   setup, spawn {index} + [child socket, output pipe], exit
    server -> master   serving {pid} | not_serving {message}, spawned {index, pid},
                       reaped {pid, code, signal, raw_signal}

Messages are frozen dataclasses: a few are sent per child, never per job.
"""

from __future__ import annotations

import socket
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar, cast

from runtime.children import protocol
from runtime.errors import ProtocolError

MAX_DATAGRAM = 1 << 16  # the largest frame, its header included; receivers read this much


@dataclass(frozen=True)
class Setup(protocol.Message):
    """The fork server's settings, the master's first message: the modules it imports
    once, and what each child it forks is (its worker's id, its workdir under
    `sandbox_root`, its sandbox's limits and identity)."""

    kind: ClassVar[str] = "setup"
    worker: str
    modules: tuple[str, ...]
    sandbox_root: str
    sys_path: tuple[str, ...] = ()  # empty: the interpreter's own
    address_space_mib: int | None = None
    open_files: int | None = None
    processes: int | None = None
    user: str | None = None
    group: str | None = None
    sentry_dsn: str | None = None
    log_level: str = "INFO"
    namespace: str = ""
    shards: str = ""
    otel: bool = False  # tracing wanted (runtime/children/tracing.py): the SDK is preloaded
    otel_file: str | None = None  # spans to this file, one JSON line each

    def __post_init__(self) -> None:  # JSON has lists, not tuples
        object.__setattr__(self, "modules", tuple(self.modules))
        object.__setattr__(self, "sys_path", tuple(self.sys_path))


@dataclass(frozen=True)
class Spawn(protocol.Message):
    """Fork a child for slot `index`; its message socket and the write end of its
    output pipe come with this message."""

    kind: ClassVar[str] = "spawn"
    index: int


@dataclass(frozen=True)
class Exit(protocol.Message):
    """Exit once the last child has exited (retired, or the master stops)."""

    kind: ClassVar[str] = "exit"


@dataclass(frozen=True)
class Serving(protocol.Message):
    """The fork server imported the job modules and takes spawns."""

    kind: ClassVar[str] = "serving"
    pid: int


@dataclass(frozen=True)
class NotServing(protocol.Message):
    """The fork server could not start (a module failed to import); it exits."""

    kind: ClassVar[str] = "not_serving"
    message: str


@dataclass(frozen=True)
class Spawned(protocol.Message):
    """The child for slot `index` was forked."""

    kind: ClassVar[str] = "spawned"
    index: int
    pid: int


@dataclass(frozen=True)
class Reaped(protocol.Message):
    """A child ended and was reaped, its process group killed. `signal` is SIGXCPU
    for a child the kernel killed at its hard CPU limit; `raw_signal` the signal that
    really ended it."""

    kind: ClassVar[str] = "reaped"
    pid: int
    code: int | None
    signal: int | None
    raw_signal: int | None = None


Control = Setup | Spawn | Exit | Serving | NotServing | Spawned | Reaped
KINDS = protocol.kinds(Setup, Spawn, Exit, Serving, NotServing, Spawned, Reaped)


def pack(message: Control) -> bytes:
    """The datagram of a message."""
    frame = protocol.encode(message)
    if len(frame) > MAX_DATAGRAM:
        raise ProtocolError(f"{message.kind} message of {len(frame)} bytes is over the limit")
    return frame


def unpack(datagram: bytes) -> Control:
    """The message of a datagram; ProtocolError unless it is one whole known message."""
    if len(datagram) < protocol.HEADER.size:
        raise ProtocolError(f"datagram of {len(datagram)} bytes is shorter than a frame header")
    (size,) = protocol.HEADER.unpack_from(datagram)
    if size != len(datagram) - protocol.HEADER.size:
        raise ProtocolError(f"frame of {size} bytes in a datagram of {len(datagram)} bytes")
    return cast(Control, protocol.decode(datagram[protocol.HEADER.size :], KINDS))


def send(sock: socket.socket, message: Control, fds: Sequence[int] = ()) -> None:
    """Sends one message, with `fds` alongside."""
    if fds:
        socket.send_fds(sock, [pack(message)], list(fds))
    else:
        sock.send(pack(message))
