"""The dashboard's application factory: routes, the guard, the templates, the rates
sampler and /metrics, for one Client.

    app = create_app(Client(), Options(url_prefix="/runtime"))

Pages are GETs (views.py), actions are POSTs under action/ (actions.py), both
behind the guard (security.py). /metrics serves runtime.metrics.scrape, or the
registry given.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from runtime.dashboard import actions, live, reads, render, views
from runtime.dashboard.security import Credentials, Guard
from runtime.errors import BadArgument, Error, NoSuchJob, RedisUnavailable
from runtime.metrics import exposition, scrape
from runtime.queue.api.client import Client

log = logging.getLogger(__name__)

SAMPLE_INTERVAL_S = 2.0


@dataclass(frozen=True)
class Options:
    url_prefix: str = ""  # "" or "/path" (no trailing slash)
    credentials: Credentials | None = None
    loopback_only: bool = True  # refuse Host names that are not loopback ones
    allowed_hosts: tuple[str, ...] = ()  # ... except these
    sample_interval_s: float = SAMPLE_INTERVAL_S


def normal_prefix(prefix: str | None) -> str:
    """ "x/", "/x/" -> "/x"; "", "/" -> "". BadArgument for blanks or a query."""
    text = (prefix or "").strip().strip("/")
    if not text:
        return ""
    if any(c.isspace() or c in "?#%\\" for c in text):
        raise BadArgument(f"url prefix must be a plain path like /runtime, got {prefix!r}")
    return "/" + text


def routes() -> list[BaseRoute]:
    pages = [
        ("/", views.overview),
        ("/queues", views.queues),
        ("/queue", views.queue),
        ("/job", views.job),
        ("/batch", views.batch),
        ("/find", views.find),
        ("/failures", views.failures),
        ("/workers", views.workers),
        ("/domains", views.domains),
        ("/recurring", views.recurring),
        ("/stats", views.stats),
        ("/live.json", views.live_json),
        ("/metrics", views.metrics),
        ("/favicon.ico", views.favicon),
    ]
    return [
        *(Route(path, endpoint, methods=["GET", "HEAD"]) for path, endpoint in pages),
        Route("/action/{name}", actions.act, methods=["POST"]),
        Mount("/static", StaticFiles(directory=render.HERE / "static"), name="static"),
    ]


def create_app(
    client: Client, options: Options | None = None, registry: Any = ..., site: Client | None = None
) -> Starlette:
    """The ASGI app. `registry`: a Prometheus registry to serve at /metrics (default:
    runtime's metrics, as `runtime metrics` serves them: runtime.metrics.scrape,
    the text of runtime.metrics.make_registry(client); None: /metrics answers
    503). A sharded site's client (`Client` with shards: runtime.queue.api.client.Site)
    serves the whole site: every page and /metrics cover all its namespaces
    (the queue, job and action pages go to the namespace of their queue or
    job). `site`: the same, from before a site's client was a Client."""
    client = site or client
    options = options or Options()
    prefix = normal_prefix(options.url_prefix)
    rates = live.Rates(options.sample_interval_s)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with live.sampling(rates, lambda: reads.totals(client)):
            yield

    mounted = [Mount(prefix, routes=routes())] if prefix else routes()
    app = Starlette(
        routes=mounted,
        middleware=[
            Middleware(
                Guard,
                credentials=options.credentials,
                loopback_only=options.loopback_only,
                allowed_hosts=options.allowed_hosts,
            )
        ],
        exception_handlers={Error: error_page},
        lifespan=lifespan,
    )
    app.state.client = client
    app.state.prefix = prefix
    app.state.rates = rates
    app.state.templates = render.environment()
    # runtime's metrics written directly (runtime.metrics.scrape, the registry's text
    # line for line); a registry given is written by prometheus-client
    served: Any = None
    if registry is ...:
        served = functools.partial(scrape, client.admin)
    elif registry is not None:
        served = functools.partial(exposition, registry)
    app.state.metrics = None if served is None else (served, CONTENT_TYPE_LATEST)
    return app


def status_of(err: Exception) -> int:
    if isinstance(err, BadArgument):
        return 400
    if isinstance(err, NoSuchJob):
        return 404
    if isinstance(err, RedisUnavailable):
        return 503
    return 500


async def error_page(request: Request, err: Exception) -> Response:
    """An Error from a read: the page says what went wrong, in one line."""
    message = actions.one_line(err) if isinstance(err, Error) else type(err).__name__
    log.info("dashboard page %s: %s", request.url.path, message)
    return render.page(request, "error.html", status_of(err), message=message, now_ms=None)
