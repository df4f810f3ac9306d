"""Typed jobs on a real worker: put by their function, found through the allow-list,
called with their data as keyword arguments; Fail and never_retry; and what a job
sees of the worker's environment (--env, RUNTIME_ENV)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from runtime import Client
from runtime.sandbox.sandbox import looks_secret
from tests.integration import typed_jobs
from tests.integration.conftest import StartMaster
from tests.support.waiting import ended, wait_for

MODULES = ("tests.integration.typed_jobs",)


def records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_typed_job_put_by_its_function_runs_with_its_arguments(
    start_master: StartMaster, plain_client: Client, workdir: Path
) -> None:
    start_master("typed", "-c", "1", modules=MODULES)
    path = workdir / "greetings"
    greet = typed_jobs.greet.using(plain_client)
    jid = greet.put(name="ada", path=str(path))
    many = greet.options(priority=3).put_many(
        [{"name": "bob", "path": str(path), "punctuation": "?"}, {"name": "cy", "path": str(path)}]
    )
    by_path = plain_client.queue("typed").put(
        "tests.integration.typed_jobs:greet", {"name": "dee", "path": str(path)}
    )
    assert plain_client.wait(jid, timeout=20) == {"greeting": "hello, ada!"}
    job = ended(plain_client, jid)
    assert job.state == "complete" and job.result == {"greeting": "hello, ada!"}
    assert job.klass == "tests.integration.typed_jobs:greet"
    assert job.data == {"name": "ada", "path": str(path)}
    assert job.queue == "typed" and job.retries == 3
    assert [ended(plain_client, j).state for j in [*many, by_path]] == ["complete"] * 3
    assert plain_client.get_job(many[0]).priority == 3  # type: ignore[union-attr]
    greetings = {r["jid"]: r["greeting"] for r in records(path)}
    assert greetings == {
        jid: "hello, ada!",
        many[0]: "hello, bob?",
        many[1]: "hello, cy!",
        by_path: "hello, dee!",
    }


def test_a_typed_job_puts_typed_follow_up_jobs_with_its_completion(
    start_master: StartMaster, plain_client: Client, workdir: Path
) -> None:
    start_master("typed", "-c", "2", modules=MODULES)
    path = workdir / "greetings"
    jid = typed_jobs.hand_on.using(plain_client).put(names=["ann", "ben"], path=str(path))
    assert plain_client.wait(jid, timeout=20) == 2
    wait_for(lambda: path.exists() and len(records(path)) == 2, 20, what="the follow-ups")
    assert sorted(r["greeting"] for r in records(path)) == ["hello, ann!", "hello, ben!"]


def test_a_job_that_puts_with_put_instead_of_ctx_put_is_told_so(
    start_master: StartMaster, plain_client: Client, workdir: Path
) -> None:
    start_master("typed", "-c", "1", modules=MODULES)
    jid = typed_jobs.put_directly.using(plain_client).put(path=str(workdir / "never"))
    job = ended(plain_client, jid)
    assert job.state == "failed" and job.failure is not None
    assert job.failure.group == "runtime.errors.WrongState"
    assert "ctx.put(job.spec(...))" in job.failure.message
    assert plain_client.queue("typed").counts()["waiting"] == 0


def test_data_that_does_not_fit_a_typed_job_fails_it_at_once(
    start_master: StartMaster, plain_client: Client
) -> None:
    start_master("typed", "-c", "1", modules=MODULES)
    jid = plain_client.queue("typed").put(
        "tests.integration.typed_jobs:greet", {"nmae": "ada"}, retries=3
    )
    job = ended(plain_client, jid)
    assert job.state == "failed" and job.failure is not None
    assert job.failure.group == "runtime.BadArgument"
    assert "cannot take this job's data" in job.failure.message
    assert job.attempt == 1 and job.remaining == 3  # no retry spent


def test_fail_and_never_retry_fail_a_typed_job_without_retries(
    start_master: StartMaster, plain_client: Client
) -> None:
    start_master("typed", "-c", "1", modules=MODULES)
    refused = typed_jobs.refuse.using(plain_client).put(reason="no such address")
    missing = typed_jobs.look_up.using(plain_client).put(key="k")
    job = ended(plain_client, refused)
    assert job.state == "failed" and job.failure is not None
    assert job.failure.group == "tests.Refused"
    assert job.failure.message.startswith("no such address")
    assert job.attempt == 1
    job = ended(plain_client, missing)
    assert job.state == "failed" and job.failure is not None
    assert job.failure.group == "builtins.KeyError"
    assert job.attempt == 1


def test_a_job_sees_the_variables_the_worker_names_and_no_other_secret(
    start_master: StartMaster, plain_client: Client, workdir: Path
) -> None:
    env = {
        "API_TOKEN": "named with --env",
        "DATABASE_URL": "postgres://app:hunter2@db/app",  # named by RUNTIME_ENV
        "RUNTIME_ENV": "DATABASE_URL",
        "OTHER_TOKEN": "not named",
        "CACHE_URL": "redis://:hunter2@cache:6379/0",  # a password in the value
        "QUEUE_URL": "amqp://mq.example/?password=hunter2",
        "PLAIN_SETTING": "visible",
    }
    start_master("typed", "-c", "1", "--env", "API_TOKEN", modules=MODULES, env=env)
    path = workdir / "env"
    ended(plain_client, typed_jobs.environment.using(plain_client).put(path=str(path)))
    seen = records(path)[0]
    assert seen["API_TOKEN"] == "named with --env"
    assert seen["DATABASE_URL"] == "postgres://app:hunter2@db/app"
    assert seen["PLAIN_SETTING"] == "visible"
    for name in ("OTHER_TOKEN", "CACHE_URL", "QUEUE_URL", "REDIS_URL", "SENTRY_DSN"):
        assert name not in seen, name
    secret = {name for name, value in seen.items() if looks_secret(name, value)}
    assert secret == {"API_TOKEN", "DATABASE_URL"}
