"""Framing of the master-child messages: length + JSON, a size limit, and a
ProtocolError (never a crash, never a guess) for anything malformed."""

from __future__ import annotations

import json
import socket
import struct

import pytest

from runtime.children import protocol
from runtime.errors import ProtocolError

RUN = protocol.Run(
    jid="j1",
    klass="app.jobs:send",
    queue="q",
    data={"to": "a@b.c", "n": [1, 2]},
    attempt=1,
    retries=5,
    remaining=4,
    deadline=123.5,
    cpu_limit_s=None,
)
MESSAGES: list[protocol.Message] = [
    RUN,
    protocol.Deadline("j1", 99.0),
    protocol.Stop(),
    protocol.Ready(10, 9, 1, False),
    protocol.Heartbeat("j1"),
    protocol.Done("j1"),
    protocol.Failed("j1", "builtins.ValueError", "Traceback ...", retry=False, delay=1.5),
]


def frame(body: bytes) -> bytes:
    return struct.pack("!I", len(body)) + body


@pytest.mark.parametrize("message", MESSAGES, ids=lambda m: m.kind)
def test_every_message_survives_a_round_trip(message: protocol.Message) -> None:
    assert protocol.FrameBuffer().feed(protocol.encode(message)) == [message]


def test_frames_split_anywhere_come_out_whole_and_in_order() -> None:
    stream = b"".join(protocol.encode(m) for m in MESSAGES)
    buffer, out = protocol.FrameBuffer(), []
    for i in range(0, len(stream), 7):
        out += buffer.feed(stream[i : i + 7])
    assert out == MESSAGES and not buffer.buffer


def test_a_partial_frame_waits_for_the_rest() -> None:
    data = protocol.encode(RUN)
    buffer = protocol.FrameBuffer()
    assert buffer.feed(data[:3]) == []  # not even a whole header
    assert buffer.feed(data[3:-1]) == []
    assert buffer.feed(data[-1:]) == [RUN]


def test_a_frame_over_the_limit_is_refused_from_its_header() -> None:
    buffer = protocol.FrameBuffer(limit=100)
    with pytest.raises(ProtocolError, match="over the limit of 100"):
        buffer.feed(struct.pack("!I", 101))  # refused before any body arrives


def test_a_message_over_the_limit_is_not_encoded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(protocol, "MAX_FRAME_BYTES", 64)
    with pytest.raises(ProtocolError, match="over the frame limit"):
        protocol.encode(protocol.Failed("j1", "g", "x" * 100))


@pytest.mark.parametrize(
    ("body", "error"),
    [
        (b"not json", "malformed message"),
        (b"\xff\xfe", "malformed message"),
        (b"[1, 2]", "malformed message"),
        (b'{"jid": "j1"}', "malformed message"),  # no kind
        (b'{"kind": "pickle", "jid": "j1"}', "malformed message"),  # unknown kind
        (b'{"kind": "done"}', "malformed message"),  # a field missing
        (b'{"kind": "done", "jid": "j1", "extra": 1}', "unknown fields"),
        (b'{"kind": "stop", "kind2": 1}', "unknown fields"),
        (b"", "malformed message"),
        (b'{"kind": "stop"} {"kind": "stop"}', "malformed message"),  # data after it
        (b'{"kind": "stop"', "malformed message"),  # cut short
    ],
)
def test_malformed_bodies_are_protocol_errors(body: bytes, error: str) -> None:
    with pytest.raises(ProtocolError, match=error):
        protocol.FrameBuffer().feed(frame(body))


def test_whitespace_after_a_message_is_allowed_as_json_loads_allows_it() -> None:
    assert protocol.decode(b'{"kind": "stop"} \n') == protocol.Stop()


def test_a_stream_that_ends_inside_a_frame_is_a_protocol_error() -> None:
    ours, theirs = socket.socketpair()
    with ours, theirs:
        theirs.sendall(protocol.encode(RUN)[:-5])
        theirs.close()
        with pytest.raises(ProtocolError, match="stream ended inside a frame"):
            protocol.read_message(ours)


def test_a_stream_that_ends_between_frames_is_its_end() -> None:
    ours, theirs = socket.socketpair()
    with ours, theirs:
        theirs.sendall(protocol.encode(protocol.Done("j1")))
        theirs.close()
        assert protocol.read_message(ours) == protocol.Done("j1")
        assert protocol.read_message(ours) is None


def test_job_data_never_shows_in_a_message_repr() -> None:
    assert "a@b.c" not in repr(RUN)
    assert json.loads(protocol.encode(RUN)[4:])["data"] == {"to": "a@b.c", "n": [1, 2]}
