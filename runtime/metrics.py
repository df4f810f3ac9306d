"""Prometheus metrics, read from Redis at scrape time (prometheus-client).

`make_registry(client)` gives a registry holding one `RuntimeCollector`, for
mounting next to other collectors; `exposition(registry)` writes such a registry
through prometheus-client's own writer. `runtime metrics` (`server`) and the
dashboard's /metrics serve `scrape(client.admin)`: the same families written
directly (`text`); the tests hold it to prometheus-client's text for the registry,
parsed (family by family, sample by sample) and line for line. A scrape is one
script call (lua/metrics.lua) however many queues there are. (prometheus-client's
writer spends about 40 Python calls on each sample: at 1,000 queues, 40,000
samples, it took 1.7 million calls and over 200 ms a scrape, against a target of
100 ms; `python -m bench.operate` measures both paths.)

Metrics (no jid in any label):

    runtime_jobs{queue,state}                    gauge: jobs by state (complete, cancelled:
                                                 still kept by retention)
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
    runtime_batches_open                         gauge: batches not settled yet (jobs
                                                 pending, or not closed)
    runtime_batch_oldest_open_seconds            gauge: age of the oldest open batch
                                                 (0 when none is open)
    runtime_job_cpu_seconds{queue,klass}         histogram: CPU of each attempt (user +
                                                 system, with its waited-for subprocesses)
    runtime_job_max_rss_bytes{queue,klass}       histogram: each attempt's peak RSS
    runtime_redis_up                             gauge: 1 if Redis answered the scrape

The histograms cover the current UTC day (lua/lib/stats.lua keeps statistics per
day): they start again at midnight UTC, which Prometheus reads as a counter reset;
a queue that saw no job today has none. Their buckets (1, 5, 10, 50, 100, 500 ms,
1, 5, 10, 60, 600, 3600 s) are bounds of the stored buckets, so each is exact; so
are the usage histograms' (CPU as the times, RSS 32 MiB to 16 GiB by doubling:
runtime/queue/usage.py).
"""

from __future__ import annotations

import contextlib
import functools
import gc
import itertools
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping
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
from prometheus_client.utils import floatToGoString

from runtime.errors import Error
from runtime.queue import stats, usage
from runtime.queue.api.client import Client
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
CPU_HELP = "CPU seconds of each attempt (user + system, its subprocesses too), today (UTC)"
RSS_HELP = "peak resident memory of each attempt's child, today (UTC)"
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
    return list(zip(LE, map(float, itertools.accumulate(counts)), strict=True))


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
    cpu, rss = usage.histograms([(q, c.get("stats", {})) for q, c in queues])
    out.append(Family("runtime_job_cpu_seconds", "histogram", CPU_HELP, ("queue", "klass"), cpu))
    out.append(Family("runtime_job_max_rss_bytes", "histogram", RSS_HELP, ("queue", "klass"), rss))
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
    out.extend(_batch_gauges(snapshot))
    return out + _domain_gauges(sorted(snapshot.get("domains", {}).items()))


def _domain_gauges(domains: list[tuple[str, Mapping[str, Any]]]) -> list[Family]:
    slots = Family(
        "runtime_domain_slots_in_use",
        "gauge",
        "jobs of the domain holding a lease (all queues and masters)",
        ("domain",),
        [((d,), info["slots"]) for d, info in domains],
    )
    caps = Family(
        "runtime_domain_concurrency_limit",
        "gauge",
        "the domain's cap on jobs holding a lease at once",
        ("domain",),
        [((d,), info["concurrency"]) for d, info in domains if info["concurrency"] is not None],
    )
    return [slots, caps]


def _batch_gauges(snapshot: Mapping[str, Any]) -> list[Family]:
    """Open batches (runtime.queue.api.batches): how many, and how old the oldest is."""
    batches = snapshot.get("batches") or {}
    oldest_ms = batches.get("oldest_ms")
    now_ms = int(snapshot.get("now_ms") or 0)
    age_s = max(0.0, (now_ms - oldest_ms) / 1000) if oldest_ms is not None and now_ms else 0.0
    return [
        Family("runtime_batches_open", "gauge", "batches not settled yet", (),
               [((), int(batches.get("open") or 0))]),
        Family("runtime_batch_oldest_open_seconds", "gauge", "age of the oldest open batch",
               (), [((), age_s)]),
    ]  # fmt: skip


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
        counts = hists[queue].get(what, [0] * len(LE))
        count, mean_s, _ = stats.moments(what, fields, sum(counts))
        if count:
            yield (queue,), (_cumulative(counts), count * mean_s)


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


def make_registry(client: Client, up_s: float = UP_S) -> CollectorRegistry:
    """A registry with runtime's collector alone (mount it with your own collectors);
    of a Site: its namespaces' numbers summed (SiteAdmin.snapshot)."""
    registry = CollectorRegistry()
    registry.register(RuntimeCollector(client.admin, up_s))
    return registry


# --- exposition -----------------------------------------------------------------------


def exposition(registry: CollectorRegistry) -> bytes:
    """The text of one scrape of `registry` (prometheus-client's writer, served as
    CONTENT_TYPE_LATEST): for a registry of your own (the dashboard's `registry`).
    The garbage collector is paused meanwhile: a scrape of a large deployment makes
    tens of thousands of short-lived objects."""
    with _collector_paused():
        return generate_latest(registry)


def scrape(source: Source, up_s: float = UP_S) -> bytes:
    """The text of one scrape of runtime's metrics, as `runtime metrics` and the
    dashboard serve it (CONTENT_TYPE_LATEST): `read` written by `text`, the garbage
    collector paused."""
    with _collector_paused():
        return text(read(source, up_s))


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()


def text(found: Iterable[Family]) -> bytes:
    """Prometheus' text format of `found`, line for line as prometheus-client's
    generate_latest writes the same families read through `RuntimeCollector`: HELP
    and TYPE, a counter's samples and its HELP under `name_total`, label names
    sorted (`le` among them), label values and HELP escaped the same way, values
    by prometheus-client's own floatToGoString. Each number, label value and set
    of labels is written once per scrape and reused (most repeat: bucket counts,
    a queue's label in each of its families)."""
    numbers = _Written(floatToGoString)  # 1, 1.0 and True write alike
    quoted = _Written(_escape)

    def pairs(key: tuple[tuple[str, ...], tuple[str, ...]]) -> list[str]:
        """name="value" of each label of a series, sorted by name."""
        return [f'{name}="{quoted[value]}"' for name, value in sorted(zip(*key, strict=True))]

    braced = _Written(lambda key: "{" + ",".join(pairs(key)) + "}" if key[0] else "")
    out: list[str] = []
    for family in found:
        name = f"{family.name}_total" if family.kind == "counter" else family.name
        out.append(f"# HELP {name} {_escape_help(family.help)}\n# TYPE {name} {family.kind}\n")
        names = family.labels
        if family.kind != "histogram":
            out += [f"{name}{braced[names, v]} {numbers[value]}\n" for v, value in family.series]
            continue
        before = sum(1 for label in names if label < "le")  # le's place among sorted names
        for values, (buckets, total_s) in family.series:
            labels = pairs((names, values))
            lead = f'{name}_bucket{{{"".join(p + "," for p in labels[:before])}le="'
            trail = "".join("," + p for p in labels[before:]) + "} "
            out += [f'{lead}{le}"{trail}{numbers[count]}\n' for le, count in buckets]
            labelled = braced[names, values]
            out.append(f"{name}_count{labelled} {numbers[buckets[-1][1]]}\n")
            out.append(f"{name}_sum{labelled} {numbers[total_s]}\n")
    return "".join(out).encode()


class _Written(dict[Any, str]):
    """Texts written once and reused: a key not yet here is written by `write`."""

    def __init__(self, write: Callable[[Any], str]) -> None:
        super().__init__()
        self.write = write

    def __missing__(self, key: Any) -> str:
        written = self[key] = self.write(key)
        return written


def _escape(value: str) -> str:
    """A label value as prometheus-client writes it: backslash, newline and quote escaped."""
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _escape_help(help_: str) -> str:
    return help_.replace("\\", r"\\").replace("\n", r"\n")


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        log.debug("metrics: " + format, *args)


def server(client: Client, host: str, port: int, up_s: float = UP_S) -> WSGIServer:
    """An HTTP server answering GET /metrics with `scrape(client.admin)` (a Site's
    admin sums its namespaces; 404 for
    any other path)."""

    def app(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        if environ.get("PATH_INFO") != "/metrics":
            start_response("404 Not Found", [("Content-Type", "text/plain")])
            return [b"not found: metrics are at /metrics\n"]
        body = scrape(client.admin, up_s)
        start_response(
            "200 OK", [("Content-Type", CONTENT_TYPE_LATEST), ("Content-Length", str(len(body)))]
        )
        return [body]

    return make_server(host, port, app, handler_class=_QuietHandler)
