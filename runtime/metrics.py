"""Prometheus metrics, read from Redis at scrape time (prometheus-client).

`make_registry(client)` gives a registry holding one `RuntimeCollector`, for
mounting next to other collectors. There is one exposition path: `runtime
metrics` (`server`) and the dashboard's /metrics both serve such a registry
through prometheus-client's own writer (`exposition`). A scrape is one script
call (lua/metrics.lua) however many queues there are. (A hand-written text
writer once served `runtime metrics`; at a large deployment, 200 queues, 50
workers and 30 failure groups, the registry path scrapes well under 100 ms
(bench.operate --deployment), so it went: bench/RESULTS.md has the figures.)

Metrics (no jid in any label):

    runtime_jobs{queue,state}                    gauge: jobs by state (complete: still
                                                 kept by retention)
    runtime_queue_paused{queue}                  gauge: 1 while paused
    runtime_queue_oldest_waiting_seconds{queue}  gauge: age of the oldest waiting job
    runtime_failed_jobs{group}                   gauge: failed jobs by failure group
    runtime_workers                              gauge: masters seen within up_s
    runtime_worker_running_jobs{worker}          gauge: jobs each of them holds
    runtime_jobs_completed_total{queue}          counter: completions (kept in Redis,
    runtime_jobs_failed_total{queue}             counter: final failures   summed over
    runtime_jobs_retried_total{queue}            counter: retries          all masters)
    runtime_job_wait_seconds{queue}              histogram: put (or due) to popped
    runtime_job_run_seconds{queue}               histogram: popped to completed
    runtime_redis_up                             gauge: 1 if Redis answered the scrape

The histograms cover the current UTC day (lua/lib/stats.lua keeps statistics per
day): they start again at midnight UTC, which Prometheus reads as a counter reset;
a queue that saw no job today has none. Their buckets (1, 5, 10, 50, 100, 500 ms,
1, 5, 10, 60, 600, 3600 s) are bounds of the stored buckets, so each is exact.
"""

from __future__ import annotations

import functools
import gc
import logging
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector, CollectorRegistry

from runtime.errors import Error
from runtime.queue import stats
from runtime.queue.client import Client
from runtime.queue.site import Site
from runtime.vocabulary import Count

log = logging.getLogger(__name__)

UP_S = 60.0  # a master seen within this many seconds counts as up
STATES = tuple(Count)
TOTALS = (
    ("completed", "completions reported"),
    ("failed", "jobs failed for good"),
    ("retried", "retries scheduled"),
)
BUCKETS_S = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 60, 600, 3600)  # each a stored bound
LE = (*(repr(float(b)) for b in BUCKETS_S), "+Inf")
TIMES = (
    ("wait", "seconds from put (or due time) to popped, today (UTC)"),
    ("run", "seconds from popped to completed, today (UTC)"),
)
EMPTY: dict[str, Any] = {"queues": {}, "groups": {}, "workers": {}}

Kind = Literal["gauge", "counter", "histogram"]
Buckets = list[tuple[str, float]]  # (le, cumulative count)


@dataclass
class Family:
    """One metric: gauge and counter series are (label values, value); histogram
    series are (label values, (buckets, sum))."""

    name: str
    kind: Kind
    help: str
    labels: tuple[str, ...] = ()
    series: list[tuple[tuple[str, ...], Any]] = field(default_factory=list)


@functools.cache
def _slot(label: str) -> int | None:
    """Which Prometheus bucket a stored bucket (its field label, e.g. "ms250") falls
    in: the first whose bound is at or above the stored bucket's end; None for a
    label that is not a bucket."""
    lower_s = stats.bucket_of(label)
    if lower_s is None:
        return None
    end_s = lower_s + stats.bucket_width_s(lower_s)
    return next((i for i, le in enumerate(BUCKETS_S) if end_s <= le + 1e-9), len(BUCKETS_S))


def cumulative_fields(what: str, fields: Mapping[str, Any]) -> Buckets:
    """Prometheus buckets (le, cumulative count) from a stats hash's `what:hist:*` fields."""
    return _cumulative(_hist_counts(fields).get(what, [0] * len(LE)))


def _hist_counts(fields: Mapping[str, Any]) -> dict[str, list[int]]:
    """Counts per Prometheus bucket of each histogram (wait, run) in a stats hash, in
    one pass over its fields."""
    out: dict[str, list[int]] = {}
    for name, value in fields.items():
        what, _, label = name.partition(":hist:")
        slot = _slot(label) if label else None
        if slot is not None:
            counts = out.get(what) or out.setdefault(what, [0] * len(LE))
            counts[slot] += int(value)
    return out


def _cumulative(counts: list[int]) -> Buckets:
    out, seen = [], 0
    for le, n in zip(LE, counts, strict=True):
        seen += n
        out.append((le, float(seen)))
    return out


def families(snapshot: Mapping[str, Any], up_s: float = UP_S) -> list[Family]:
    """Every metric of a snapshot (Client.snapshot), in exposition order."""
    queues: list[tuple[str, Mapping[str, Any]]] = sorted(snapshot["queues"].items())
    out = _queue_gauges(queues)
    for name, what_counts in TOTALS:
        series: list[tuple[tuple[str, ...], Any]] = [((q,), c[f"{name}_total"]) for q, c in queues]
        help_ = f"{what_counts}, per queue (all masters)"
        out.append(Family(f"runtime_jobs_{name}", "counter", help_, ("queue",), series))
    hists = {q: _hist_counts(c.get("stats", {})) for q, c in queues}  # one pass per queue
    for what, help_ in TIMES:
        out.append(
            Family(
                f"runtime_job_{what}_seconds",
                "histogram",
                help_,
                ("queue",),
                list(_histograms(what, queues, hists)),
            )
        )
    groups = sorted(snapshot["groups"].items())
    out.append(
        Family(
            "runtime_failed_jobs",
            "gauge",
            "failed jobs by group",
            ("group",),
            [((g,), n) for g, n in groups],
        )
    )
    workers = sorted(snapshot["workers"].items())
    out.append(
        Family(
            "runtime_workers", "gauge", f"masters seen within {up_s:g} s", (), [((), len(workers))]
        )
    )
    out.append(
        Family(
            "runtime_worker_running_jobs",
            "gauge",
            "jobs each master holds",
            ("worker",),
            [((w,), info["running"]) for w, info in workers],
        )
    )
    return out


def _queue_gauges(queues: list[tuple[str, Mapping[str, Any]]]) -> list[Family]:
    jobs = Family("runtime_jobs", "gauge", "jobs by queue and state", ("queue", "state"))
    jobs.series = [((q, state), c[state]) for q, c in queues for state in STATES]
    paused = Family(
        "runtime_queue_paused",
        "gauge",
        "1 while the queue is paused",
        ("queue",),
        [((q,), 1 if c["paused"] else 0) for q, c in queues],
    )
    oldest = Family(
        "runtime_queue_oldest_waiting_seconds",
        "gauge",
        "how long the oldest waiting job has waited",
        ("queue",),
        [((q,), c["oldest_waiting_ms"] / 1000) for q, c in queues],
    )
    return [jobs, paused, oldest]


def _histograms(
    what: str, queues: list[tuple[str, Mapping[str, Any]]], hists: Mapping[str, Any]
) -> Iterator[tuple[tuple[str, ...], tuple[Buckets, float]]]:
    """Only queues that saw jobs today have a series (a day starts empty at midnight UTC)."""
    for queue, c in queues:
        fields: Mapping[str, Any] = c.get("stats", {})
        count = int(fields.get(f"{what}:n", 0))
        if count:
            total_s = count * float(fields.get(f"{what}:mean", 0))
            counts = hists[queue].get(what, [0] * len(LE))
            yield (queue,), (_cumulative(counts), total_s)


# --- the registry path -----------------------------------------------------------------


def _metric(family: Family) -> Metric:
    if family.kind == "histogram":
        histogram = HistogramMetricFamily(family.name, family.help, labels=family.labels)
        for values, (buckets, total_s) in family.series:
            histogram.add_metric(values, buckets, total_s)
        return histogram
    metric: GaugeMetricFamily | CounterMetricFamily
    if family.kind == "counter":
        metric = CounterMetricFamily(family.name, family.help, labels=family.labels)
    else:
        metric = GaugeMetricFamily(family.name, family.help, labels=family.labels)
    for values, value in family.series:
        metric.add_metric(values, value)
    return metric


class Source(Protocol):
    """Where a scrape reads its snapshot: a client's operating part (`client.admin`)."""

    def snapshot(self, up_s: float) -> dict[str, Any]: ...


class RuntimeCollector(Collector):
    """Reads one snapshot of the deployment per scrape (`client.admin.snapshot`)."""

    def __init__(self, source: Source, up_s: float = UP_S) -> None:
        self.source = source
        self.up_s = up_s

    def describe(self) -> Iterator[Metric]:
        """The metric names, without reading Redis (for registries that check clashes)."""
        yield from (_metric(f) for f in families(EMPTY, self.up_s))

    def collect(self) -> Iterator[Metric]:
        found = read(self.source, self.up_s)
        yield from (_metric(f) for f in found)


def read(source: Source, up_s: float = UP_S) -> list[Family]:
    """The families of one scrape; runtime_redis_up 0 alone when Redis did not answer."""
    up = Family("runtime_redis_up", "gauge", "1 if Redis answered the scrape", ())
    try:
        snapshot = source.snapshot(up_s)
    except Error as err:
        log.warning("metrics: Redis did not answer the scrape: %s", err)
        up.series = [((), 0)]
        return [up]
    up.series = [((), 1)]
    return [up, *families(snapshot, up_s)]


def make_registry(client: Client | Site, up_s: float = UP_S) -> CollectorRegistry:
    """A registry with runtime's collector alone (mount it with your own collectors);
    of a Site: its namespaces' numbers summed (SiteAdmin.snapshot)."""
    registry = CollectorRegistry()
    registry.register(RuntimeCollector(client.admin, up_s))
    return registry


# --- exposition: one path for runtime metrics and the dashboard ---------------------------


def exposition(registry: CollectorRegistry) -> bytes:
    """The text of one scrape of `registry` (prometheus-client's writer, served as
    CONTENT_TYPE_LATEST). The garbage collector is paused meanwhile: a scrape of
    a large deployment makes tens of thousands of short-lived objects."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        return generate_latest(registry)
    finally:
        if collecting:
            gc.enable()


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        log.debug("metrics: " + format, *args)


def server(client: Client | Site, host: str, port: int, up_s: float = UP_S) -> WSGIServer:
    """An HTTP server answering GET /metrics with `make_registry(client)` (404 for
    any other path)."""
    registry = make_registry(client, up_s)

    def app(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        if environ.get("PATH_INFO") != "/metrics":
            start_response("404 Not Found", [("Content-Type", "text/plain")])
            return [b"not found: metrics are at /metrics\n"]
        body = exposition(registry)
        start_response(
            "200 OK", [("Content-Type", CONTENT_TYPE_LATEST), ("Content-Length", str(len(body)))]
        )
        return [body]

    return make_server(host, port, app, handler_class=_QuietHandler)
