"""What the verbs share: the client of the invocation, output helpers, exit codes."""

from __future__ import annotations

import dataclasses
import json
import signal
import sys
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

import click

from runtime import config
from runtime.errors import BadArgument
from runtime.queue.api.client import Client
from runtime.queue.job import Job

EXIT_FAILED, EXIT_USAGE, EXIT_UNAVAILABLE = 1, 2, 3


def client_of(ctx: click.Context) -> Client:
    """The client for --url/--namespace, made once per invocation: a sharded
    site's (every namespace of it, runtime.queue.api.client.Site) when the settings name
    shards (RUNTIME_SHARDS)."""
    obj: dict[str, Any] = ctx.find_root().ensure_object(dict)
    if "client" not in obj:
        settings = config.load_settings({"url": obj.get("url"), "namespace": obj.get("namespace")})
        obj["client"] = Client(settings=settings)
    client: Client = obj["client"]
    return client


def counts_of(ctx: click.Context) -> Client:
    """Where the numbers of `status`, `metrics` and the dashboard come from: the
    invocation's client (a sharded site's sums its namespaces')."""
    return client_of(ctx)


def settings_of(ctx: click.Context) -> config.Settings:
    obj: dict[str, Any] = ctx.find_root().ensure_object(dict)
    return config.load_settings({"url": obj.get("url"), "namespace": obj.get("namespace")})


def when(ms: int | None) -> str:
    if ms is None:
        return "-"
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"


def number_text(value: float) -> str:
    """A setting's value as typed: whole numbers exactly (1048576, not 1.04858e+06)."""
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def check_jid(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """A JID argument: 1-jid_max printable characters without blanks (BadArgument)."""
    limit = config.LIMITS["jid_max"]
    blank = any(c.isspace() for c in value)
    if not value or len(value) > limit or blank or not value.isprintable():
        raise BadArgument(
            f"JID must be 1-{limit} printable characters without blanks, got {value[:80]!r}"
        )
    return value


UNSHOWN = frozenset({"token"})  # the lease's credential: never in what a verb prints


def job_json(job: Job) -> dict[str, Any]:
    """A job as JSON-ready values (its fields but the lease token), as every
    verb's --json prints one."""
    return {
        f.name: _plain(getattr(job, f.name))
        for f in dataclasses.fields(job)
        if f.name not in UNSHOWN
    }


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    return value


def emit(value: Any) -> None:
    click.echo(json.dumps(value, indent=2, sort_keys=True, default=str))


def parse_data(text: str | None) -> dict[str, Any]:
    """DATA given as JSON text, @file or - (stdin): a JSON object. Whatever is wrong
    with it (unreadable, not UTF-8, not JSON, nested past what the decoder takes)
    is one BadArgument naming where DATA came from."""
    if text is None:
        return {}
    where = "DATA"
    try:
        if text == "-":
            where = "DATA on stdin"
            text = sys.stdin.read()
        elif text.startswith("@"):
            where = f"DATA file {text[1:]}"
            with open(text[1:], encoding="utf-8") as fh:
                text = fh.read()
    except OSError as err:
        raise BadArgument(f"cannot read {where}: {err.strerror or err}") from None
    except UnicodeDecodeError as err:
        raise BadArgument(f"{where} is not UTF-8 text: byte {err.start} is invalid") from None
    try:
        data = json.loads(text)
    except RecursionError:
        depth_max = config.LIMITS["data_depth_max"]
        raise BadArgument(
            f"{where} is nested too deeply to decode (jobs take at most {depth_max} levels)"
        ) from None
    except ValueError as err:
        raise BadArgument(f"{where} is not JSON: {err}") from None
    if not isinstance(data, dict):
        raise BadArgument(f'{where} must be a JSON object, like \'{{"to": "a@b.c"}}\'')
    return data


KNOWN_SHOWN = 12  # names listed beside one that is not known


def known_text(known: Iterable[str], kind: str = "queues") -> str:
    """ "known queues: a, b, c ... and 3 more" (sorted, at most KNOWN_SHOWN), or
    "no queues yet"."""
    names = sorted(known)
    if not names:
        return f"no {kind} yet"
    more = f" ... and {len(names) - KNOWN_SHOWN} more" if len(names) > KNOWN_SHOWN else ""
    return f"known {kind}: {', '.join(names[:KNOWN_SHOWN])}{more}"


def unknown_queues(names: Sequence[str], known: Iterable[str]) -> click.exceptions.Exit:
    """Exit 1 with one line naming the queues never used (or forgotten), and the
    known ones: a read of a typo must not answer zeros."""
    listed = ", ".join(names)
    return click.exceptions.Exit(
        fail(f"no queue{'s' * (len(names) > 1)} {listed} ({known_text(known)})")
    )


def fail(message: str, code: int = EXIT_FAILED) -> int:
    """Prints the one-line error; returns the exit code to leave with."""
    click.echo(f"runtime: error: {message}", err=True)
    return code


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def stop_on_signals() -> None:
    """Ctrl-C and TERM raise KeyboardInterrupt in a verb that runs until stopped,
    even when it started with SIGINT ignored (as a shell script's background job
    does) or under systemd (TERM)."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _interrupt)
