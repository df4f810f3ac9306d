"""`runtime recur`: recurring jobs, added, listed and removed."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import click

from runtime import config
from runtime.commands.common import client_of, emit, fail, parse_data, when
from runtime.errors import BadArgument
from runtime.queue.recur import POLICIES


@click.group()
def recur() -> None:
    """Recurring jobs: one job per tick, however many masters run."""


@recur.command("add")
@click.argument("queue")
@click.argument("klass")
@click.argument("data", required=False)
@click.option("--every", type=click.FloatRange(0, min_open=True), help="Seconds between ticks.")
@click.option("--cron", help='A cron expression, e.g. "*/5 * * * *".')
@click.option("--tz", default="UTC", show_default=True, help="Time zone of the cron ticks.")
@click.option(
    "--policy",
    type=click.Choice(POLICIES),
    default="once",
    show_default=True,
    help="Ticks missed while no master popped: all, once, or skip.",
)
@click.option(
    "--grace",
    type=click.FloatRange(0),
    default=60.0,
    show_default=True,
    help="skip: how late a tick may still run, seconds.",
)
@click.option("--id", "rid", help="Its name (default: QUEUE/KLASS); the same id replaces.")
@click.option("--priority", type=int, default=0)
@click.option("--retries", type=int, default=config.DEFAULT_RETRIES)
@click.option("--tag", "tags", multiple=True)
@click.pass_context
def add(
    ctx: click.Context,
    queue: str,
    klass: str,
    data: str | None,
    every: float | None,
    cron: str | None,
    tz: str,
    policy: str,
    grace: float,
    rid: str | None,
    priority: int,
    retries: int,
    tags: Sequence[str],
) -> None:
    """Put KLASS on QUEUE --every SECONDS or at each --cron tick."""
    if (every is None) == (cron is None):
        raise BadArgument("give --every or --cron, one of them")
    r = client_of(ctx).scheduling.recur(
        queue,
        klass,
        parse_data(data),
        every=every,
        cron=cron,
        tz=tz,
        policy=policy,
        grace=grace,
        id=rid,
        priority=priority,
        retries=retries,
        tags=tags,
    )
    click.echo(f"{r.id}: next at {when(r.next_ms)}")


@recur.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON: a list of recurrences.")
@click.pass_context
def list_(ctx: click.Context, as_json: bool) -> None:
    """Recurrences, with their next tick and how many jobs each spawned."""
    found = client_of(ctx).scheduling.recurrences()
    if as_json:
        emit([dataclasses.asdict(r) for r in found])
        return
    if not found:
        click.echo("no recurring jobs")
    for r in found:
        schedule = f"every {r.every:g} s" if r.every else f"cron '{r.cron}' {r.tz}"
        click.echo(
            f"{r.id}  {r.queue}  {r.klass}  {schedule}  policy {r.policy}  "
            f"next {when(r.next_ms)}  spawned {r.count}"
        )


@recur.command("remove")
@click.argument("rid", metavar="ID")
@click.pass_context
def remove(ctx: click.Context, rid: str) -> None:
    """Stop a recurrence (jobs it spawned stay)."""
    if not client_of(ctx).scheduling.unrecur(rid):
        raise click.exceptions.Exit(fail(f"no recurring job {rid}"))
    click.echo(f"removed {rid}")


COMMANDS = [recur]
