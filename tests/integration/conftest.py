"""Fixtures for real masters: start them against the test Redis, always clean up."""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from runtime import Client
from runtime.queue.embedded import ServerProcess
from tests.support.master import MasterProcess

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
