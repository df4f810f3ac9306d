"""The metrics verb: runtime's Prometheus metrics served alone, without the dashboard.
It serves whether or not Redis answers: while it does not, a scrape says
runtime_redis_up 0 (as the dashboard's /metrics does), so an exporter started
before Redis, or during an outage, needs no restart."""

from __future__ import annotations

import logging
import signal
import threading

import click

from runtime.commands.common import counts_of
from runtime.errors import Error

log = logging.getLogger(__name__)

POLL_S = 0.5  # how soon a stop request (INT, TERM) ends the server


@click.command("metrics")
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    required=True,
    help="Port to listen on (0: any free one, printed).",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.pass_context
def metrics_cmd(ctx: click.Context, port: int, host: str) -> None:
    """Serve Prometheus metrics at http://HOST:PORT/metrics until Ctrl-C (or TERM)."""
    from runtime import metrics  # noqa: PLC0415 - only this verb needs prometheus_client

    client = counts_of(ctx)  # a sharded site: summed over its namespaces
    try:
        client.conn.now_ms()
    except Error as err:  # served anyway: scrapes say runtime_redis_up 0 until it answers
        reason = str(err).splitlines()[0].rstrip(".") if str(err) else type(err).__name__
        log.warning("%s; serving runtime_redis_up 0 until Redis answers", reason)
    try:
        httpd = metrics.server(client, host, port)
    except OSError as err:
        raise click.exceptions.Exit(_cannot_bind(host, port, err)) from None
    bound_host, bound_port = httpd.server_address[:2]
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):  # the handler only records the intent
        signal.signal(sig, lambda *_: stop.set())
    httpd.timeout = POLL_S
    click.echo(f"serving metrics on http://{bound_host!s}:{bound_port}/metrics", err=True)
    try:
        while not stop.is_set():
            httpd.handle_request()
    finally:
        httpd.server_close()


def _cannot_bind(host: str, port: int, err: OSError) -> int:
    from runtime.commands.common import EXIT_USAGE, fail  # noqa: PLC0415

    return fail(f"cannot listen on {host}:{port}: {err.strerror or err}", EXIT_USAGE)


COMMANDS = [metrics_cmd]
