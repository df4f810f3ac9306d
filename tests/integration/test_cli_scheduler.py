"""The scheduler's verbs (limit, recur, stats, config of the default limit) with
bad input: one line on stderr naming the real problem, a non-zero exit, no
traceback, nothing written."""

from __future__ import annotations

import subprocess
import sys

import pytest

from runtime import Client
from runtime.cli import run
from tests.support.master import REPO


@pytest.fixture
def env(plain_client: Client, monkeypatch: pytest.MonkeyPatch) -> Client:
    monkeypatch.setenv("REDIS_URL", plain_client.url)
    monkeypatch.setenv("RUNTIME_NAMESPACE", plain_client.keys.namespace)
    return plain_client


BAD_INPUT = [
    (("limit", "bad domain", "10/1"), "domain must be"),
    (("limit", "bad domain", "--clear"), "domain must be"),
    (("limit", "example.com", "ten"), "RATE must look like N/SECONDS, got 'ten'"),
    (("limit", "example.com", "10/x"), "RATE must look like N/SECONDS, got '10/x'"),
    (("limit", "example.com", "0/1"), "rate and period must be above 0"),
    (("limit", "example.com", "10/0"), "rate and period must be above 0"),
    (("limit", "example.com", "nan/1"), "rate must be a finite number"),
    (("limit", "example.com"), "give RATE as N/SECONDS"),
    (("limit", "example.com", "10/1", "--burst", "-1"), "--burst"),
    (("limit", "example.com", "--concurrency", "0"), "--concurrency"),
    (("limit", "example.com", "--concurrency", "many"), "--concurrency"),
    (("limit", "example.com", "--burst", "2", "--concurrency", "2"), "burst goes with a rate"),
    (("pause",), "give a QUEUE or --domain DOMAIN"),
    (("pause", "q", "--domain", "example.com"), "give a QUEUE or --domain DOMAIN"),
    (("pause", "--domain", "bad domain"), "domain must be"),
    (("resume", "--domain", ""), "domain must be"),
    (("recur", "add", "q", "not a klass", "--every", "5"), "klass must be an import path"),
    (("recur", "add", "q", "nodots", "--every", "5"), "klass must be an import path"),
    (("recur", "add", "q", "a.b:c"), "give --every or --cron"),
    (("recur", "add", "q", "a.b:c", "--every", "5", "--cron", "* * * * *"), "give --every or"),
    (("recur", "add", "q", "a.b:c", "--every", "0"), "--every"),
    (("recur", "add", "q", "a.b:c", "--cron", "nonsense"), "cron"),
    (("recur", "add", "q", "a.b:c", "--cron", "0 * * * *", "--tz", "Mars/Base"), "Mars/Base"),
    (("recur", "add", "bad:queue", "a.b:c", "--every", "5"), "queue name"),
    (("recur", "add", "q", "a.b:c", "--every", "5", "--id", "has space"), "id must be"),
    (("recur", "add", "q", "a.b:c", "{not json", "--every", "5"), "DATA is not JSON"),
    (("recur", "add", "q", "a.b:c", "--every", "5", "--policy", "often"), "--policy"),
    (("recur", "remove", "nothing-here"), "no recurring job nothing-here"),
    (("stats", "bad:queue"), "queue name"),
    (("stats", "q", "--day", "2024-13-01"), "--day"),
    (("config", "domain-rate", "fast"), "domain-rate"),
    (("config", "domain-burst", "1.5"), "whole number"),
]


@pytest.mark.parametrize(("args", "fragment"), BAD_INPUT, ids=[" ".join(a) for a, _ in BAD_INPUT])
def test_a_scheduler_verb_with_bad_input_prints_one_line_naming_the_problem(
    env: Client, capsys: pytest.CaptureFixture[str], args: tuple[str, ...], fragment: str
) -> None:
    code = run(list(args))
    out, err = capsys.readouterr()
    assert code != 0
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("runtime"), err
    assert "Traceback" not in err and "unexpected" not in err, err
    assert fragment in err, err
    assert env.scheduling.domain_limits() == {} and env.scheduling.recurrences() == []


def test_a_bad_domain_is_blamed_on_the_domain_from_a_real_process(env: Client) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "runtime", "limit", "bad domain", "10/1"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert "domain must be" in done.stderr and "RATE" not in done.stderr


def test_limit_sets_a_concurrency_and_pause_holds_a_domain(
    env: Client, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(["limit", "api.example.com", "--concurrency", "3"]) == 0
    assert run(["limit", "rated.example.com", "10/1", "--concurrency", "2"]) == 0
    assert run(["pause", "--domain", "api.example.com"]) == 0
    capsys.readouterr()
    assert run(["limit"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "api.example.com  concurrency 3  paused",
        "rated.example.com  10/1s burst 0  concurrency 2",
    ]
    assert run(["resume", "--domain", "api.example.com"]) == 0
    assert env.scheduling.domain_limits()["api.example.com"] == {"concurrency": 3}
