"""The pages (every one a GET that changes nothing) and the live numbers they poll.

Endpoints are plain functions: Starlette runs them in its thread pool, where the
synchronous `Client` is at home. Each reads through reads.py / jobreads.py and
renders one template.
"""

from __future__ import annotations

import time
from datetime import date, timedelta
from typing import Any

from starlette.requests import Request
from starlette.responses import (
    FileResponse,
    JSONResponse,
    PlainTextResponse,
    RedirectResponse,
    Response,
)

from runtime.dashboard import jobreads, live, offers, plots, reads
from runtime.dashboard.render import HERE, page, query
from runtime.errors import BadArgument
from runtime.queue.api.client import Client
from runtime.queue.job import Job
from runtime.queue.stats import today
from runtime.vocabulary import Count, JobState

OVERVIEW_QUEUES = 20  # the overview lists the largest queues; the queues page lists all
ORDERS = ("newest", "oldest")
QUEUES_PAGE = 100  # queues on one page of the queues page
LIVE_QUEUES_MAX = QUEUES_PAGE  # queues one poll of live.json may name


def _client(request: Request) -> Client:
    client: Client = request.app.state.client
    return client


def _counts(request: Request) -> Client:
    """Where the numbers come from: the app's client (a sharded site's sums its
    namespaces')."""
    return _client(request)


def _page_number(request: Request) -> int:
    raw = request.query_params.get("page", "1")
    return max(1, int(raw)) if raw.isdigit() else 1


def _pages(total: int | None, number: int) -> dict[str, Any]:
    size = jobreads.PAGE_SIZE
    last = None if total is None else max(1, -(-total // size))
    return {"number": number, "last": last, "size": size, "start": (number - 1) * size}


def overview(request: Request) -> Response:
    client, counts = _client(request), _counts(request)
    now_ms = client.conn.now_ms()
    rows = reads.queue_rows(counts)
    largest = sorted(rows, key=lambda r: (-r.size, r.name))[:OVERVIEW_QUEUES]
    workers = reads.worker_rows(counts, now_ms)
    rates: live.Rates = request.app.state.rates
    return page(
        request,
        "overview.html",
        now_ms=now_ms,
        queues=largest,
        queue_count=len(rows),
        workers_up=sum(w.up for w in workers),
        running=sum(len(w.jobs) for w in workers),
        plot=live.throughput_plot(counts.admin.throughput(live.PLOT_MINUTES)),
        failed_total=sum(counts.failed().values()),
        live=live.rate_values(rates),
        live_query=query(queue=[r.name for r in largest], plot=1),
    )


def queues(request: Request) -> Response:
    """The queues by name, QUEUES_PAGE at a time, those whose name holds `filter`."""
    client, counts = _client(request), _counts(request)
    now_ms = client.conn.now_ms()
    text = request.query_params.get("filter", "").strip()
    names = sorted(n for n in counts.queues() if text.lower() in n.lower())
    number = _page_number(request)
    shown = names[(number - 1) * QUEUES_PAGE : number * QUEUES_PAGE]
    rows = reads.queue_rows(counts, shown) if shown else []
    pages = {"number": number, "last": max(1, -(-len(names) // QUEUES_PAGE))}
    return page(
        request,
        "queues.html",
        now_ms=now_ms,
        queues=rows,
        total=len(names),
        filter=text,
        pages=pages,
        states=reads.QUEUE_STATES,
        listed_as=offers.LISTED_AS,
        live_query=query(queue=shown),
    )


def queue(request: Request) -> Response:
    name = request.query_params.get("name", "")
    client = reads.of_queue(request.app.state, name)
    state = request.query_params.get("state", JobState.WAITING)
    order = request.query_params.get("order", "newest")
    if state not in reads.LISTED_STATES or order not in ORDERS:
        raise BadArgument(
            f"state must be one of {', '.join(reads.LISTED_STATES)}; order newest or oldest"
        )
    now_ms = client.conn.now_ms()
    row = reads.queue_rows(client, [name])[0]
    number = _page_number(request)
    size = jobreads.PAGE_SIZE
    found = jobreads.queue_jobs(client, name, state, (number - 1) * size, size, order == "newest")
    return page(
        request,
        "queue.html",
        now_ms=now_ms,
        queue=row,
        state=state,
        order=order,
        states=reads.LISTED_STATES,
        stalled_with=offers.LISTED_AS[Count.STALLED],
        listing=offers.listing(JobState(state)),
        found=found,
        pages=_pages(found.total, number),
        live_query=query(queue=name),
    )


def job(request: Request) -> Response:
    jid = request.query_params.get("jid", "")
    client = reads.of_job(request.app.state, jid) if jid else _client(request)
    view = jobreads.job_view(client, jid) if jid else None
    now_ms = client.conn.now_ms()
    if view is None:
        return page(request, "missing.html", what="job", name=jid, now_ms=now_ms)
    return page(
        request,
        "job.html",
        now_ms=now_ms,
        view=view,
        job=view.job,
        actions=offers.job_actions(view.job.state),
        runs=offers.runs(view.job.state),
        tombstone=offers.tombstone(view.job.state),
        cancel_event=offers.CANCEL_EVENT,
        progress=live.progress_text(view.job.progress),
        live_text=(
            client.admin.live_tail(jid)[-live.LIVE_CHARS :]
            if view.job.state == JobState.RUNNING
            else None
        ),
        started_ms=reads.started_ms(view.job),
        live_query=query(jid=jid),
    )


def batch(request: Request) -> Response:
    """A batch: its progress, callbacks and failed jobs (with retry-all)."""
    client = _client(request)
    bid = request.query_params.get("bid", "")
    found = client.get_batch(bid) if bid else None
    now_ms = client.conn.now_ms()
    if found is None:
        return page(request, "missing.html", what="batch", name=bid, now_ms=now_ms)
    failed = [j for j in client.get_jobs(list(found.failed_jids)) if j is not None]
    look = JobState.RUNNING if found.open else JobState.COMPLETE  # its badge: open, settled
    return page(request, "batch.html", now_ms=now_ms, batch=found, failed=failed, look=look)


def _live_text(client: Client, job: Job | None) -> str | None:
    """The end of what a running job printed lately (None for a job not running)."""
    if job is None or job.state != JobState.RUNNING:
        return None
    return client.admin.live_tail(job.jid)[-live.LIVE_CHARS :]


def find(request: Request) -> Response:
    """A jid opens its job; anything else lists the jobs tagged with it."""
    client = _client(request)
    text = request.query_params.get("q", "").strip()
    prefix = request.app.state.prefix
    if text and reads.of_job(request.app.state, text).get_job(text) is not None:
        return RedirectResponse(f"{prefix}/job{query(jid=text)}", status_code=303)
    if text and client.get_batch(text) is not None:
        return RedirectResponse(f"{prefix}/batch{query(bid=text)}", status_code=303)
    number = _page_number(request)
    found = (
        jobreads.tagged(client, text, (number - 1) * jobreads.PAGE_SIZE, jobreads.PAGE_SIZE)
        if text
        else jobreads.Page(0, ())
    )
    queue_names = set(client.queues())
    return page(
        request,
        "find.html",
        now_ms=client.conn.now_ms(),
        text=text,
        found=found,
        pages=_pages(found.total, number),
        is_queue=text in queue_names,
    )


def failures(request: Request) -> Response:
    client = _client(request)
    now_ms = client.conn.now_ms()
    group = request.query_params.get("group")
    if group is None:
        return page(request, "failures.html", now_ms=now_ms, groups=jobreads.failure_groups(client))
    number = _page_number(request)
    found = jobreads.failed_jobs(
        client, group, (number - 1) * jobreads.PAGE_SIZE, jobreads.PAGE_SIZE
    )
    return page(
        request,
        "group.html",
        now_ms=now_ms,
        group=group,
        found=found,
        pages=_pages(found.total, number),
    )


def workers(request: Request) -> Response:
    now_ms = _client(request).conn.now_ms()
    rows = reads.worker_rows(_counts(request), now_ms)
    return page(request, "workers.html", now_ms=now_ms, workers=rows)


def domains(request: Request) -> Response:
    client = _client(request)
    return page(
        request,
        "domains.html",
        now_ms=client.conn.now_ms(),
        domains=jobreads.domain_rows(client),
        default=jobreads.default_limit(client),
    )


def recurring(request: Request) -> Response:
    client = _client(request)
    return page(
        request,
        "recurring.html",
        now_ms=client.conn.now_ms(),
        recurrences=client.scheduling.recurrences(),
    )


def stats(request: Request) -> Response:
    name = request.query_params.get("queue", "")
    client = reads.of_queue(request.app.state, name)
    raw_day = request.query_params.get("day")
    try:
        day = date.fromisoformat(raw_day) if raw_day else today()
    except ValueError:
        raise BadArgument(f"day must be YYYY-MM-DD, got {raw_day!r}") from None
    found, wait, run = jobreads.queue_stats(client, name, day)
    plot = {
        what: plots.bar_chart(
            [(plots.seconds_label(lo), n) for lo, n in view.histogram],
            f"{what} times of {name} on {day.isoformat()}",
        )
        for what, view in (("wait", wait), ("run", run))
    }
    days = [today() - timedelta(days=i) for i in range(7)]
    return page(
        request,
        "stats.html",
        now_ms=client.conn.now_ms(),
        queue=name,
        day=day,
        days=days,
        stats=found,
        wait=wait,
        run=run,
        plot=plot,
    )


def live_json(request: Request) -> Response:
    """The numbers a page shows, by key (see live.py)."""
    start = time.monotonic()
    counts = _counts(request)
    rates: live.Rates = request.app.state.rates
    values = live.rate_values(rates)
    html: dict[str, str] = {}
    params = request.query_params
    names = params.getlist("queue")[:LIVE_QUEUES_MAX]
    if names:
        values.update(live.queue_values(reads.queue_rows(counts, names)))
    if params.get("jid"):
        jid = params["jid"]
        of_job = reads.of_job(request.app.state, jid)
        found = of_job.get_job(jid)
        live_text = (
            of_job.admin.live_tail(jid) if found and found.state == JobState.RUNNING else None
        )
        values.update(live.job_values(found, live_text))
    if params.get("plot"):
        html["plot.throughput"] = str(
            live.throughput_plot(counts.admin.throughput(live.PLOT_MINUTES))
        )
    next_ms = round(1000 * live.pause_s(live.POLL_S, time.monotonic() - start))
    answer = {"values": values, "html": html, "next_ms": next_ms}
    return JSONResponse(answer, headers={"cache-control": "no-store"})


def metrics(request: Request) -> Response:
    """Prometheus' text format (runtime.metrics); 503 when the app was made without."""
    if request.app.state.metrics is None:
        return PlainTextResponse("metrics are not served here\n", status_code=503)
    exposition, content_type = request.app.state.metrics
    return Response(exposition(), media_type=content_type)


def favicon(request: Request) -> Response:
    """The tab's icon (static/favicon.ico), where browsers look for it by default."""
    return FileResponse(
        HERE / "static" / "favicon.ico",
        media_type="image/vnd.microsoft.icon",
        headers={"cache-control": "max-age=86400"},
    )
