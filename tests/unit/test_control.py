"""The fork server's control messages (runtime.children.control): typed both ways,
one frame per datagram, and a ProtocolError for anything not one whole known
message."""

from __future__ import annotations

import os
import socket
import struct

import pytest

from runtime.children import control, protocol
from runtime.errors import ProtocolError

SETUP = control.Setup(
    worker="w1",
    modules=("app.jobs", "app.more"),
    sandbox_root="/var/lib/runtime/sandboxes/w1",
    sys_path=("/srv/app", "/usr/lib/python3"),
    address_space_mib=512,
    open_files=None,
    processes=64,
    user="jobs",
    group=None,
    sentry_dsn=None,
    log_level="DEBUG",
    namespace="ns",
    shards="",
)
MESSAGES: list[control.Control] = [
    SETUP,
    control.Setup(worker="w2", modules=(), sandbox_root="/tmp/s"),
    control.Spawn(3),
    control.Exit(),
    control.Serving(4242),
    control.NotServing("cannot import app.jobs: ModuleNotFoundError('app')"),
    control.Spawned(3, 4343),
    control.Reaped(4343, 0, None),
    control.Reaped(4344, None, 24, 9),
]


def datagram(body: bytes) -> bytes:
    return struct.pack("!I", len(body)) + body


def test_every_kind_is_in_the_table_and_tested() -> None:
    assert {type(m) for m in MESSAGES} == set(control.KINDS.values())
    assert len(control.KINDS) == 7


@pytest.mark.parametrize("message", MESSAGES, ids=lambda m: m.kind)
def test_every_message_survives_a_round_trip(message: control.Control) -> None:
    back = control.unpack(control.pack(message))
    assert back == message and type(back) is type(message)


def test_a_setup_comes_back_with_tuples_and_stays_frozen() -> None:
    back = control.unpack(control.pack(SETUP))
    assert isinstance(back, control.Setup)
    assert back.modules == ("app.jobs", "app.more") and back.sys_path == SETUP.sys_path
    with pytest.raises(AttributeError):
        back.worker = "w9"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("body", "error"),
    [
        (b'{"kind": "fork", "index": 1}', "malformed message"),  # unknown kind
        (b'{"kind": "run", "jid": "j1"}', "malformed message"),  # a pipe's, not ours
        (b'{"index": 1}', "malformed message"),  # no kind
        (b'{"kind": "spawn", "index": 1, "fds": [3]}', r"unknown fields \['fds'\] in spawn"),
        (b'{"kind": "exit", "now": true}', r"unknown fields \['now'\] in exit"),
        (b'{"kind": "spawned", "index": 1}', "malformed message"),  # a field missing
        (b"not json", "malformed message"),
        (b'{"kind": "exit"} {"kind": "exit"}', "malformed message"),
    ],
)
def test_what_is_not_one_known_message_is_refused(body: bytes, error: str) -> None:
    with pytest.raises(ProtocolError, match=error):
        control.unpack(datagram(body))


@pytest.mark.parametrize(
    ("raw", "error"),
    [
        (b"", "shorter than a frame header"),
        (b"\x00\x00", "shorter than a frame header"),
        (control.pack(SETUP)[:-1], "in a datagram of"),  # cut short
        (control.pack(control.Exit()) + b" ", "in a datagram of"),  # more than its frame
    ],
)
def test_a_length_that_does_not_match_its_datagram_is_refused(raw: bytes, error: str) -> None:
    with pytest.raises(ProtocolError, match=error):
        control.unpack(raw)


def test_a_message_over_a_datagram_is_not_packed() -> None:
    big = control.NotServing("x" * control.MAX_DATAGRAM)
    with pytest.raises(ProtocolError, match=r"not_serving message of \d+ bytes is over the limit"):
        control.pack(big)
    just = control.NotServing("x" * (control.MAX_DATAGRAM - 100))
    assert control.unpack(control.pack(just)) == just


def test_a_datagram_cut_by_a_small_buffer_is_refused_not_guessed() -> None:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    with ours, theirs:
        control.send(theirs, SETUP)
        with pytest.raises(ProtocolError, match="in a datagram of 40 bytes"):
            control.unpack(ours.recv(40))  # the rest of a datagram is dropped


def test_a_spawn_carries_its_file_descriptors() -> None:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    read_end, write_end = os.pipe()
    with ours, theirs:
        control.send(ours, control.Spawn(5), [write_end])
        os.close(write_end)
        payload, fds, _, _ = socket.recv_fds(theirs, control.MAX_DATAGRAM, 4)
        assert control.unpack(payload) == control.Spawn(5)
        [passed] = fds
        os.write(passed, b"hi")
        os.close(passed)
        assert os.read(read_end, 2) == b"hi"
    os.close(read_end)


def test_the_pipe_still_refuses_control_kinds() -> None:
    with pytest.raises(ProtocolError, match="malformed message"):
        protocol.decode(b'{"kind": "spawn", "index": 1}')
