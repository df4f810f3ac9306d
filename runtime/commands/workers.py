"""Verbs about workers: worker, workers, demo."""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

from runtime import config
from runtime import demo as demo_jobs
from runtime.commands.common import client_of, emit, fail, settings_of, when
from runtime.commands.queues import status
from runtime.units import duration
from runtime.vocabulary import ENDED_STATES, JobState

log = logging.getLogger(__name__)


@click.command()
@click.argument("modules", nargs=-1, required=True)
@click.option("-q", "--queues", required=True, help="Queues to serve, comma-separated.")
@click.option("-c", "--concurrency", type=click.IntRange(0), help="Children (default: CPUs).")
@click.option("--order", type=click.Choice(config.ORDERS), default="ordered", show_default=True)
@click.option(
    "--prefetch",
    type=click.IntRange(0),
    help="Jobs leased ahead of the children while jobs are short (default: ~10 ms of work).",
)
@click.option(
    "--pipeline",
    type=click.IntRange(0),
    help="Most jobs a busy child holds behind its running one while jobs are short "
    "(default 2; 0: a child gets a job only when idle).",
)
@click.option("--max-jobs-per-child", type=click.IntRange(1), help="Recycle after N jobs.")
@click.option("--max-memory-per-child", type=click.IntRange(1), help="Recycle above MiB.")
@click.option("--memory-limit", type=click.IntRange(1), help="Kill a job above MiB (RSS).")
@click.option(
    "--cpu-limit",
    type=click.FloatRange(0, min_open=True),
    help="CPU seconds per job (soft and hard RLIMIT_CPU; each job gets a fresh child).",
)
@click.option("--address-space", type=click.IntRange(1), help="RLIMIT_AS of children, MiB.")
@click.option("--open-files", type=click.IntRange(16), help="RLIMIT_NOFILE of children.")
@click.option("--max-processes", type=click.IntRange(1), help="RLIMIT_NPROC of children.")
@click.option("--user", help="Run children as this user.")
@click.option("--group", help="Run children as this group.")
@click.option(
    "--grace",
    type=click.FloatRange(0),
    default=30.0,
    show_default=True,
    help="TERM: seconds running jobs get to finish.",
)
@click.option(
    "--kill-grace",
    type=click.FloatRange(0),
    default=5.0,
    show_default=True,
    help="Seconds between SIGTERM and SIGKILL of a timed-out job.",
)
@click.option("--sandbox-dir", type=click.Path(file_okay=False), help="Where children work.")
@click.option(
    "--allow-eviction",
    is_flag=True,
    default=None,
    help="Start even if Redis evicts keys when full (maxmemory-policy not noeviction).",
)
@click.option(
    "--allow-no-aof",
    is_flag=True,
    default=None,
    help="No warning when Redis keeps no append-only file (appendonly no).",
)
@click.option(
    "--env",
    "env_names",
    multiple=True,
    metavar="NAME",
    help="Let the environment variable NAME through to the jobs even if it looks secret "
    "(repeatable; adds to the env setting, RUNTIME_ENV).",
)
@click.option(
    "--otel",
    is_flag=True,
    default=None,
    help="Run each attempt in an OpenTelemetry span (also on when OTEL_* names an exporter; "
    "needs the otel extra).",
)
@click.option(
    "--otel-file",
    type=click.Path(dir_okay=False),
    help="Also write each span as one JSON line to this file (local debugging).",
)
@click.option("--worker-id", help="Default: hostname-pid.")
@click.pass_context
def worker(
    ctx: click.Context,
    /,
    modules: Sequence[str],
    queues: str,
    env_names: Sequence[str],
    **options: Any,
) -> None:
    """Run a master serving QUEUES with jobs from MODULES (the allow-list)."""
    from runtime.master.main import run_worker  # noqa: PLC0415 - only this verb needs it

    settings = settings_of(ctx)
    level = ctx.find_root().ensure_object(dict).get("log_level") or config.WORKER_LOG_LEVEL
    logging.getLogger().setLevel(level)
    names = config.env_names((*settings.env, *env_names))
    _warn_unset(names)
    renamed = {
        "max_memory_per_child": "max_memory_per_child_mib",
        "memory_limit": "memory_limit_mib",
        "cpu_limit": "cpu_limit_s",
        "address_space": "address_space_mib",
        "grace": "grace_s",
        "kill_grace": "kill_grace_s",
    }
    fields = {renamed.get(k, k): v for k, v in options.items() if v is not None}
    worker_id = fields.pop("worker_id", None)
    if "sandbox_dir" in fields:
        fields["sandbox_dir"] = Path(fields["sandbox_dir"])
    if "otel_file" in fields:  # children work in their sandboxes: an absolute path
        fields["otel_file"] = Path(fields["otel_file"]).absolute()
    served = tuple(q.strip() for q in queues.split(",") if q.strip())
    worker_settings = config.WorkerSettings(
        modules=tuple(modules), queues=served, env=names, log_level=level, **fields
    )
    raise click.exceptions.Exit(run_worker(settings, worker_settings, worker_id))


def _warn_unset(names: Sequence[str]) -> None:
    unset = [name for name in names if name not in os.environ]
    if unset:
        log.warning("env names variables that are not set: %s", ", ".join(unset))


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def workers(ctx: click.Context, as_json: bool) -> None:
    """Masters seen lately: host, pid, queues, concurrency, and each running job's
    klass and elapsed time."""
    found = client_of(ctx).admin.workers()
    if as_json:
        emit(found)
        return
    if not found:
        click.echo("no workers seen")
    for name, info in found.items():
        concurrency = "-" if info.get("concurrency") is None else info["concurrency"]
        click.echo(
            f"{name}  host {info.get('host') or '-'}  pid {info.get('pid') or '-'}  "
            f"queues {','.join(info.get('queues') or []) or '-'}  concurrency {concurrency}  "
            f"seen {when(info['seen_ms'])}  {len(info['jobs'])} running"
        )
        for job in info.get("running", []):
            elapsed = job.get("elapsed_ms")
            took = "-" if elapsed is None else duration(elapsed / 1000)
            click.echo(f"    {job['jid']}  {job.get('klass') or '?'}  {took}")


@click.command()
@click.option("--timeout", type=click.FloatRange(1), default=60.0, show_default=True)
@click.pass_context
def demo(ctx: click.Context, timeout: float) -> None:
    """Put the sample jobs of runtime.demo, run a worker over them, show the outcome."""
    client = client_of(ctx)
    cleared = demo_jobs.clear_earlier(client)
    if cleared:
        click.echo(f"deleted {cleared} jobs an earlier demo left on queue {demo_jobs.QUEUE!r}")
    jids = demo_jobs.put_samples(client)
    click.echo(f"put {len(jids)} sample jobs on queue {demo_jobs.QUEUE!r}; starting a worker")
    jobs = demo_jobs.run_worker_until_done(client, jids, timeout)
    click.echo(f"\n{'jid':<32}  {'klass':<12} {'state':<9} attempts  outcome")
    for job in jobs:
        name = job.klass.rpartition(":")[2]
        outcome = demo_jobs.outcome(job)
        click.echo(f"{job.jid}  {name:<12} {job.state:<9} {job.attempt:>8}  {outcome}")
    click.echo("")
    ctx.invoke(status, queues=(demo_jobs.QUEUE,))
    states = [j.state for j in jobs]
    complete, failed = states.count(JobState.COMPLETE), states.count(JobState.FAILED)
    click.echo(f"\n{complete} complete, {failed} failed")
    if any(s not in ENDED_STATES for s in states):
        raise click.exceptions.Exit(fail("the demo did not finish in time"))


COMMANDS = [worker, workers, demo]
