"""Settings: defaults, TOML, environment, overrides; shared settings' checks."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime import config
from runtime.errors import ConfigError


def test_precedence_is_defaults_toml_environment_overrides(tmp_path: Path) -> None:
    toml = tmp_path / "rt.toml"
    toml.write_text('[runtime]\nurl = "redis://toml"\nnamespace = "fromtoml"\n')
    env = {"RUNTIME_CONFIG": str(toml), "RUNTIME_NAMESPACE": "fromenv"}
    settings = config.load_settings({"url": None}, env=env)
    assert (settings.url, settings.namespace) == ("redis://toml", "fromenv")
    settings = config.load_settings({"namespace": "flag"}, env=env)
    assert settings.namespace == "flag"


@pytest.mark.parametrize(
    ("text", "fragment"),
    [("[runtime\n", "not valid TOML"), ("[runtime]\nbogus = 1\n", "unknown keys")],
)
def test_bad_config_files_are_one_line_errors(tmp_path: Path, text: str, fragment: str) -> None:
    toml = tmp_path / "rt.toml"
    toml.write_text(text)
    with pytest.raises(ConfigError, match=fragment):
        config.load_settings(env={"RUNTIME_CONFIG": str(toml)})


def test_missing_config_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        config.load_settings(env={"RUNTIME_CONFIG": str(tmp_path / "none.toml")})


@pytest.mark.parametrize("namespace", ["", "a{b", "a b", "x" * 65, "a:b"])
def test_namespaces_are_checked(namespace: str) -> None:
    with pytest.raises(ConfigError):
        config.Settings(namespace=namespace)


def test_state_dir_defaults_under_xdg_state_home(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", "/x/state")
    assert config.default_state_dir() == Path("/x/state/runtime")


def test_shared_settings_accept_per_queue_names_and_check_ranges() -> None:
    assert config.shared_setting("emails-heartbeat").name == "heartbeat"
    assert config.shared_setting("heartbeat").parse("30") == 30
    with pytest.raises(ConfigError, match="unknown setting"):
        config.shared_setting("emails-jobs-history")
    with pytest.raises(ConfigError, match="between"):
        config.shared_setting("heartbeat").parse("0")
    with pytest.raises(ConfigError, match="number"):
        config.shared_setting("heartbeat").parse("soon")
    with pytest.raises(ConfigError):
        config.shared_setting("heartbeat").parse("nan")


def test_max_processes_below_what_a_child_needs_is_refused_with_the_reason() -> None:
    base = {"modules": ("app.jobs",), "queues": ("q",)}
    with pytest.raises(ConfigError, match="at least 2: it counts threads"):
        config.WorkerSettings(**base, max_processes=1)  # type: ignore[arg-type]
    assert config.WorkerSettings(**base, max_processes=2).max_processes == 2  # type: ignore[arg-type]
