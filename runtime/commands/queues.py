"""Verbs about queues: status, jobs, pause, resume (of a queue or a domain), queue
forget, config, stats."""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import click

from runtime import config
from runtime.commands.common import (
    client_of,
    counts_of,
    emit,
    fail,
    job_json,
    known_text,
    number_text,
    stop_on_signals,
    unknown_queues,
    when,
)
from runtime.commands.jobs import progress_text, usage_lines
from runtime.errors import BadArgument
from runtime.queue import wire
from runtime.queue.api.client import Client
from runtime.queue.job import RECORDS
from runtime.queue.ops import LISTED_STATES
from runtime.units import duration
from runtime.vocabulary import Count, JobState

STATE_COLUMNS = tuple(Count)
CLEAR_SCREEN = "\x1b[H\x1b[2J"


PROGRESS_SHOWN = 10  # running jobs with their progress, per queue (JSON) and in all (text)


@click.command()
@click.argument("queues", nargs=-1)
@click.option("--json", "as_json", is_flag=True, help="Print JSON (one line per redraw).")
@click.option(
    "--watch",
    "watch_s",
    type=click.FloatRange(0.1),
    metavar="SECS",
    help="Redraw every SECS seconds until Ctrl-C.",
)
@click.pass_context
def status(ctx: click.Context, queues: Sequence[str], as_json: bool, watch_s: float | None) -> None:
    """Queues and their jobs by state (complete: still kept by retention), and the
    running jobs that told their progress (a sharded site's: summed over its
    namespaces)."""
    client = counts_of(ctx)
    _refuse_unknown(client, queues)
    if watch_s is None:
        _show_status(status_of(client, queues), as_json)
        return
    stop_on_signals()
    try:
        while True:
            rows = status_of(client, queues)
            if not as_json and sys.stdout.isatty():
                click.echo(CLEAR_SCREEN, nl=False)
            if not as_json:
                now_ms = client.conn.now_ms()
                click.echo(f"{when(now_ms)}  every {watch_s:g} s, Ctrl-C to stop")
            _show_status(rows, as_json, compact=True)
            time.sleep(watch_s)
    except KeyboardInterrupt:
        return


def _refuse_unknown(client: Client, queues: Sequence[str]) -> None:
    """Exit 1 naming the queues given that were never used (or were forgotten),
    with the known ones: a typo must not read as an empty queue."""
    if not queues:
        return
    for name in queues:
        wire.check_queue(name)  # a malformed name is a bad argument (exit 2) first
    known = client.queues()
    unknown = [name for name in queues if name not in known]
    if unknown:
        raise unknown_queues(unknown, known)


def status_of(client: Client, queues: Sequence[str]) -> dict[str, dict[str, Any]]:
    """What `runtime status` shows, as text, JSON or watched: each queue's counts by
    state (with its totals, pause and oldest waiting age), and under "in_progress"
    its running jobs that told their progress, latest told first."""
    rows: dict[str, dict[str, Any]] = {
        name: {**counts, "in_progress": []} for name, counts in client.status(*queues).items()
    }
    for job in client.admin.progressing(*queues, count=PROGRESS_SHOWN):
        told = {"jid": job.jid, "klass": job.klass, "worker": job.worker, "progress": job.progress}
        if job.queue in rows:
            rows[job.queue]["in_progress"].append(told)
    return rows


def _show_status(
    rows: Mapping[str, Mapping[str, Any]], as_json: bool, compact: bool = False
) -> None:
    if as_json and compact:
        click.echo(json.dumps(rows, sort_keys=True))
        return
    if as_json:
        emit(rows)
        return
    if not rows:
        click.echo("no queues yet")
        return
    width = max(len("queue"), *(len(q) for q in rows))
    click.echo(f"{'queue':<{width}}  " + "  ".join(f"{c:>9}" for c in STATE_COLUMNS))
    for name, row in sorted(rows.items()):
        cells = "  ".join(f"{row[c]:>9}" for c in STATE_COLUMNS)
        click.echo(f"{name:<{width}}  {cells}" + ("  (paused)" if row["paused"] else ""))
    for line in _progress_lines(rows):
        click.echo(line)


def _progress_lines(rows: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The running jobs that told their progress, latest told first, at most
    PROGRESS_SHOWN of them."""
    told = [(name, job) for name, row in rows.items() for job in row["in_progress"]]
    if not told:
        return []
    told.sort(key=lambda item: -int(item[1]["progress"].get("at_ms") or 0))
    lines = [
        f"  {job['jid']}  {name:<12} {progress_text(job['progress'])}"
        for name, job in told[:PROGRESS_SHOWN]
    ]
    return ["", "in progress (latest told first)", *lines]


# the time a listed job's state is about, by state
_WHEN: dict[str, tuple[str, Any]] = {
    JobState.WAITING: ("put", lambda j: j.put_at_ms),
    JobState.THROTTLED: ("put", lambda j: j.put_at_ms),
    JobState.SCHEDULED: ("due", lambda j: j.due_at_ms),
    JobState.RUNNING: ("lease until", lambda j: j.lease_expires_ms),
    JobState.DEPENDS: ("put", lambda j: j.put_at_ms),
    JobState.COMPLETE: ("completed", lambda j: j.history[-1].at_ms if j.history else None),
    JobState.FAILED: ("failed", lambda j: j.failure.at_ms if j.failure else None),
    JobState.CANCELLED: (
        str(JobState.CANCELLED),
        lambda j: j.cancellation.at_ms if j.cancellation else None,
    ),
}


@click.command("jobs")
@click.argument("queue")
# plain strings: click takes an enum's member names for its choices
@click.option(
    "--state",
    type=click.Choice([str(s) for s in LISTED_STATES]),
    default=str(JobState.WAITING),
    show_default=True,
)
@click.option(
    "--limit",
    type=click.IntRange(1, config.LIMITS["get_max"]),
    default=25,
    show_default=True,
    help="Most jobs to show.",
)
@click.option("--start", type=click.IntRange(0), default=0, help="Jobs to skip first.")
@click.option("--oldest", is_flag=True, help="Oldest first (default: newest first).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON: total and jobs.")
@click.pass_context
def jobs_cmd(
    ctx: click.Context, queue: str, state: str, limit: int, start: int, oldest: bool, as_json: bool
) -> None:
    """Jobs of QUEUE in one state, newest first (waiting: the reverse of pop order);
    exits 1 if QUEUE was never used."""
    client = client_of(ctx)
    total, found = client.admin.jobs(queue, state, start, limit, oldest_first=oldest)
    if not total and not client.admin.queue_known(queue):
        raise unknown_queues([queue], client.queues())
    if as_json:
        emit({"total": total, "jobs": [job_json(j) for j in found]})
        return
    shown = f", showing {start + 1}-{start + len(found)}" if found else ""
    click.echo(f"{total} {state} in {queue}{shown}")
    label, at = _WHEN[state]
    for j in found:
        line = f"{j.jid}  {j.klass}  {label} {when(at(j))}  attempt {j.attempt}"
        if state == JobState.FAILED and j.failure:
            last = (j.failure.message.strip().splitlines() or [""])[-1]
            line += f"  {j.failure.group}: {last[:120]}"
        elif state == JobState.RUNNING and j.worker:
            line += f"  on {j.worker}"
        click.echo(line)


def _known(client: Client, queue: str, hint: str = "") -> None:
    """Exit 1 (naming the known queues, and `hint`) unless QUEUE was ever used."""
    if not client.admin.queue_known(queue):
        raise click.exceptions.Exit(fail(f"no queue {queue} ({known_text(client.queues())}){hint}"))


def _queue_or_domain(queue: str | None, domain: str | None) -> str:
    if (queue is None) == (domain is None):
        raise BadArgument("give a QUEUE or --domain DOMAIN, one of them")
    return queue or ""


@click.command()
@click.argument("queue", required=False)
@click.option("--domain", help="Pause DOMAIN's jobs in every queue instead (others run).")
@click.option(
    "--create", is_flag=True, help="Pause QUEUE even if it was never used (before its first job)."
)
@click.pass_context
def pause(ctx: click.Context, queue: str | None, domain: str | None, create: bool) -> None:
    """Stop masters from leasing jobs of QUEUE (exit 1 if it was never used, unless
    --create), or of --domain DOMAIN in every queue."""
    client = client_of(ctx)
    queue = _queue_or_domain(queue, domain)
    if not queue:
        client.scheduling.pause_domain(domain or "")
        click.echo(f"paused domain {domain}")
        return
    if not create:
        _known(client, queue, "; --create pauses it before its first job")
    client.queue(queue).pause()
    click.echo(f"paused {queue}")


@click.command()
@click.argument("queue", required=False)
@click.option("--domain", help="Resume DOMAIN's jobs instead.")
@click.pass_context
def resume(ctx: click.Context, queue: str | None, domain: str | None) -> None:
    """Let masters lease jobs of QUEUE again (exit 1 if it was never used), or of
    --domain DOMAIN."""
    client = client_of(ctx)
    queue = _queue_or_domain(queue, domain)
    if not queue:
        client.scheduling.resume_domain(domain or "")
        click.echo(f"resumed domain {domain}")
        return
    _known(client, queue)
    client.queue(queue).resume()
    click.echo(f"resumed {queue}")


@click.group("queue", no_args_is_help=False)
def queue_group() -> None:
    """Queues themselves: forget an empty one."""


@queue_group.command("forget")
@click.argument("queue")
@click.pass_context
def forget(ctx: click.Context, queue: str) -> None:
    """Forget QUEUE if it is empty: it leaves the list of queues, with its totals,
    statistics and pause (complete jobs stay until retention deletes them)."""
    client = client_of(ctx)
    if not client.admin.queue_forget(queue):
        raise unknown_queues([queue], client.queues())
    click.echo(f"forgot {queue}")


def unable_to_read_compact(client: Client) -> list[str]:
    """The running masters of the namespace whose release does not read compact
    records: those whose info (worker_info.lua: sent at least every 10 minutes,
    kept an hour) tells no `records`, or fewer."""
    return [
        worker
        for worker, info in sorted(client.admin.workers().items())
        if info.get("told") and (info.get("records") or 1) < RECORDS
    ]


@click.command("config")
@click.argument("name", required=False)
@click.argument("value", required=False)
@click.option("--unset", is_flag=True, help="Remove NAME, back to its default.")
@click.option(
    "--force",
    is_flag=True,
    help="Set compact-records 1 even though masters that cannot read them are registered.",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON: {name: value}.")
@click.pass_context
def config_cmd(
    ctx: click.Context,
    name: str | None,
    value: str | None,
    unset: bool,
    force: bool,
    as_json: bool,
) -> None:
    """Show settings, or set NAME to VALUE (e.g. heartbeat 30, emails-heartbeat 10).
    compact-records 1 is refused while a registered master runs a release that
    cannot read compact records (README, Upgrading), unless --force."""
    client = client_of(ctx)
    if unset:
        if name is None:
            raise BadArgument("--unset needs a NAME")
        client.admin.config_unset(name)
    elif name is not None and value is not None:
        if name == "compact-records" and config.shared_setting(name).parse(value) == 1:
            unable = unable_to_read_compact(client)
            if unable and not force:
                raise BadArgument(
                    "compact-records not set: masters of an earlier release, which cannot "
                    f"read compact records, are running: {', '.join(unable)}; upgrade them "
                    "first (one gone for good stops counting an hour after it last told "
                    "who it is), or give --force"
                )
        client.admin.config_set(name, value)
    values = client.admin.config_get()
    if name is not None:
        config.shared_setting(name)
        values = {name: values.get(name, config.shared_setting(name).default)}
    if as_json:
        emit({key: _number(v) for key, v in values.items()})
        return
    if name is not None:
        click.echo(f"{name} = {number_text(values[name])}")
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
    """Wait and run times of a queue's jobs (percentiles, histogram with millisecond
    buckets below a second), with failures, failed, retries, cancels and expired
    jobs; exits 1 if QUEUE was never used."""
    client = client_of(ctx)
    found = client.admin.stats(queue, day.date() if day else None)
    if not client.admin.queue_known(queue):
        raise unknown_queues([queue], client.queues())
    if as_json:
        emit(dataclasses.asdict(found))
        return
    click.echo(
        f"{queue} on {found.day}: failures {found.failures}, failed {found.failed}, "
        f"retries {found.retries}, cancelled {found.cancelled}"
        + (f", expired {found.expired}" if found.expired else "")
    )
    for name, times in (("wait", found.wait), ("run", found.run)):
        click.echo(
            f"{name:<5} {times.count} jobs, mean {duration(times.mean)}, "
            f"stddev {duration(times.stddev)}"
        )
        if times.count:
            cuts = ", ".join(
                f"{label} {duration(value)}"
                for label, value in (("p50", times.p50), ("p95", times.p95), ("p99", times.p99))
            )
            click.echo(f"      {cuts}")
        for lower_s, n in times.histogram:
            click.echo(f"      >= {duration(lower_s):>7}  {n}")
    for line in usage_lines(found.usage):
        click.echo(line)


def _number(value: float) -> int | float:
    """A setting as JSON: whole numbers as integers (1048576, not 1048576.0)."""
    return int(value) if float(value).is_integer() else float(value)


COMMANDS = [status, jobs_cmd, pause, resume, queue_group, config_cmd, stats]
