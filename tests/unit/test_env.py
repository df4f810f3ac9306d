"""What a job may see of the worker's environment, and the settings around it:
the secret filter, the names let through (--env, env, RUNTIME_ENV), the log level,
--version."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from runtime import config
from runtime.cli import log_level_of, run
from runtime.errors import ConfigError
from runtime.sandbox.sandbox import clean_environment, looks_secret

PLAIN = {"PATH": "/usr/bin:/bin", "HOME": "/home/app", "LANG": "C.UTF-8", "PWD": "/srv"}
CHILD = {**PLAIN, "RUNTIME_CHILD": "1"}  # what a child gets: the plain ones and the marker


@pytest.mark.parametrize(
    "name",
    [
        "REDIS_URL",
        "SENTRY_DSN",
        "RUNTIME_CONFIG",
        "PGPASSWORD",
        "AWS_SECRET_ACCESS_KEY",
        "GITHUB_TOKEN",
        "OPENAI_API_KEY",
        "STRIPE_APIKEY",
        "GOOGLE_CREDENTIALS",
        "MYSQL_PWD",
        "SSH_PRIVATE_KEY",
        "GPG_PASSPHRASE",
        "github_token",
    ],
)
def test_variables_named_like_secrets_stay_out(name: str) -> None:
    assert clean_environment({**PLAIN, name: "x"}) == CHILD


@pytest.mark.parametrize(
    "value",
    [
        "postgres://app:hunter2@db:5432/app",  # user:password@
        "redis://:hunter2@cache:6379/0",  # :password@ (no user)
        "rediss://default:hunter2@cache:6380",
        "redis+sentinel://:hunter2@s1:26379,s2:26379/mymaster",  # several hosts
        "amqp://guest:guest@mq//",
        "mongodb+srv://app:p%40ss@cluster0.example.net/db",  # a %-escaped password
        "https://x.example/api?password=hunter2",  # ?password=
        "https://x.example/api?user=a&token=abc",
        "http://u:@host/",  # an empty password still names one
        "db1=postgres://a:b@h1/x db2=postgres://h2/y",  # among others in one value
        "host=db port=5432 user=app password=hunter2",  # a key-value DSN
        "smtp://mailer:hunter2@smtp.example:587",  # any scheme
    ],
)
def test_variables_whose_value_holds_a_password_stay_out(value: str) -> None:
    assert looks_secret("DATABASE_URL", value)
    assert clean_environment({**PLAIN, "SOME_URL": value}) == CHILD


@pytest.mark.parametrize(
    "value",
    [
        "postgres://app@db:5432/app",  # a user, no password
        "ssh://git@github.com/org/repo.git",
        "https://example.com:8443/users/@me",  # an @ in the path, a port
        "http://[::1]:8080/",
        "https://example.com/search?q=password",
        "/usr/local/bin:/usr/bin",
        "",
    ],
)
def test_variables_without_a_password_pass(value: str) -> None:
    assert clean_environment({**PLAIN, "SERVICE_URL": value}) == {**CHILD, "SERVICE_URL": value}


def test_named_variables_pass_whatever_they_look_like() -> None:
    env = {**PLAIN, "API_TOKEN": "t", "DATABASE_URL": "postgres://a:b@db/x", "OTHER_TOKEN": "o"}
    kept = clean_environment(env, keep=["API_TOKEN", "DATABASE_URL", "NOT_SET"])
    assert kept == {**CHILD, "API_TOKEN": "t", "DATABASE_URL": "postgres://a:b@db/x"}


# --- the settings ---------------------------------------------------------------------


def test_the_env_setting_comes_from_the_toml_file_and_runtime_env(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    toml = tmp_path / "runtime.toml"
    toml.write_text('[runtime]\nenv = ["API_TOKEN", "DATABASE_URL"]\nlog_level = "debug"\n')
    from_file = config.load_settings(env={"RUNTIME_CONFIG": str(toml)})
    assert from_file.env == ("API_TOKEN", "DATABASE_URL")
    assert from_file.log_level == "DEBUG"
    from_env = config.load_settings(
        env={"RUNTIME_CONFIG": str(toml), "RUNTIME_ENV": "A, B,A", "RUNTIME_LOG_LEVEL": "warn"}
    )
    assert from_env.env == ("A", "B")
    assert from_env.log_level == "WARNING"
    monkeypatch.chdir(tmp_path / "..")  # no runtime.toml there
    nothing = config.load_settings(env={})
    assert nothing.env == () and nothing.log_level is None


@pytest.mark.parametrize(
    ("overrides", "error"),
    [
        ({"env": "A,1B"}, "'1B' is not an environment variable name"),
        ({"env": ["A=B"]}, "'A=B' is not an environment variable name"),
        ({"env": 3}, "env must be a list"),
        ({"log_level": "loud"}, "log level must be one of"),
    ],
)
def test_bad_env_names_and_log_levels_are_config_errors(
    overrides: dict[str, Any], error: str
) -> None:
    with pytest.raises(ConfigError, match=error):
        config.load_settings(overrides, env={})


def test_worker_settings_carry_the_env_names_and_the_log_level() -> None:
    worker = config.WorkerSettings(modules=("m",), queues=("q",), env=("A", "A", "B"))
    assert worker.env == ("A", "B") and worker.log_level == "INFO"
    assert config.WorkerSettings(("m",), ("q",), log_level="debug").log_level == "DEBUG"
    with pytest.raises(ConfigError):
        config.WorkerSettings(("m",), ("q",), log_level="chatty")


# --- the command line -------------------------------------------------------------------


def test_verbose_flags_win_over_the_log_level_setting() -> None:
    assert log_level_of(0, None) is None
    assert log_level_of(0, "ERROR") == "ERROR"
    assert log_level_of(1, "ERROR") == "INFO"
    assert log_level_of(2, None) == "DEBUG"


def test_version_prints_the_installed_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["--version"]) == 0
    assert capsys.readouterr().out == f"runtime {config.version()}\n"
    assert config.version() != "0+unknown"  # the venv installs the package


def test_the_worker_verb_hands_the_env_names_and_the_log_level_to_the_master(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    root = logging.getLogger()
    monkeypatch.setattr(root, "level", root.level)  # the verb sets it; put it back after
    seen: list[config.WorkerSettings] = []

    def run_worker(settings: config.Settings, worker: config.WorkerSettings, _: Any) -> int:
        seen.append(worker)
        return 0

    monkeypatch.setattr("runtime.master.main.run_worker", run_worker)
    monkeypatch.setenv("RUNTIME_ENV", "FROM_SETTING")
    monkeypatch.setenv("RUNTIME_LOG_LEVEL", "error")
    monkeypatch.setenv("API_TOKEN", "x")
    argv = ["worker", "m", "-q", "q", "--env", "API_TOKEN", "--env", "NOT_SET_ANYWHERE"]
    assert run(argv) == 0
    assert seen[-1].env == ("FROM_SETTING", "API_TOKEN", "NOT_SET_ANYWHERE")
    assert seen[-1].log_level == "ERROR"
    assert run(["-vv", *argv]) == 0
    assert seen[-1].log_level == "DEBUG"
    monkeypatch.delenv("RUNTIME_LOG_LEVEL")
    assert run(argv) == 0
    assert seen[-1].log_level == "INFO"  # a worker's default
    assert "not set: FROM_SETTING, NOT_SET_ANYWHERE" in caplog.text
