"""The `dashboard` verb: serves the web dashboard and /metrics (runtime/dashboard/)."""

from __future__ import annotations

import contextlib
import logging
import socket
from collections.abc import Sequence

import click

from runtime.commands.common import client_of, stop_on_signals
from runtime.errors import BadArgument, ConfigError, Error

log = logging.getLogger(__name__)

DEFAULT_HOST, DEFAULT_PORT = "127.0.0.1", 8008
AUTH_ENV = "RUNTIME_DASHBOARD_AUTH"


def listen(host: str, port: int) -> socket.socket:
    """A listening TCP socket on host:port (port 0: any free port); BadArgument if the
    address cannot be had."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(family, kind, proto)
    except (OSError, UnicodeError) as err:
        raise BadArgument(f"cannot listen on {host}:{port}: {err}") from None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
    except OSError as err:
        sock.close()
        raise BadArgument(f"cannot listen on {host}:{port}: {err.strerror or err}") from None
    return sock


def url_of(sock: socket.socket, prefix: str) -> str:
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}{prefix}/"


@click.command()
@click.option("--host", default=DEFAULT_HOST, show_default=True, help="Address to listen on.")
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=DEFAULT_PORT,
    show_default=True,
    help="Port to listen on (0: any free port).",
)
@click.option(
    "--url-prefix",
    default="",
    metavar="PATH",
    help="Serve under this path, e.g. /runtime behind a reverse proxy.",
)
@click.option(
    "--basic-auth",
    envvar=AUTH_ENV,
    metavar="USER:PASSWORD",
    help=f"Ask for these credentials (default: {AUTH_ENV}; none).",
)
@click.option(
    "--allow-host",
    "allowed",
    multiple=True,
    metavar="NAME",
    help="On a loopback address, answer to this Host name too (a reverse proxy's).",
)
@click.pass_context
def dashboard(
    ctx: click.Context,
    host: str,
    port: int,
    url_prefix: str,
    basic_auth: str | None,
    allowed: Sequence[str],
) -> None:
    """Serve the web dashboard and /metrics (127.0.0.1:8008 by default). It starts
    while Redis is down: pages say so (503) and /metrics runtime_redis_up 0
    until Redis answers."""
    try:
        import uvicorn  # noqa: PLC0415 - the dashboard extra is optional

        from runtime.dashboard import Options, create_app  # noqa: PLC0415
        from runtime.dashboard.app import normal_prefix  # noqa: PLC0415
        from runtime.dashboard.security import Credentials, is_loopback  # noqa: PLC0415
    except ImportError as err:
        raise ConfigError(
            f"the dashboard needs the dashboard extra (missing {err.name}): "
            "pip install 'runtime-worker[dashboard]'"
        ) from None
    try:
        credentials = Credentials.parse(basic_auth) if basic_auth else None
    except ValueError as err:
        raise BadArgument(str(err)) from None
    prefix = normal_prefix(url_prefix)
    client = client_of(ctx)
    try:
        client.conn.now_ms()
    except Error as err:  # served anyway: each page says Redis is out of reach (503)
        reason = str(err).splitlines()[0].rstrip(".") if str(err) else type(err).__name__
        log.warning("%s; serving pages that say so until Redis answers", reason)
    loopback = is_loopback(host)
    options = Options(
        url_prefix=prefix,
        credentials=credentials,
        loopback_only=loopback,
        allowed_hosts=tuple(allowed),
    )
    sock = listen(host, port)
    if not loopback and credentials is None:
        log.warning(
            "the dashboard listens on %s without --basic-auth: anyone who reaches it "
            "can retry, cancel and delete jobs",
            host,
        )
    click.echo(
        f"runtime dashboard: {url_of(sock, prefix)}  (metrics: {url_of(sock, prefix)}metrics)"
    )
    config = uvicorn.Config(
        create_app(client, options),
        log_config=None,
        access_log=False,
        lifespan="on",
    )
    # uvicorn stops serving on SIGINT or TERM, then raises the signal again with the
    # handler it found: ours, so either ends here (not killed by TERM, whatever the
    # inherited disposition of SIGINT)
    stop_on_signals()
    with contextlib.suppress(KeyboardInterrupt):
        uvicorn.Server(config).run(sockets=[sock])
    click.echo("runtime dashboard: stopped")


COMMANDS = [dashboard]
