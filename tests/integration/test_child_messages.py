"""A child driven directly over its socket, as its master drives it: jobs sent
ahead run in order, a withdrawn one is skipped and marked ended on the output
pipe, and the same job sent again to the same child runs under its new Run."""

from __future__ import annotations

import os
import select
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from runtime.children import child as child_module
from runtime.children import protocol
from runtime.children.child import Child, Settings

J = "tests.integration.jobs"


class Driven:
    """A forked child running Child.serve on one end of a socketpair, its stdout and
    stderr on a pipe we read."""

    def __init__(self, workdir: Path) -> None:
        ours, theirs = socket.socketpair()
        read_fd, write_fd = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:  # pragma: no cover - the child process
            try:
                ours.close()
                os.close(read_fd)
                os.dup2(write_fd, 1)
                os.dup2(write_fd, 2)
                sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115
                sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
                settings = Settings(index=0, modules=(J,), workdir=workdir, worker="test-1")
                os._exit(Child(theirs, settings).serve())
            finally:
                os._exit(70)
        theirs.close()
        os.close(write_fd)
        self.sock, self.out_fd = ours, read_fd
        self.sock.settimeout(10)

    def send(self, message: protocol.Message) -> None:
        self.sock.sendall(protocol.encode(message))

    def receive(self) -> protocol.Message:
        message = protocol.read_message(self.sock)
        assert message is not None, "the child closed its socket"
        return message

    def output(self) -> bytes:
        out = b""
        while select.select([self.out_fd], [], [], 0.2)[0]:
            chunk = os.read(self.out_fd, 1 << 16)
            if not chunk:
                break
            out += chunk
        return out

    def close(self) -> None:
        self.send(protocol.Stop())
        self.sock.close()
        os.waitpid(self.pid, 0)
        os.close(self.out_fd)


@pytest.fixture
def child(tmp_path: Path) -> Iterator[Driven]:
    driven = Driven(tmp_path / "work")
    yield driven
    driven.close()


def run(jid: str, klass: str, data: dict[str, object]) -> protocol.Run:
    return protocol.Run(
        jid=jid,
        klass=f"{J}:{klass}",
        queue="q",
        data=data,
        attempt=1,
        retries=0,
        remaining=0,
        deadline=time.monotonic() + 30,
    )


def test_a_withdrawn_job_sent_again_to_the_same_child_runs_once_under_its_new_run(
    child: Driven,
) -> None:
    child.send(run("j1", "sleep", {"seconds": 0.5}))
    child.send(run("j2", "talk", {"word": "first"}))
    child.send(protocol.Withdraw("j2"))
    skipped = child.receive()
    assert isinstance(skipped, protocol.Skipped) and skipped.jid == "j2"
    child.send(run("j2", "talk", {"word": "again"}))  # given back, then to this child again
    said = [child.receive(), child.receive()]
    assert [(type(m).__name__, getattr(m, "jid", None)) for m in said] == [
        ("Done", "j1"),
        ("Done", "j2"),
    ], "the second Run of j2 keeps its own deadline: it runs, not skipped"
    out = child.output()
    ends = [line for line in out.split(b"\n") if line.startswith(protocol.MARK_END)]
    assert ends == [protocol.MARK_END + jid for jid in (b"j1", b"j2", b"j2")], out
    j2_runs = out.split(protocol.MARK_END + b"j2\n")
    assert b"to stdout again" in j2_runs[1] and b"first" not in out, "its output is after"


def test_a_job_withdrawn_twice_from_one_child_runs_in_the_place_of_its_last_run(
    child: Driven,
) -> None:
    """A job pipelined behind a long one is withdrawn (stuck), given back, sent to the
    same child again (the other one is busy too), withdrawn again, and sent a third
    time behind another job: the child holds three Runs of it, two withdrawn. It
    runs once, where the master's last Run put it (after j3): run at its second
    Run's place, its Done came while the master thought j3 ran ("unexpected done"),
    and the third Run's skip then gave the job back to run a second time."""
    child.send(run("j1", "sleep", {"seconds": 0.5}))
    for _ in range(2):
        child.send(run("j2", "talk", {"word": "two"}))
        child.send(protocol.Withdraw("j2"))
        skipped = child.receive()
        assert isinstance(skipped, protocol.Skipped) and skipped.jid == "j2"
    child.send(run("j3", "talk", {"word": "three"}))
    child.send(run("j2", "talk", {"word": "two"}))
    said = [child.receive() for _ in range(3)]
    assert [(type(m).__name__, getattr(m, "jid", None)) for m in said] == [
        ("Done", "j1"),
        ("Done", "j3"),
        ("Done", "j2"),
    ]
    out = child.output()
    ends = [line for line in out.split(b"\n") if line.startswith(protocol.MARK_END)]
    assert ends == [protocol.MARK_END + j for j in (b"j1", b"j2", b"j2", b"j3", b"j2")], out
    assert out.count(b"to stdout two") == 1, out


def test_a_job_whose_lease_ran_out_before_its_turn_is_skipped_and_marked_ended(
    child: Driven,
) -> None:
    """Every way a child is done with a job writes its end marker before it says so:
    here the lease of a job sent ahead ran out while the one before it ran."""
    child.send(run("j1", "talk", {"word": "one"}))
    stale = protocol.Run(
        jid="j2",
        klass=f"{J}:talk",
        queue="q",
        data={"word": "never"},
        attempt=1,
        retries=0,
        remaining=0,
        deadline=time.monotonic() - 1,
    )
    child.send(stale)
    child.send(run("j3", "talk", {"word": "three"}))
    said = [child.receive() for _ in range(3)]
    assert [(type(m).__name__, getattr(m, "jid", None)) for m in said] == [
        ("Done", "j1"),
        ("Skipped", "j2"),
        ("Done", "j3"),
    ]
    assert isinstance(said[1], protocol.Skipped) and said[1].why == "lease"
    out = child.output()
    parts = out.split(protocol.MARK_END)
    assert [p.split(b"\n", 1)[0] for p in parts[1:]] == [b"j1", b"j2", b"j3"], out
    assert b"to stdout one" in parts[0] and b"never" not in out
    assert b"to stdout three" in parts[2], "j3's output comes after j2's marker, before its own"


# --- who reads the socket: the main thread while idle, the reader while a job runs ---


@pytest.fixture
def in_process(tmp_path: Path) -> Iterator[tuple[Child, socket.socket]]:
    """A Child in this process (nothing forked, no sandbox) and the master's end."""
    ours, theirs = socket.socketpair()
    settings = Settings(index=0, modules=(J,), workdir=tmp_path / "work", worker="test-1")
    yield Child(theirs, settings), ours
    ours.close()
    theirs.close()


def _in_thread(fn: Callable[[], object], timeout_s: float = 5.0) -> object:
    """fn() on a thread of its own; its result, or a failure if it does not return."""
    got: list[object] = []
    worker = threading.Thread(target=lambda: got.append(fn()), daemon=True)
    worker.start()
    worker.join(timeout_s)
    assert got, f"{fn} did not return within {timeout_s} s"
    return got[0]


def test_an_idle_child_reads_its_next_job_off_the_socket_itself(
    in_process: tuple[Child, socket.socket],
) -> None:
    """No reader thread runs here: the job is read by the thread that runs it."""
    child, master = in_process
    master.sendall(protocol.encode(run("j1", "talk", {"word": "one"})))
    taken = _in_thread(child._next)
    assert isinstance(taken, protocol.Run) and taken.jid == "j1"
    assert "j1" in child.deadlines, "its deadline held from the moment it was read"
    assert not child.reader_turn.is_set(), "the reader thread reads only once a job has run"


def test_the_reader_thread_lets_go_of_the_socket_for_an_idle_child_and_takes_it_back(
    in_process: tuple[Child, socket.socket],
) -> None:
    child, master = in_process
    child.wake = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
    reader = threading.Thread(target=child._read_loop, daemon=True)
    reader.start()
    try:
        time.sleep(0.05)  # the reader looks for a running job now and then
        master.sendall(protocol.encode(run("j1", "talk", {"word": "one"})))
        master.sendall(protocol.encode(protocol.Withdraw("never-held")))
        taken = _in_thread(child._next)
        assert isinstance(taken, protocol.Run) and taken.jid == "j1"
        assert child._begin(taken), "j1 runs from now"
        later = time.monotonic() + 60
        master.sendall(protocol.encode(protocol.Deadline("j1", later)))  # while j1 "runs"
        deadline = time.monotonic() + 5
        while child.deadlines.get("j1") != later and time.monotonic() < deadline:
            time.sleep(0.01)
        assert child.deadlines["j1"] == later, "the reader thread reads again"
        assert child.reader_turn.is_set(), "it took the socket: j1 has run a while"
        child._ended("j1")
        master.sendall(protocol.encode(run("j2", "talk", {"word": "two"})))
        second = _in_thread(child._next)
        assert isinstance(second, protocol.Run) and second.jid == "j2"
        master.sendall(protocol.encode(protocol.Stop()))
        assert _in_thread(child._next) is None, "told to stop while idle"
    finally:
        master.shutdown(socket.SHUT_RDWR)  # the reader thread reads the end and returns
        reader.join(5)
        os.close(child.wake)


def test_a_reader_thread_parked_by_a_long_idle_spell_is_woken_by_the_next_job(
    in_process: tuple[Child, socket.socket], monkeypatch: pytest.MonkeyPatch
) -> None:
    child, master = in_process
    monkeypatch.setattr(child_module, "READER_PARK_S", 0.0)  # parked at its first look
    child.wake = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
    reader = threading.Thread(target=child._read_loop, daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 5
        while not child.parked and time.monotonic() < deadline:
            time.sleep(0.01)
        assert child.parked, "no job came: the reader thread waits to be woken"
        master.sendall(protocol.encode(run("j1", "talk", {"word": "one"})))
        taken = _in_thread(child._next)
        assert isinstance(taken, protocol.Run) and child._begin(taken)
        assert not child.parked and child.reader_turn.is_set(), "woken as j1 starts"
        later = time.monotonic() + 60
        master.sendall(protocol.encode(protocol.Deadline("j1", later)))
        while child.deadlines.get("j1") != later and time.monotonic() < deadline:
            time.sleep(0.01)
        assert child.deadlines["j1"] == later, "the reader thread reads for j1"
    finally:
        master.shutdown(socket.SHUT_RDWR)
        reader.join(5)
        os.close(child.wake)
