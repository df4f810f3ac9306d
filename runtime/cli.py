"""The `runtime` command: the verb group, and the exit codes every verb shares.

Exit codes: 0 done; 1 the operation failed (no such job, lease lost, ...);
2 bad arguments or configuration; 3 Redis unreachable, refusing us, or not Redis.
Every error is one line on stderr, never a traceback. The verbs live in
runtime/commands/.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence

import click

from runtime import config
from runtime.commands import (
    batches,
    dashboard,
    domains,
    failures,
    jobs,
    logs,
    queues,
    recurring,
    workers,
)
from runtime.commands import embedded as embedded_verbs
from runtime.commands import metrics as metrics_verbs
from runtime.commands.common import EXIT_FAILED, EXIT_UNAVAILABLE, EXIT_USAGE, fail
from runtime.errors import BadArgument, ConfigError, EmbeddedRedisError, Error, RedisUnavailable


@click.group(name="runtime", context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(
    config.version(), "-V", "--version", prog_name="runtime", message="%(prog)s %(version)s"
)
@click.option("--url", envvar="REDIS_URL", help="Redis URL (default: the embedded server).")
@click.option("--namespace", envvar="RUNTIME_NAMESPACE", help="Key namespace (default: runtime).")
@click.option(
    "-v",
    "--verbose",
    count=True,
    help="Log more: -v info, -vv debug (default: the log_level setting, RUNTIME_LOG_LEVEL; "
    "else warnings, and info for a worker).",
)
@click.pass_context
def cli(ctx: click.Context, url: str | None, namespace: str | None, verbose: int) -> None:
    """runtime: jobs on Redis, run by forking masters."""
    level = log_level_of(verbose, config.load_settings().log_level)
    logging.basicConfig(
        level=level or config.COMMAND_LOG_LEVEL,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    ctx.ensure_object(dict).update(url=url, namespace=namespace, log_level=level)


def log_level_of(verbose: int, setting: str | None) -> str | None:
    """The level asked for: -v (info) or -vv (debug) over the setting; None if neither."""
    if verbose:
        return "DEBUG" if verbose > 1 else "INFO"
    return setting


for module in (jobs, batches, logs, queues, domains, failures, recurring, workers, dashboard):
    for command in module.COMMANDS:
        cli.add_command(command)
for command in (*embedded_verbs.COMMANDS, *metrics_verbs.COMMANDS):
    cli.add_command(command)


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
        where = err.ctx.command_path if err.ctx else "runtime"  # "runtime", "runtime recur add"
        click.echo(f"{where}: error: {err.format_message()}", err=True)
        return EXIT_USAGE
    except (click.Abort, KeyboardInterrupt):
        return fail("interrupted", 130)
    except Error as err:
        return fail(str(err).splitlines()[0] if str(err) else type(err).__name__, _exit_code(err))
    except Exception as err:  # the outermost point of the process: one line, no traceback
        logging.getLogger(__name__).debug("unexpected error", exc_info=True)
        return fail(f"unexpected {type(err).__name__}: {err} (run with -vv for details)")
    return code if isinstance(code, int) else 0


def main() -> None:
    sys.exit(run())
