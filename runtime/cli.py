"""The `runtime` command: argument parsing, output and exit codes only.

Exit codes: 0 done; 1 the operation failed (no such job, lease lost, ...);
2 bad arguments or configuration; 3 Redis unreachable or refusing us.
Every error is one line on stderr, never a traceback.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click

from runtime import config
from runtime import demo as demo_jobs
from runtime.errors import (
    BadArgument,
    ConfigError,
    EmbeddedRedisError,
    Error,
    RedisUnavailable,
)
from runtime.queue.client import Client
from runtime.queue.job import Job

EXIT_FAILED, EXIT_USAGE, EXIT_UNAVAILABLE = 1, 2, 3
STATE_COLUMNS = ("waiting", "throttled", "scheduled", "running", "stalled", "depends")


def _client(ctx: click.Context) -> Client:
    obj: dict[str, Any] = ctx.ensure_object(dict)
    if "client" not in obj:
        settings = config.load_settings({"url": obj.get("url"), "namespace": obj.get("namespace")})
        obj["client"] = Client(settings=settings)
    client: Client = obj["client"]
    return client


def _when(ms: int | None) -> str:
    if ms is None:
        return "-"
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"


def _emit(value: Any) -> None:
    click.echo(json.dumps(value, indent=2, sort_keys=True, default=str))


def _parse_data(text: str | None) -> dict[str, Any]:
    if text is None:
        return {}
    if text == "-":
        text = sys.stdin.read()
    elif text.startswith("@"):
        try:
            with open(text[1:], encoding="utf-8") as fh:
                text = fh.read()
        except OSError as err:
            raise BadArgument(f"cannot read {text[1:]}: {err.strerror}") from None
    try:
        data = json.loads(text)
    except ValueError as err:
        raise BadArgument(f"DATA is not JSON: {err}") from None
    if not isinstance(data, dict):
        raise BadArgument('DATA must be a JSON object, like \'{"to": "a@b.c"}\'')
    return data


@click.group(name="runtime", context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--url", envvar="REDIS_URL", help="Redis URL (default: the embedded server).")
@click.option("--namespace", envvar="RUNTIME_NAMESPACE", help="Key namespace (default: runtime).")
@click.option("-v", "--verbose", count=True, help="Log more (-vv for debug).")
@click.pass_context
def cli(ctx: click.Context, url: str | None, namespace: str | None, verbose: int) -> None:
    """runtime: jobs on Redis, run by forking masters."""
    level = logging.WARNING - 10 * min(verbose, 2)
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    ctx.ensure_object(dict).update(url=url, namespace=namespace)


@cli.command()
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
    """Put a job: QUEUE KLASS [DATA as JSON, @file or -]."""
    payload = _parse_data(data)
    jid = _client(ctx).queue(queue).put(
        klass, payload, priority=priority, delay=delay, tags=tags, retries=retries,
        depends=depends, domain=domain, unique_key=unique_key, jid=jid,
    )  # fmt: skip
    click.echo(jid)


@cli.command()
@click.argument("queues", nargs=-1)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def status(ctx: click.Context, queues: Sequence[str], as_json: bool) -> None:
    """Queues and their jobs by state."""
    counts = _client(ctx).status(*queues)
    if as_json:
        _emit(counts)
        return
    if not counts:
        click.echo("no queues yet")
        return
    width = max(len("queue"), *(len(q) for q in counts))
    click.echo(f"{'queue':<{width}}  " + "  ".join(f"{c:>9}" for c in STATE_COLUMNS))
    for name, row in sorted(counts.items()):
        cells = "  ".join(f"{row[c]:>9}" for c in STATE_COLUMNS)
        click.echo(f"{name:<{width}}  {cells}" + ("  (paused)" if row["paused"] else ""))


def _describe(job: Job) -> list[str]:
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
    if job.depends:
        lines.append(f"depends    {', '.join(job.depends)}")
    if job.failure:
        lines.append(f"failure    {job.failure.group} at {_when(job.failure.at_ms)}")
        lines += ["  " + line for line in job.failure.message.splitlines()]
    lines.append("history")
    for ev in job.history:
        extra = " ".join(
            f"{k}={v}"
            for k, v in (("worker", ev.worker), ("queue", ev.queue), ("group", ev.group),
                         ("delay_ms", ev.delay_ms), ("priority", ev.priority))
            if v is not None
        )  # fmt: skip
        lines.append(f"  {_when(ev.at_ms)}  {ev.event:<10} {extra}".rstrip())
    return lines


@cli.command()
@click.argument("jid")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def job(ctx: click.Context, jid: str, as_json: bool) -> None:
    """One job, with its history."""
    found = _client(ctx).get_job(jid)
    if found is None:
        raise click.exceptions.Exit(_fail(f"no job {jid}"))
    if as_json:
        fields = {k: v for k, v in vars(found).items() if k != "client"}
        _emit(fields)
    else:
        click.echo("\n".join(_describe(found)))


@cli.command()
@click.argument("group", required=False)
@click.option("--start", type=int, default=0)
@click.option("--count", type=int, default=25)
@click.pass_context
def failed(ctx: click.Context, group: str | None, start: int, count: int) -> None:
    """Failure groups with their counts, or the jobs of GROUP."""
    client = _client(ctx)
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


@cli.command()
@click.argument("group")
@click.argument("queue", required=False)
@click.option("--count", type=int, default=25, help="Most jobs to move.")
@click.pass_context
def unfail(ctx: click.Context, group: str, queue: str | None, count: int) -> None:
    """Move failed jobs of GROUP back to QUEUE (default: each job's own queue)."""
    client = _client(ctx)
    if queue is None:
        _, jobs = client.failed_jobs(group, 0, 1)
        if not jobs:
            raise click.exceptions.Exit(_fail(f"no failed jobs in {group}"))
        queue = jobs[0].queue
    moved = client.unfail(group, queue, count)
    click.echo(f"moved {moved} jobs to {queue}")


@cli.command()
@click.argument("jids", nargs=-1, required=True)
@click.pass_context
def cancel(ctx: click.Context, jids: Sequence[str]) -> None:
    """Cancel (delete) jobs."""
    done = _client(ctx).cancel(*jids)
    click.echo(f"cancelled {len(done)} of {len(jids)}")


@cli.command()
@click.argument("queue")
@click.pass_context
def pause(ctx: click.Context, queue: str) -> None:
    """Stop masters from leasing jobs of QUEUE."""
    _client(ctx).queue(queue).pause()
    click.echo(f"paused {queue}")


@cli.command()
@click.argument("queue")
@click.pass_context
def resume(ctx: click.Context, queue: str) -> None:
    """Let masters lease jobs of QUEUE again."""
    _client(ctx).queue(queue).resume()
    click.echo(f"resumed {queue}")


@cli.command("config")
@click.argument("name", required=False)
@click.argument("value", required=False)
@click.option("--unset", is_flag=True, help="Remove NAME, back to its default.")
@click.pass_context
def config_cmd(ctx: click.Context, name: str | None, value: str | None, unset: bool) -> None:
    """Show settings, or set NAME to VALUE (e.g. heartbeat 30, emails-heartbeat 10)."""
    client = _client(ctx)
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
        click.echo(f"{name} = {values.get(name, default):g}")
        return
    for key in sorted(values):
        help_ = config.SHARED[key].help if key in config.SHARED else "(per-queue override)"
        click.echo(f"{key:<24} {values[key]:>12g}  {help_}")


@cli.command()
@click.argument("modules", nargs=-1, required=True)
@click.option("-q", "--queues", required=True, help="Queues to serve, comma-separated.")
@click.option("-c", "--concurrency", type=click.IntRange(0), help="Children (default: CPUs).")
@click.option("--order", type=click.Choice(config.ORDERS), default="ordered", show_default=True)
@click.option(
    "--prefetch",
    type=click.IntRange(0),
    help="Jobs leased ahead of free children, while jobs are short (default: --concurrency).",
)
@click.option("--max-jobs-per-child", type=click.IntRange(1), help="Recycle after N jobs.")
@click.option("--max-memory-per-child", type=click.IntRange(1), help="Recycle above MiB.")
@click.option("--memory-limit", type=click.IntRange(1), help="Kill a job above MiB (RSS).")
@click.option("--cpu-limit", type=click.FloatRange(0, min_open=True), help="CPU s per job.")
@click.option("--address-space", type=click.IntRange(1), help="RLIMIT_AS of children, MiB.")
@click.option("--open-files", type=click.IntRange(16), help="RLIMIT_NOFILE of children.")
@click.option("--max-processes", type=click.IntRange(1), help="RLIMIT_NPROC of children.")
@click.option("--user", help="Run children as this user.")
@click.option("--group", help="Run children as this group.")
@click.option("--grace", type=click.FloatRange(0), default=30.0, show_default=True,
              help="TERM: seconds running jobs get to finish.")  # fmt: skip
@click.option("--kill-grace", type=click.FloatRange(0), default=5.0, show_default=True,
              help="Seconds between SIGTERM and SIGKILL of a timed-out job.")  # fmt: skip
@click.option("--sandbox-dir", type=click.Path(file_okay=False), help="Where children work.")
@click.option("--worker-id", help="Default: hostname-pid.")
@click.pass_context
def worker(ctx: click.Context, /, modules: Sequence[str], queues: str, **options: Any) -> None:
    """Run a master serving QUEUES with jobs from MODULES (the allow-list)."""
    from runtime.master.main import run_worker  # noqa: PLC0415 - only this verb needs it

    if logging.getLogger().level > logging.INFO:
        logging.getLogger().setLevel(logging.INFO)
    renamed = {"max_memory_per_child": "max_memory_per_child_mib",
               "memory_limit": "memory_limit_mib", "cpu_limit": "cpu_limit_s",
               "address_space": "address_space_mib", "grace": "grace_s",
               "kill_grace": "kill_grace_s"}  # fmt: skip
    fields = {renamed.get(k, k): v for k, v in options.items() if v is not None}
    worker_id = fields.pop("worker_id", None)
    if "sandbox_dir" in fields:
        fields["sandbox_dir"] = Path(fields["sandbox_dir"])
    names = tuple(q.strip() for q in queues.split(",") if q.strip())
    settings = config.WorkerSettings(modules=tuple(modules), queues=names, **fields)
    obj = ctx.ensure_object(dict)
    common = config.load_settings({"url": obj.get("url"), "namespace": obj.get("namespace")})
    raise click.exceptions.Exit(run_worker(common, settings, worker_id))


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def workers(ctx: click.Context, as_json: bool) -> None:
    """Masters seen lately, and the jobs each holds."""
    found = _client(ctx).workers()
    if as_json:
        _emit(found)
        return
    if not found:
        click.echo("no workers seen")
    for name, info in found.items():
        jobs = info["jobs"]
        click.echo(f"{name}  seen {_when(info['seen_ms'])}  {len(jobs)} jobs  {' '.join(jobs)}")


@cli.command()
@click.option("--timeout", type=click.FloatRange(1), default=60.0, show_default=True)
@click.pass_context
def demo(ctx: click.Context, timeout: float) -> None:
    """Put the sample jobs of runtime.demo, run a worker over them, show the outcome."""
    client = _client(ctx)
    jids = demo_jobs.put_samples(client)
    click.echo(f"put {len(jids)} sample jobs on queue {demo_jobs.QUEUE!r}; starting a worker")
    jobs = demo_jobs.run_worker_until_done(client, jids, timeout)
    click.echo(f"\n{'jid':<32}  {'klass':<20} {'state':<9} attempts  outcome")
    for job in jobs:
        outcome = job.failure.message.strip().splitlines()[-1] if job.failure else "-"
        if job.state == "complete":
            outcome = "done"
        name = job.klass.rpartition(":")[2]
        click.echo(f"{job.jid}  {name:<20} {job.state:<9} {job.attempt:>8}  {outcome}")
    click.echo("")
    ctx.invoke(status)
    if any(j.state not in ("complete", "failed") for j in jobs):
        raise click.exceptions.Exit(_fail("the demo did not finish in time"))


def _fail(message: str, code: int = EXIT_FAILED) -> int:
    click.echo(f"runtime: error: {message}", err=True)
    return code


def _exit_code(err: BaseException) -> int:
    if isinstance(err, RedisUnavailable | EmbeddedRedisError):
        return EXIT_UNAVAILABLE
    if isinstance(err, BadArgument | ConfigError):
        return EXIT_USAGE
    return EXIT_FAILED


def run(args: Sequence[str] | None = None, entry: click.Command = cli) -> int:
    """Runs the CLI; returns the exit code. Errors are one line on stderr."""
    try:
        # without standalone mode, click returns an Exit's code instead of raising it
        code = entry.main(args=args, prog_name="runtime", standalone_mode=False)
    except click.exceptions.Exit as done:
        return int(done.exit_code)
    except click.UsageError as err:
        where = f"runtime {err.ctx.command.name}" if err.ctx and err.ctx.command.name else "runtime"
        click.echo(f"{where}: error: {err.format_message()}", err=True)
        return EXIT_USAGE
    except (click.Abort, KeyboardInterrupt):
        return _fail("interrupted", 130)
    except Error as err:
        return _fail(str(err).splitlines()[0] if str(err) else type(err).__name__, _exit_code(err))
    except Exception as err:  # the outermost point of the process: one line, no traceback
        logging.getLogger(__name__).debug("unexpected error", exc_info=True)
        return _fail(f"unexpected {type(err).__name__}: {err} (run with -vv for details)")
    return code if isinstance(code, int) else 0


def main() -> None:
    sys.exit(run())
