"""The master's STATUS and WATCHDOG notifications: sent from the loop's pass,
rate-limited, and due at known times (so an idle loop wakes for them)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from runtime.master.notify import Notifier
from runtime.master.status import STATUS_EVERY_S, TITLE_EVERY_S, Status


@pytest.fixture
def systemd(tmp_path: Path) -> Iterator[socket.socket]:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(tmp_path / "notify"))
    sock.setblocking(False)
    yield sock
    sock.close()


def received(sock: socket.socket) -> list[str]:
    out = []
    while True:
        try:
            out.append(sock.recv(4096).decode())
        except BlockingIOError:
            return out


def status(sock: socket.socket, watchdog_usec: str | None = None) -> Status:
    env = {"NOTIFY_SOCKET": sock.getsockname()}
    if watchdog_usec is not None:
        env["WATCHDOG_USEC"] = watchdog_usec
    return Status(Notifier(env), "host-1")


def test_watchdog_pings_go_at_most_every_half_interval(systemd: socket.socket) -> None:
    s = status(systemd, "500000")  # 0.5 s: a ping every 0.25 s
    s.show(lambda: "idle", 10.0)
    assert received(systemd) == ["STATUS=idle", "WATCHDOG=1"]
    for now in (10.0625, 10.125, 10.1875):
        s.show(lambda: "idle", now)
    assert received(systemd) == []
    assert s.next_due(10.1875) == 0.0625
    s.show(lambda: "idle", 10.25)
    assert received(systemd) == ["WATCHDOG=1"]


def test_without_a_watchdog_an_unchanged_status_asks_for_no_wake_up(
    systemd: socket.socket,
) -> None:
    s = status(systemd)
    s.show(lambda: "idle", 5.0)
    assert received(systemd) == ["STATUS=idle"]
    assert s.next_due(5.0) is None


def test_status_changes_are_rate_limited_and_the_last_one_is_sent(
    systemd: socket.socket,
) -> None:
    s = status(systemd)
    s.show(lambda: "busy=1", 1.0)
    s.show(lambda: "busy=2", 1.1)
    s.show(lambda: "busy=3", 1.2)
    assert received(systemd) == ["STATUS=busy=1"]
    assert s.next_due(1.2) == pytest.approx(1.0 + STATUS_EVERY_S - 1.2)
    s.show(lambda: "busy=3", 1.0 + STATUS_EVERY_S)
    assert received(systemd) == ["STATUS=busy=3"]


def test_the_state_is_described_at_most_every_title_interval_and_a_pass_comes_for_it(
    systemd: socket.socket,
) -> None:
    s = status(systemd)
    described: list[float] = []

    def describe(now: float) -> str:
        described.append(now)
        return f"busy={len(described)}"

    s.show(lambda: describe(1.0), 1.0)
    s.show(lambda: describe(1.01), 1.01)  # too soon: not described, but a pass is due
    assert described == [1.0]
    assert s.next_due(1.01) == pytest.approx(TITLE_EVERY_S - 0.01)
    s.show(lambda: describe(1.0 + TITLE_EVERY_S), 1.0 + TITLE_EVERY_S)
    assert described == [1.0, 1.0 + TITLE_EVERY_S]
