"""Typed jobs the integration tests put (test_typed_jobs.py); each records what it
saw in the file its arguments name (an absolute path)."""

from __future__ import annotations

import json
import os
from typing import Any

from runtime import Fail, JobContext, job


def _append(path: str, record: dict[str, Any]) -> None:
    with open(path, "a") as fh:
        fh.write(json.dumps(record) + "\n")


@job(queue="typed", retries=3)
def greet(ctx: JobContext, *, name: str, path: str, punctuation: str = "!") -> dict[str, str]:
    """Records and returns a greeting."""
    greeting = f"hello, {name}{punctuation}"
    _append(path, {"jid": ctx.jid, "attempt": ctx.attempt, "greeting": greeting})
    return {"greeting": greeting}


@job(queue="typed", retries=3, never_retry=(LookupError,))
def look_up(ctx: JobContext, *, key: str) -> str:
    """Always raises KeyError, which this job never retries."""
    table: dict[str, str] = {}
    return table[key]


@job(queue="typed", retries=3)
def refuse(ctx: JobContext, *, reason: str) -> None:
    """Fails at once with its own group."""
    raise Fail(reason, group="tests.Refused")


@job(queue="typed")
def hand_on(ctx: JobContext, *, names: list[str], path: str) -> int:
    """Puts a greeting per name (with its completion); returns how many."""
    for name in names:
        ctx.put(greet.spec(name=name, path=path))
    return len(names)


@job(queue="typed", retries=0)
def put_directly(ctx: JobContext, *, path: str) -> str:
    """Tries what works outside a job: .put() (there is no client in a child)."""
    return greet.put(name="nobody", path=path)


@job(queue="typed")
def environment(ctx: JobContext, *, path: str) -> None:
    """Records the child's whole environment."""
    _append(path, dict(os.environ))
