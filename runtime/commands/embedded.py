"""The embedded verb: the private redis-server runtime starts when no URL is set
(runtime/queue/embedded.py): see whether it runs, and stop it."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import click

from runtime.commands.common import emit, fail, settings_of
from runtime.errors import Error
from runtime.queue import embedded
from runtime.queue.api.client import Client

STOP_TIMEOUT_S = 30.0
INFO_FIELDS = (
    "redis_version",
    "uptime_in_seconds",
    "used_memory_human",
    "connected_clients",
    "aof_enabled",
)


@click.group("embedded", no_args_is_help=False)
def embedded_group() -> None:
    """The embedded Redis server, used when no URL is set: status, stop."""


def _facts(state_dir: Path) -> dict[str, Any]:
    """What is known of the embedded server of `state_dir`, without starting one."""
    sock = state_dir / embedded.SOCKET_NAME
    pid = embedded.live_server_pid(state_dir)
    answers = embedded.replies(sock)[:1] in (b"+", b"-")
    facts: dict[str, Any] = {
        "state_dir": str(state_dir),
        "socket": str(sock),
        "pid": pid,
        "running": pid is not None or answers,
        "answering": answers,
    }
    if answers:
        try:
            with Client.from_url(f"unix://{sock}", socket_timeout=2.0) as client:
                info = client.admin.server_info()
        except Error as err:
            facts["answering"], facts["error"] = False, str(err)
        else:
            facts.update({name: info.get(name) for name in INFO_FIELDS})
    return facts


@embedded_group.command("status")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def status_cmd(ctx: click.Context, as_json: bool) -> None:
    """Whether the embedded server runs (exit 1 if not), with its pid, socket, version,
    uptime and memory."""
    settings = settings_of(ctx)
    facts = _facts(settings.state_dir)
    facts["in_use"] = settings.url is None or settings.url == f"unix://{facts['socket']}"
    if as_json:
        emit(facts)
    elif not facts["running"]:
        click.echo(f"not running (state directory {facts['state_dir']})")
    else:
        click.echo(f"running: pid {facts['pid'] or '?'}, socket {facts['socket']}")
        if facts["answering"]:
            click.echo(
                f"redis {facts['redis_version']}, up {facts['uptime_in_seconds']} s, "
                f"memory {facts['used_memory_human']}, {facts['connected_clients']} clients, "
                f"aof {facts['aof_enabled']}"
            )
        else:
            click.echo(f"not answering: {facts.get('error', 'stopped or hung?')}")
        if not facts["in_use"]:
            click.echo("(not in use here: a URL is configured)")
    if not facts["running"]:
        raise click.exceptions.Exit(1)


@embedded_group.command("stop")
@click.pass_context
def stop_cmd(ctx: click.Context) -> None:
    """Stop the embedded server (SIGTERM: it writes its append-only file and exits).
    Masters using it lose their Redis until it is started again."""
    settings = settings_of(ctx)
    sock = settings.state_dir / embedded.SOCKET_NAME
    if settings.url is not None and settings.url != f"unix://{sock}":
        why = (
            "a Redis URL is configured (REDIS_URL, --url or the config file): runtime "
            "stops only the embedded server it starts, never that one"
        )
        raise click.exceptions.Exit(fail(why))
    pid = embedded.live_server_pid(settings.state_dir)
    if pid is None:
        if embedded.replies(sock):
            why = (
                f"the server on {sock} is not one runtime started (no live redis-server "
                f"in {settings.state_dir}/redis.pid): not stopping it"
            )
            raise click.exceptions.Exit(fail(why))
        raise click.exceptions.Exit(fail(f"no embedded server runs in {settings.state_dir}"))
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while embedded.live_server_pid(settings.state_dir) == pid:
        if time.monotonic() > deadline:
            raise click.exceptions.Exit(
                fail(f"redis-server pid {pid} did not stop in {STOP_TIMEOUT_S:g} s")
            )
        time.sleep(0.05)
    click.echo(f"stopped the embedded redis-server (pid {pid})")


COMMANDS = [embedded_group]
