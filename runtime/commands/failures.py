"""Verbs about failed jobs: failed (groups, or the jobs of one) and unfail."""

from __future__ import annotations

import click

from runtime import config
from runtime.commands.common import client_of, emit, fail, job_json, known_text
from runtime.errors import BadArgument


@click.command()
@click.argument("group", required=False)
@click.option("--start", type=int, default=0)
@click.option("--count", type=int, default=25)
@click.option(
    "--json", "as_json", is_flag=True, help="Print JSON: {group: count}, or total and jobs."
)
@click.pass_context
def failed(ctx: click.Context, group: str | None, start: int, count: int, as_json: bool) -> None:
    """Failure groups with their counts, or the jobs of GROUP (exit 1 if it holds none)."""
    client = client_of(ctx)
    if group is None:
        groups = client.failed()
        if as_json:
            emit(groups)
            return
        if not groups:
            click.echo("no failed jobs")
        for name, n in sorted(groups.items(), key=lambda kv: -kv[1]):
            click.echo(f"{n:>8}  {name}")
        return
    total, jobs = client.admin.failed_jobs(group, start, count)
    if not total:
        known = known_text(client.failed(), "failure groups")
        raise click.exceptions.Exit(fail(f"no failed jobs in group {group} ({known})"))
    if as_json:
        emit({"total": total, "jobs": [job_json(j) for j in jobs]})
        return
    click.echo(f"{total} failed in {group}")
    for j in jobs:
        last = (j.failure.message.strip().splitlines() or [""])[-1] if j.failure else ""
        click.echo(f"{j.jid}  {j.queue}  {j.klass}  {last}")


@click.command()
@click.argument("group", required=False)
@click.argument("queue", required=False)
@click.option(
    "--count",
    type=click.IntRange(1, config.LIMITS["unfail_max"]),
    default=25,
    show_default=True,
    help="Most jobs to move (without --all).",
)
@click.option(
    "--all", "every", is_flag=True, help="Every failed job of GROUP (of every group without GROUP)."
)
@click.pass_context
def unfail(
    ctx: click.Context, group: str | None, queue: str | None, count: int, every: bool
) -> None:
    """Move failed jobs of GROUP back to QUEUE (default: each job's own queue),
    oldest first."""
    client = client_of(ctx)
    if every:
        if queue is not None:
            raise BadArgument("--all moves jobs back to their own queues: give no QUEUE")
        moved = client.admin.unfail_all(group)
        click.echo(f"moved {moved} jobs back to their queues")
        return
    if group is None:
        raise BadArgument("give a GROUP (runtime failed lists them), or --all")
    groups = client.failed()
    if not groups.get(group):
        known = known_text(groups, "failure groups")
        raise click.exceptions.Exit(fail(f"no failed jobs in {group} ({known})"))
    if queue is None:
        moved = client.admin.unfail_own(group, count)
        click.echo(f"moved {moved} jobs back to their queues")
    else:
        moved = client.unfail(group, queue, count)
        click.echo(f"moved {moved} jobs to {queue}")


COMMANDS = [failed, unfail]
