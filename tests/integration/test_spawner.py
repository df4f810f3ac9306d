"""The master's side of a fork server on its own: the fork server is reaped the
moment it exits (killed, or retired once its children are gone), with a pidfd
and, where there is none, once its socket closes; a fork server that fails to
start is reaped before the error is raised."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from runtime.children import control
from runtime.errors import ConfigError
from runtime.master.spawner import Spawner

DEADLINE_S = 10.0


def config(workdir: Path, modules: list[str]) -> control.Setup:
    return control.Setup(
        worker="test-spawner",
        modules=tuple(modules),
        sandbox_root=str(workdir / "sandboxes"),
        sys_path=tuple(sys.path),
    )


def reaped(pid: int) -> bool:
    """Gone from /proc: neither alive nor a zombie."""
    return not Path(f"/proc/{pid}").exists()


def run(
    workdir: Path, end: str, modules: list[str] | None = None
) -> tuple[int, int, list[tuple[int, int | None, int | None]]]:
    """Starts a fork server, forks a child, ends the server by `end`: (its pid, its
    returncode as reaped, the children's exits it reported)."""
    exits: list[tuple[int, int | None, int | None]] = []
    gone: list[int] = []

    async def main() -> tuple[int, int]:
        server = Spawner(
            config(workdir, modules or []),
            dict(os.environ),
            lambda pid, code, sig: exits.append((pid, code, sig)),
            lambda _server, code: gone.append(code),
        )
        await server.start()
        assert server.pid is not None
        child, sock, out = await server.spawn(0)
        sock.close()
        os.close(out)
        if end == "killed":
            os.kill(server.pid, signal.SIGKILL)
        else:  # retired: it exits once its child has
            server.retire()
            os.kill(child, signal.SIGKILL)
        assert server.exited is not None
        code = await asyncio.wait_for(asyncio.shield(server.exited), DEADLINE_S)
        assert gone == [code] and server.gone
        return server.pid, code

    pid, code = asyncio.run(main())
    return pid, code, exits


@pytest.mark.parametrize("pidfd", [True, False], ids=["pidfd", "no-pidfd"])
@pytest.mark.parametrize("end", ["killed", "retired"])
def test_a_fork_server_is_reaped_as_it_exits(
    workdir: Path, monkeypatch: pytest.MonkeyPatch, pidfd: bool, end: str
) -> None:
    if not pidfd:

        def no_pidfd(pid: int, flags: int = 0) -> int:
            raise OSError(38, "Function not implemented")

        monkeypatch.setattr(os, "pidfd_open", no_pidfd)
    pid, code, exits = run(workdir, end)
    assert reaped(pid), "no zombie left"
    assert code == (-signal.SIGKILL if end == "killed" else 0)
    [(_, _, sig)] = exits
    assert sig == signal.SIGKILL, "its child's end is reported either way"


def test_a_fork_server_that_cannot_start_is_reaped_before_the_error(workdir: Path) -> None:
    started: list[Spawner] = []

    async def main() -> None:
        server = Spawner(config(workdir, ["no_such_module_here"]), dict(os.environ), print)
        started.append(server)
        await server.start()

    with pytest.raises(ConfigError, match="cannot import no_such_module_here"):
        asyncio.run(main())
    [server] = started
    assert server.pid is not None and reaped(server.pid)


@pytest.mark.parametrize(
    ("first", "said"),
    [
        (control.pack(control.Spawn(0)), "spawn came before the setup"),
        (b'{"kind": "setup"}', "a bad setup: frame of 2065853289 bytes in a datagram"),  # no header
    ],
    ids=["spawn", "unframed"],
)
def test_a_fork_server_not_set_up_first_says_so_and_exits(first: bytes, said: str) -> None:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    process = subprocess.Popen(
        [sys.executable, "-m", "runtime.children.forkserver", str(theirs.fileno())],
        pass_fds=[theirs.fileno()],
    )
    theirs.close()
    with ours:
        ours.send(first)
        ours.settimeout(DEADLINE_S)
        reply = control.unpack(ours.recv(control.MAX_DATAGRAM))
    assert isinstance(reply, control.NotServing) and reply.message.startswith(said)
    assert process.wait(DEADLINE_S) == 1


def test_a_serving_fork_server_drops_a_bad_message_and_serves_on(workdir: Path) -> None:
    exits: list[tuple[int, int | None, int | None]] = []

    async def main() -> None:
        server = Spawner(config(workdir, []), dict(os.environ), lambda *ended: exits.append(ended))
        await server.start()
        assert server.ctl is not None
        read_end, write_end = os.pipe()
        socket.send_fds(server.ctl, [b"\x00\x00\x00\x02{}"], [write_end])  # no kind
        os.close(write_end)
        child, sock, out = await asyncio.wait_for(server.spawn(0), DEADLINE_S)
        assert os.read(read_end, 1) == b"", "the fds that came with it were closed"
        os.close(read_end)
        sock.close()
        os.close(out)
        os.kill(child, signal.SIGKILL)
        await asyncio.wait_for(server.stop(), DEADLINE_S)
        assert exits == [(child, None, signal.SIGKILL)]

    asyncio.run(main())
