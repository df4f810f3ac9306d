"""Verbs about jobs: put, job, cancel, retry, priority, depends, tags, tracking."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from typing import Any

import click

from runtime import config
from runtime.commands.common import (
    check_jid,
    client_of,
    emit,
    fail,
    job_json,
    known_text,
    parse_data,
    when,
)
from runtime.queue.api.client import Client
from runtime.queue.job import HistoryEvent, Job
from runtime.queue.usage import KlassUsage
from runtime.vocabulary import CancelledBy, JobState


@click.command()
@click.argument("queue")
@click.argument("klass")
@click.argument("data", required=False)
@click.option("--priority", type=int, default=0, help="Lower pops first.")
@click.option("--delay", type=float, default=0.0, help="Seconds before it may run.")
@click.option("--tag", "tags", multiple=True, help="A tag (repeatable).")
@click.option("--retries", type=int, default=config.DEFAULT_RETRIES)
@click.option("--depends", multiple=True, help="A jid this job waits for (repeatable).")
@click.option("--domain", help="Rate-limit key, e.g. a host name.")
@click.option("--unique-key", help="De-duplication key.")
@click.option("--jid", help="Your own job id.")
@click.pass_context
def put(
    ctx: click.Context,
    queue: str,
    klass: str,
    data: str | None,
    priority: int,
    delay: float,
    tags: Sequence[str],
    retries: int,
    depends: Sequence[str],
    domain: str | None,
    unique_key: str | None,
    jid: str | None,
) -> None:
    """Put a job: QUEUE KLASS [DATA as JSON, @file or -]. A queue's first job
    adds it to the known queues (a note on stderr says so: a typo shows)."""
    payload = parse_data(data)
    client = client_of(ctx)
    new = not client.admin.queue_known(queue)
    jid = client.queue(queue).put(
        klass,
        payload,
        priority=priority,
        delay=delay,
        tags=tags,
        retries=retries,
        depends=depends,
        domain=domain,
        unique_key=unique_key,
        jid=jid,
    )
    click.echo(jid)
    if new:
        others = [name for name in client.queues() if name != queue]
        click.echo(
            f"runtime: note: queue {queue} is new; {known_text(others, 'other queues')}", err=True
        )


RELATED_SHOWN = 20  # dependencies and dependents listed by `runtime job`
OUTPUT_LINES = 20  # lines of the output tail shown
RESULT_CHARS = 2000  # characters of a result shown


def describe(job: Job, related: Mapping[str, Job | None] | None = None) -> list[str]:
    """`runtime job`: the job, what it waits on and what waits on it (with their
    states, from `related`), its result, progress, cancellation (a tombstone's),
    failure, output and history."""
    related = related or {}
    lines = [
        f"jid        {job.jid}",
        f"klass      {job.klass}",
        f"queue      {job.queue}",
        f"state      {job.state}",
        f"priority   {job.priority}",
        f"retries    {job.remaining} of {job.retries} left (attempt {job.attempt})",
        f"worker     {job.worker or '-'}",
        f"tags       {', '.join(job.tags) or '-'}",
        f"data       {json.dumps(job.data)}",
    ]
    if job.domain:
        lines.append(f"domain     {job.domain}")
    lines += _related("depends", job.depends, related)
    lines += _related("dependents", job.dependents, related)
    if job.state == JobState.COMPLETE:
        lines.append(f"result     {_result(job.result)}")
    if job.progress is not None:
        lines.append(f"progress   {progress_text(job.progress)}")
    if job.usage is not None:
        lines.append(f"usage      {usage_text(job.usage)} (last attempt)")
    if job.cancellation:
        by, at = job.cancellation.by, when(job.cancellation.at_ms)
        lines.append(f"cancelled  at {at} by {by} (its data deleted: a tombstone until retention)")
    if job.failure:
        lines.append(f"failure    {job.failure.group} at {when(job.failure.at_ms)}")
        lines += ["  " + line for line in job.failure.message.splitlines()]
    lines += _output(job.output)
    lines.append("history")
    lines += [_event(ev) for ev in job.history]
    return lines


def _related(title: str, jids: Sequence[str], related: Mapping[str, Job | None]) -> list[str]:
    """One line per job (with its state), at most RELATED_SHOWN of them."""
    if not jids:
        return []
    shown = sorted(jids)[:RELATED_SHOWN]
    rows = []
    for jid in shown:
        other = related.get(jid)
        state = "gone" if jid in related and other is None else other.state if other else "?"
        why = f" ({other.failure.group})" if other and other.failure else ""
        rows.append(f"{jid} {state}{why}")
    if len(jids) > len(shown):
        rows.append(f"... and {len(jids) - len(shown)} more")
    return [f"{title:<10} {rows[0]}"] + [f"           {row}" for row in rows[1:]]


def _result(result: Any) -> str:
    if result is None:
        return "-"
    text = json.dumps(result, ensure_ascii=False)
    return text if len(text) <= RESULT_CHARS else f"{text[:RESULT_CHARS]}... ({len(text)} chars)"


def progress_text(progress: Mapping[str, Any]) -> str:
    """ "3/10 (30%) page 3, at <time>" from a job's progress."""
    done, total = progress.get("done"), progress.get("total")
    count = _number(done)
    if total is not None:
        count += f"/{_number(total)}"
        if isinstance(done, int | float) and isinstance(total, int | float) and total > 0:
            count += f" ({100 * done / total:.0f}%)"
    message = progress.get("message")
    return f"{count}{' ' + message if message else ''}, at {when(progress.get('at_ms'))}"


TOP_KLASSES = 5  # shown by CPU and by memory


def usage_lines(klasses: Sequence[KlassUsage]) -> list[str]:
    """The klasses that cost most: by CPU (all their attempts together) and by
    memory (mean peak RSS of an attempt, and the highest bucket hit)."""
    if not klasses:
        return []
    lines = ["top klasses by CPU (all attempts today)"]
    for u in sorted(klasses, key=lambda u: -u.cpu_s)[:TOP_KLASSES]:
        lines.append(
            f"      {u.cpu_s:10.2f} s  {u.count} attempts, mean {u.mean_cpu_s:.3f} s  {u.klass}"
        )
    lines.append("top klasses by memory (peak RSS of an attempt)")
    for u in sorted(klasses, key=lambda u: -u.mean_rss_mb)[:TOP_KLASSES]:
        top = f"<= {u.top_rss_mb:g}" if u.top_rss_mb is not None else "> 16384"
        lines.append(f"      {u.mean_rss_mb:8.1f} MB mean, {top} MB at most  {u.klass}")
    return lines


def usage_text(usage: Mapping[str, Any]) -> str:
    """ "cpu 0.612 s, peak 212.3 MB" from an attempt's usage."""
    of = " (the child's since it started)" if usage.get("max_rss_of") == "child" else ""
    return f"cpu {usage['cpu_s']:.3f} s, peak {usage['max_rss_mb']:.1f} MB{of}"


def _number(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _output(output: str) -> list[str]:
    if not output:
        return []
    tail = output.rstrip("\n").splitlines()
    shown = tail[-OUTPUT_LINES:]
    head = (
        f"output     last {len(shown)} of {len(tail)} lines" if len(tail) > len(shown) else "output"
    )
    return [head] + ["  " + line for line in shown]


def _event(ev: HistoryEvent) -> str:
    fields = (
        ("worker", ev.worker),
        ("queue", ev.queue),
        ("group", ev.group),
        ("delay_ms", ev.delay_ms),
        ("priority", ev.priority),
        ("by", ev.by),
        ("count", ev.count),
    )
    extra = " ".join(f"{k}={v}" for k, v in fields if v is not None)
    if ev.jids:
        more = "..." if ev.count is not None and ev.count > len(ev.jids) else ""
        extra += f" jids={','.join(ev.jids)}{more}"
    if ev.usage is not None:
        extra += f" [{usage_text(ev.usage)}]"
    if ev.note:
        extra += f" ({ev.note})"
    return f"  {when(ev.at_ms)}  {ev.event:<10} {extra.strip()}".rstrip()


def related_jobs(client: Client, job: Job) -> dict[str, Job | None]:
    """The jobs `job` waits on and that wait on it (the first RELATED_SHOWN of each)."""
    jids = sorted(job.depends)[:RELATED_SHOWN] + sorted(job.dependents)[:RELATED_SHOWN]
    return dict(zip(jids, client.get_jobs(jids), strict=True)) if jids else {}


@click.command()
@click.argument("jid", callback=check_jid)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def job(ctx: click.Context, jid: str, as_json: bool) -> None:
    """One job, with its history."""
    client = client_of(ctx)
    found = client.get_job(jid)
    if found is None:
        raise click.exceptions.Exit(fail(f"no job {jid}"))
    related = related_jobs(client, found)
    if as_json:
        fields = {k: v for k, v in vars(found).items() if k != "client"}
        if found.cancellation is not None:
            fields["cancellation"] = dataclasses.asdict(found.cancellation)
        fields["related"] = {j: None if o is None else o.state for j, o in related.items()}
        emit(fields)
    else:
        click.echo("\n".join(describe(found, related)))


@click.command()
@click.argument("jids", nargs=-1, required=True)
@click.pass_context
def cancel(ctx: click.Context, jids: Sequence[str]) -> None:
    """Cancel (delete) jobs; exits 1 if one of them did not exist."""
    done = client_of(ctx).cancel(*jids, by=CancelledBy.CLI)
    click.echo(f"cancelled {len(done)} of {len(jids)}")
    missing = sorted(set(jids) - set(done))
    if missing:
        more = " ..." if len(missing) > RELATED_SHOWN else ""
        shown = ", ".join(missing[:RELATED_SHOWN]) + more
        raise click.exceptions.Exit(fail(f"no job{'s' * (len(missing) > 1)} {shown}"))


@click.command("retry")
@click.argument("jid")
@click.option("--queue", help="Run it on this queue instead of its own.")
@click.pass_context
def retry_cmd(ctx: click.Context, jid: str, queue: str | None) -> None:
    """Run a failed, complete or scheduled job again now (retries renewed)."""
    click.echo(client_of(ctx).scheduling.requeue(jid, queue))


@click.command(context_settings={"ignore_unknown_options": True})  # VALUE may be negative
@click.argument("jid")
@click.argument("value", type=int)
@click.pass_context
def priority(ctx: click.Context, jid: str, value: int) -> None:
    """Change a job's priority (lower pops first)."""
    click.echo(client_of(ctx).scheduling.set_priority(jid, value))


@click.command()
@click.argument("jid")
@click.argument("verb", type=click.Choice(["on", "off"]))
@click.argument("others", nargs=-1, required=True)
@click.pass_context
def depends(ctx: click.Context, jid: str, verb: str, others: Sequence[str]) -> None:
    """Make JID wait (on) or stop waiting (off) on other jobs."""
    client = client_of(ctx)
    state = (
        client.scheduling.depend(jid, *others)
        if verb == "on"
        else client.scheduling.undepend(jid, *others)
    )
    click.echo(state)


@click.command()
@click.argument("jid")
@click.argument("tags", nargs=-1, required=True)
@click.pass_context
def tag(ctx: click.Context, jid: str, tags: Sequence[str]) -> None:
    """Add tags to a job."""
    click.echo(" ".join(client_of(ctx).scheduling.tag(jid, *tags)))


@click.command()
@click.argument("jid")
@click.argument("tags", nargs=-1, required=True)
@click.pass_context
def untag(ctx: click.Context, jid: str, tags: Sequence[str]) -> None:
    """Remove tags from a job."""
    click.echo(" ".join(client_of(ctx).scheduling.untag(jid, *tags)))


def _rows(jobs: Sequence[Job]) -> None:
    for j in jobs:
        click.echo(f"{j.jid}  {j.queue:<12} {j.state:<9} {j.klass}")


@click.command()
@click.argument("name")
@click.option("--start", type=click.IntRange(0), default=0)
@click.option("--count", type=click.IntRange(1, 1000), default=25)
@click.option("--json", "as_json", is_flag=True, help="Print JSON: total and jobs.")
@click.pass_context
def tagged(ctx: click.Context, name: str, start: int, count: int, as_json: bool) -> None:
    """Jobs carrying a tag, newest first."""
    total, jobs = client_of(ctx).scheduling.tagged(name, start, count)
    if as_json:
        emit({"total": total, "jobs": [job_json(j) for j in jobs]})
        return
    click.echo(f"{total} jobs tagged {name}")
    _rows(jobs)


@click.command()
@click.argument("jid")
@click.option("--off", is_flag=True, help="Stop tracking it.")
@click.pass_context
def track(ctx: click.Context, jid: str, off: bool) -> None:
    """Track a job: it is listed by `runtime tracked` and publishes its events."""
    client = client_of(ctx)
    if off:
        client.scheduling.untrack(jid)
    else:
        client.scheduling.track(jid)
    click.echo(f"{'untracked' if off else 'tracking'} {jid}")


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON: a list of jobs.")
@click.pass_context
def tracked(ctx: click.Context, as_json: bool) -> None:
    """Tracked jobs."""
    found = client_of(ctx).scheduling.tracked()
    if as_json:
        emit([job_json(j) for j in found])
        return
    _rows(found)


@click.command()
@click.option("--idle", type=click.FloatRange(0), help="Stop after this many quiet seconds.")
@click.pass_context
def events(ctx: click.Context, idle: float | None) -> None:
    """Follow the events of tracked jobs (one JSON line each)."""
    for event in client_of(ctx).scheduling.events(idle_s=idle):
        click.echo(json.dumps(event, sort_keys=True))


COMMANDS = [
    put,
    job,
    cancel,
    retry_cmd,
    priority,
    depends,
    tag,
    untag,
    tagged,
    track,
    tracked,
    events,
]
