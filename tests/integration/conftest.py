"""Fixtures for real masters: start them against the test Redis, always clean up."""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from runtime import Client
from runtime import cli as runtime_cli
from runtime.queue.embedded import ServerProcess
from tests.support import redis_faults
from tests.support.fault_run import FaultRun
from tests.support.master import MasterProcess
from tests.support.proxy import Proxy

StartMaster = Callable[..., MasterProcess]


@pytest.fixture
def workdir() -> Iterator[Path]:
    path = Path(f"/tmp/rt-it-{uuid.uuid4().hex[:8]}")
    path.mkdir()
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def start_master(
    default_server: ServerProcess, plain_client: Client, workdir: Path
) -> Iterator[StartMaster]:
    masters: list[MasterProcess] = []

    def start(queues: str = "q", *args: str, ready: bool = True, **kwargs: object) -> MasterProcess:
        master = MasterProcess(default_server, plain_client.keys.namespace, workdir, queues,
                               *args, **kwargs)  # type: ignore[arg-type]  # fmt: skip
        masters.append(master)
        return master.start(ready=ready)

    yield start
    for master in masters:
        master.close()


@pytest.fixture
def own() -> Iterator[ServerProcess]:
    """A redis-server of the test's own (the fault tests change its state)."""
    with redis_faults.private_server() as server:
        yield server


@pytest.fixture
def own_proxy(own: ServerProcess) -> Iterator[Proxy]:
    """The TCP proxy in front of the test's own server."""
    with Proxy(str(own.socket)) as running:
        yield running


@pytest.fixture
def run(own: ServerProcess, workdir: Path) -> Iterator[FaultRun]:
    """Masters, jobs and a ledger of attempts on the test's own server."""
    fault_run = FaultRun(own, workdir)
    yield fault_run
    fault_run.close()


Invoke = Callable[..., tuple[int, str, str]]


@pytest.fixture
def cli(
    plain_client: Client, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Invoke:
    """Runs `runtime ARGS` in-process against the test namespace: (code, stdout, stderr)."""
    monkeypatch.setenv("REDIS_URL", plain_client.url)
    monkeypatch.setenv("RUNTIME_NAMESPACE", plain_client.keys.namespace)

    def invoke(*args: str) -> tuple[int, str, str]:
        code = runtime_cli.run(list(args))
        out, err = capsys.readouterr()
        return code, out, err

    return invoke
