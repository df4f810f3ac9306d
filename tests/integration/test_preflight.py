"""Start-up checks with real `runtime worker` processes: a worker that must not
start says why in one line and exits non-zero before it forks anything; what is
unsafe but allowed is a warning."""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Iterator

import pytest

from runtime import config
from runtime.errors import ConfigError
from runtime.master import preflight
from runtime.queue.embedded import ServerProcess
from runtime.queue.server import ServerFacts
from tests.integration.conftest import StartMaster
from tests.support import redis_faults
from tests.support.master import MasterProcess

ACL_PASSWORD = "preflight-secret-1"


@pytest.fixture(scope="module")
def private_server() -> Iterator[ServerProcess]:
    """A server of our own (with AOF), whose settings the tests change."""
    with redis_faults.private_server(appendonly=True) as server:
        yield server


def refused(master: MasterProcess, code: int) -> str:
    """The one line a worker that refused to start wrote; asserts its exit code."""
    assert master.wait(30) == code, master.log()
    lines = master.log().splitlines()
    assert len(lines) == 1, lines
    assert "ready" not in lines[0]
    return lines[0]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def config_set(server: ServerProcess, name: str, value: str) -> None:
    with redis_faults.connect(server) as conn:
        conn.config_set(name, value)


@pytest.mark.parametrize(("flag", "name"), [("--user", "no-such-user-x"), ("--group", "nogrp-x")])
def test_an_unknown_user_or_group_is_one_line_and_exit_2_before_any_child(
    start_master: StartMaster, flag: str, name: str
) -> None:
    master = start_master("q", "-c", "2", flag, name, ready=False)
    line = refused(master, 2)
    assert line == f"runtime: error: unknown {flag[2:]} {name!r} ({flag})"
    assert master.notifications() == [], "never said ready"


def test_a_module_that_cannot_be_imported_is_one_line_and_exit_2(
    start_master: StartMaster,
) -> None:
    master = start_master(
        "q", "-c", "1", "--allow-no-aof", ready=False, modules=("tests.integration.nosuchmod",)
    )
    line = refused(master, 2)
    assert line.startswith("runtime: error: cannot import tests.integration.nosuchmod: ")
    assert "No module named 'tests.integration.nosuchmod'" in line
    assert "READY=1" not in master.notifications()


def test_an_unreachable_redis_is_one_line_and_exit_3(start_master: StartMaster) -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"
    master = start_master("q", "-c", "1", ready=False, env={"REDIS_URL": url})
    line = refused(master, 3)
    assert line.startswith(f"runtime: error: cannot reach Redis at {url}")


def test_wrong_credentials_exit_3_without_showing_the_password(
    start_master: StartMaster, private_server: ServerProcess
) -> None:
    url = f"unix://nobody-here:{ACL_PASSWORD}@{private_server.socket}"
    master = start_master("q", "-c", "1", ready=False, env={"REDIS_URL": url})
    line = refused(master, 3)
    assert "refused the credentials" in line and ACL_PASSWORD not in line


@pytest.mark.parametrize(  # any policy but noeviction evicts (ServerFacts.evicting): one by default
    "policy",
    [
        "allkeys-lru",
        pytest.param("volatile-ttl", marks=pytest.mark.slow),
        pytest.param("allkeys-random", marks=pytest.mark.slow),
    ],
)
def test_an_evicting_redis_is_refused_unless_allowed(
    start_master: StartMaster, private_server: ServerProcess, policy: str
) -> None:
    config_set(private_server, "maxmemory-policy", policy)
    try:
        env = {"REDIS_URL": private_server.url}
        master = start_master("q", "-c", "1", ready=False, env=env)
        line = refused(master, 2)
        assert f"evicts keys when full (maxmemory-policy {policy})" in line
        assert "--allow-eviction" in line
        allowed = start_master("q", "-c", "1", "--allow-eviction", env=env)
        warning = [ln for ln in allowed.log().splitlines() if "evicts keys" in ln]
        assert len(warning) == 1 and "WARNING" in warning[0]
    finally:
        config_set(private_server, "maxmemory-policy", "noeviction")


def test_a_redis_without_aof_warns_once_unless_told_not_to(
    start_master: StartMaster, default_server: ServerProcess
) -> None:
    warned = start_master("q", "-c", "1")  # the suite's server runs without AOF
    lines = [ln for ln in warned.log().splitlines() if "append-only" in ln]
    assert len(lines) == 1 and "WARNING" in lines[0] and "--allow-no-aof" in lines[0]
    quiet = start_master("q", "-c", "1", "--allow-no-aof")
    assert "append-only" not in quiet.log()


def test_a_redis_that_keeps_its_settings_to_itself_is_used_with_a_warning(
    start_master: StartMaster, private_server: ServerProcess
) -> None:
    user = f"limited{uuid.uuid4().hex[:6]}"
    with redis_faults.connect(private_server) as conn:
        conn.execute_command(
            "ACL",
            "SETUSER",
            user,
            "on",
            f">{ACL_PASSWORD}",
            "~*",
            "&*",
            "+@all",
            "-info",
            "-config",
        )
    url = f"unix://{user}:{ACL_PASSWORD}@{private_server.socket}"
    master = start_master("q", "-c", "1", env={"REDIS_URL": url})
    lines = [ln for ln in master.log().splitlines() if "checks were skipped" in ln]
    assert len(lines) == 1 and "WARNING" in lines[0], master.log()
    assert ACL_PASSWORD not in master.log()


# --- the decisions, without processes ------------------------------------------------


def worker(**fields: object) -> config.WorkerSettings:
    return config.WorkerSettings(modules=("m",), queues=("q",), **fields)  # type: ignore[arg-type]


def test_a_cpu_limit_makes_every_child_run_one_job() -> None:
    assert worker(cpu_limit_s=1.0, max_jobs_per_child=100).max_jobs_per_child == 1
    assert worker(cpu_limit_s=1.0).max_jobs_per_child == 1
    assert worker(max_jobs_per_child=100).max_jobs_per_child == 100


def test_switching_identity_without_root_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setattr(preflight, "_capable", lambda cap: False)
    with pytest.raises(ConfigError, match="--user nobody needs root"):
        preflight.check_identity(worker(user="nobody"))
    with pytest.raises(ConfigError, match="--group 0 needs root"):
        preflight.check_identity(worker(group="0"))
    monkeypatch.setattr(preflight, "_capable", lambda cap: True)
    preflight.check_identity(worker(user="nobody"))


@pytest.mark.parametrize(
    ("facts", "allow", "outcome"),
    [
        (ServerFacts("noeviction", True, "7.0"), False, None),
        (ServerFacts("allkeys-lru", True, "7.0"), False, "refused"),
        (ServerFacts("volatile-lfu", True, "7.0"), True, "evicts keys"),
        (ServerFacts("noeviction", False, "7.0"), False, "append-only"),
        (ServerFacts(None, None, None, refused="INFO refused"), False, "checks were skipped"),
    ],
)
def test_the_server_checks_decide_from_the_facts(
    caplog: pytest.LogCaptureFixture, facts: ServerFacts, allow: bool, outcome: str | None
) -> None:
    settings = worker(allow_eviction=allow)
    if outcome == "refused":
        with pytest.raises(ConfigError, match="maxmemory-policy allkeys-lru"):
            preflight.check_server(facts, settings, "redis://x")
        return
    preflight.check_server(facts, settings, "redis://x")
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    if outcome is None:
        assert warnings == []
        return
    assert len(warnings) == 1, warnings  # one warning, and the one named
    assert outcome in warnings[0], warnings
