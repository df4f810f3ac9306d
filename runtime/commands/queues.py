"""Verbs about queues: status, pause, resume, failed, unfail, config."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import datetime

import click

from runtime import config
from runtime.commands.common import client_of, emit, fail, number_text
from runtime.errors import BadArgument

STATE_COLUMNS = ("waiting", "throttled", "scheduled", "running", "stalled", "depends")


@click.command()
@click.argument("queues", nargs=-1)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def status(ctx: click.Context, queues: Sequence[str], as_json: bool) -> None:
    """Queues and their jobs by state."""
    counts = client_of(ctx).status(*queues)
    if as_json:
        emit(counts)
        return
    if not counts:
        click.echo("no queues yet")
        return
    width = max(len("queue"), *(len(q) for q in counts))
    click.echo(f"{'queue':<{width}}  " + "  ".join(f"{c:>9}" for c in STATE_COLUMNS))
    for name, row in sorted(counts.items()):
        cells = "  ".join(f"{row[c]:>9}" for c in STATE_COLUMNS)
        click.echo(f"{name:<{width}}  {cells}" + ("  (paused)" if row["paused"] else ""))


@click.command()
@click.argument("group", required=False)
@click.option("--start", type=int, default=0)
@click.option("--count", type=int, default=25)
@click.pass_context
def failed(ctx: click.Context, group: str | None, start: int, count: int) -> None:
    """Failure groups with their counts, or the jobs of GROUP."""
    client = client_of(ctx)
    if group is None:
        groups = client.failed()
        if not groups:
            click.echo("no failed jobs")
        for name, n in sorted(groups.items(), key=lambda kv: -kv[1]):
            click.echo(f"{n:>8}  {name}")
        return
    total, jobs = client.failed_jobs(group, start, count)
    click.echo(f"{total} failed in {group}")
    for j in jobs:
        last = (j.failure.message.strip().splitlines() or [""])[-1] if j.failure else ""
        click.echo(f"{j.jid}  {j.queue}  {j.klass}  {last}")


@click.command()
@click.argument("group")
@click.argument("queue", required=False)
@click.option("--count", type=int, default=25, help="Most jobs to move.")
@click.pass_context
def unfail(ctx: click.Context, group: str, queue: str | None, count: int) -> None:
    """Move failed jobs of GROUP back to QUEUE (default: each job's own queue)."""
    client = client_of(ctx)
    if queue is None:
        _, jobs = client.failed_jobs(group, 0, 1)
        if not jobs:
            raise click.exceptions.Exit(fail(f"no failed jobs in {group}"))
        queue = jobs[0].queue
    moved = client.unfail(group, queue, count)
    click.echo(f"moved {moved} jobs to {queue}")


@click.command()
@click.argument("queue")
@click.pass_context
def pause(ctx: click.Context, queue: str) -> None:
    """Stop masters from leasing jobs of QUEUE."""
    client_of(ctx).queue(queue).pause()
    click.echo(f"paused {queue}")


@click.command()
@click.argument("queue")
@click.pass_context
def resume(ctx: click.Context, queue: str) -> None:
    """Let masters lease jobs of QUEUE again."""
    client_of(ctx).queue(queue).resume()
    click.echo(f"resumed {queue}")


@click.command("config")
@click.argument("name", required=False)
@click.argument("value", required=False)
@click.option("--unset", is_flag=True, help="Remove NAME, back to its default.")
@click.pass_context
def config_cmd(ctx: click.Context, name: str | None, value: str | None, unset: bool) -> None:
    """Show settings, or set NAME to VALUE (e.g. heartbeat 30, emails-heartbeat 10)."""
    client = client_of(ctx)
    if unset:
        if name is None:
            raise BadArgument("--unset needs a NAME")
        client.config_unset(name)
    elif name is not None and value is not None:
        client.config_set(name, value)
    values = client.config_get()
    if name is not None:
        config.shared_setting(name)
        default = config.shared_setting(name).default
        click.echo(f"{name} = {number_text(values.get(name, default))}")
        return
    for key in sorted(values):
        help_ = config.SHARED[key].help if key in config.SHARED else "(per-queue override)"
        click.echo(f"{key:<24} {number_text(values[key]):>12}  {help_}")


@click.command()
@click.argument("queue")
@click.option("--day", type=click.DateTime(["%Y-%m-%d"]), help="A UTC day (default: today).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def stats(ctx: click.Context, queue: str, day: datetime | None, as_json: bool) -> None:
    """Wait and run times of a queue's jobs, with failures, failed and retries."""
    found = client_of(ctx).stats(queue, day.date() if day else None)
    if as_json:
        emit(dataclasses.asdict(found))
        return
    click.echo(f"{queue} on {found.day}: failures {found.failures}, failed {found.failed}, "
               f"retries {found.retries}")  # fmt: skip
    for name, times in (("wait", found.wait), ("run", found.run)):
        click.echo(f"{name:<5} {times.count} jobs, mean {times.mean:.3f} s, "
                   f"stddev {times.stddev:.3f} s")  # fmt: skip
        for lower_s, n in times.histogram:
            click.echo(f"      >= {_span(lower_s):>6}  {n}")


def _span(seconds: int) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


@click.command()
@click.argument("domain", required=False)
@click.argument("rate", required=False)
@click.option("--burst", type=click.IntRange(0), help="Extra starts allowed at once.")
@click.option("--clear", is_flag=True, help="Remove DOMAIN's own limit.")
@click.pass_context
def limit(ctx: click.Context, domain: str | None, rate: str | None, burst: int | None,
          clear: bool) -> None:  # fmt: skip
    """Limit DOMAIN to RATE job starts, as N/SECONDS (e.g. 10/1, 100/60); no
    arguments: list the limits."""
    client = client_of(ctx)
    if domain is None:
        for name, lim in sorted(client.domain_limits().items()):
            click.echo(f"{name}  {lim['rate']:g}/{lim['period']:g}s burst {lim['burst']}")
        return
    if clear:
        client.clear_domain_limit(domain)
        click.echo(f"cleared {domain}")
        return
    if rate is None:
        raise BadArgument("give RATE as N/SECONDS, e.g. 10/1")
    count, _, period = rate.partition("/")
    try:
        starts, seconds = float(count), float(period or 1)
    except ValueError:
        raise BadArgument(f"RATE must look like N/SECONDS, got {rate!r}") from None
    client.set_domain_limit(domain, starts, seconds, burst)
    click.echo(f"{domain}: {rate} (burst {burst or 0})")


COMMANDS = [status, pause, resume, failed, unfail, config_cmd, stats, limit]
