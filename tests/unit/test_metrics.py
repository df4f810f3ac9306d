"""The Prometheus collector's translation of a snapshot (runtime/metrics.py), with
no Redis: cumulative buckets from stored ones, families, names, no jid in a label;
and the served text (runtime.metrics.scrape), which must parse to what
prometheus-client writes for the registry, family by family and sample by sample,
and be that text line for line."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import generate_latest
from prometheus_client.core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry

from runtime.errors import RedisCondition, RedisTransient
from runtime.metrics import (
    BUCKETS_S,
    STATES,
    RuntimeCollector,
    cumulative_fields,
    exposition,
    scrape,
)

COUNTS = {
    "waiting": 3,
    "throttled": 1,
    "scheduled": 2,
    "running": 4,
    "stalled": 0,
    "depends": 0,
    "complete": 7,
    "failed": 1,
    "cancelled": 2,
    "paused": True,
    "size_warning": 0,
    "completed_total": 9,
    "failed_total": 2,
    "retried_total": 5,
    "oldest_waiting_ms": 1500,
}
SNAPSHOT: dict[str, Any] = {
    "now_ms": 1,
    "queues": {
        'odd "name"\\': {**COUNTS, "paused": False, "stats": {}},
        "emails": {
            **COUNTS,
            "stats": {
                "run:n": 4,
                "run:mean": 0.25,
                "run:hist:ms3": 1,
                "run:hist:ms100": 2,
                "run:hist:s4": 1,
            },
        },
    },
    "groups": {"boom.Error": 1},
    "workers": {"host-1": {"seen_ms": 1, "running": 4}},
}


class Snapshots:
    """A stand-in for Client.snapshot: the reply as the script would give it."""

    def __init__(self, snapshot: dict[str, Any] | None) -> None:
        self.snapshot_reply = snapshot

    def snapshot(self, up_s: float) -> dict[str, Any]:
        if self.snapshot_reply is None:
            raise RedisTransient(RedisCondition.CONNECTION, "Redis unavailable (connection)")
        return self.snapshot_reply


def samples_of(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def parsed(text: bytes) -> list[Metric]:
    return list(text_string_to_metric_families(text.decode()))


def same_text(served: bytes, through_registry: bytes) -> None:
    """The same families and samples once parsed, and the same text line for line:
    names in HELP and TYPE, label order, number formatting."""
    assert parsed(served) == parsed(through_registry)
    assert served.decode().splitlines() == through_registry.decode().splitlines()


def served_and_registry(snapshot: dict[str, Any] | None) -> tuple[bytes, bytes]:
    """The text runtime serves for one snapshot, and prometheus-client's
    (generate_latest) for a registry holding runtime's collector, same snapshot."""
    source = Snapshots(snapshot)
    registry = CollectorRegistry()
    registry.register(RuntimeCollector(source))
    return scrape(source), generate_latest(registry)


def scraped(
    snapshot: dict[str, Any] | None,
) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The samples of one scrape as served (runtime.metrics.scrape), checked against
    the registry's text, written by prometheus-client directly and as the dashboard
    writes a registry given to it (runtime.metrics.exposition)."""
    served, through_registry = served_and_registry(snapshot)
    same_text(served, through_registry)
    registry = CollectorRegistry()
    registry.register(RuntimeCollector(Snapshots(snapshot)))
    assert exposition(registry) == through_registry
    return samples_of(served.decode())


def test_stored_buckets_become_cumulative_prometheus_buckets() -> None:
    fields = {
        "run:hist:ms3": 1,
        "run:hist:ms100": 2,
        "run:hist:s4": 1,
        "run:hist:d365": 1,
        "run:hist:s0": 2,
        "run:n": 7,
        "wait:hist:ms1": 9,
    }
    got = dict(cumulative_fields("run", fields))
    assert got["0.001"] == 2, "a day written before the ms buckets: s0 counts as 0-1 ms"
    assert got["0.005"] == 3 and got["0.1"] == 3 and got["0.5"] == 5 and got["5.0"] == 6
    assert got["3600.0"] == 6 and got["+Inf"] == 7
    assert list(got) == [repr(float(b)) for b in BUCKETS_S] + ["+Inf"]


def test_a_snapshot_becomes_gauges_counters_and_histograms() -> None:
    samples = scraped(SNAPSHOT)
    assert samples[("runtime_jobs", (("queue", "emails"), ("state", "complete")))] == 7
    assert samples[("runtime_jobs", (("queue", "emails"), ("state", "waiting")))] == 3
    assert samples[("runtime_queue_paused", (("queue", "emails"),))] == 1
    assert samples[("runtime_queue_oldest_waiting_seconds", (("queue", "emails"),))] == 1.5
    assert samples[("runtime_jobs_completed_total", (("queue", "emails"),))] == 9
    assert samples[("runtime_jobs_failed_total", (("queue", "emails"),))] == 2
    assert samples[("runtime_jobs_retried_total", (("queue", "emails"),))] == 5
    assert samples[("runtime_failed_jobs", (("group", "boom.Error"),))] == 1
    assert samples[("runtime_workers", ())] == 1
    assert samples[("runtime_worker_running_jobs", (("worker", "host-1"),))] == 4
    run = "runtime_job_run_seconds"
    assert samples[(f"{run}_bucket", (("le", "0.005"), ("queue", "emails")))] == 1
    assert samples[(f"{run}_bucket", (("le", "0.5"), ("queue", "emails")))] == 3
    assert samples[(f"{run}_bucket", (("le", "+Inf"), ("queue", "emails")))] == 4
    assert samples[(f"{run}_count", (("queue", "emails"),))] == 4
    assert samples[(f"{run}_sum", (("queue", "emails"),))] == 1.0
    assert not any(name.startswith("runtime_job_wait_seconds") for name, _ in samples), (
        "no wait histogram for a queue that saw no wait today"
    )
    assert samples[("runtime_redis_up", ())] == 1
    labels = {name for (_, pairs) in samples for name, _ in pairs}
    assert labels == {"queue", "state", "group", "worker", "le"}


def test_redis_out_of_reach_is_a_scrape_that_says_so() -> None:
    assert scraped(None) == {("runtime_redis_up", ()): 0}


def test_describe_names_every_family_without_reading() -> None:
    names = {m.name for m in RuntimeCollector(Snapshots(None)).describe()}
    assert {
        "runtime_jobs",
        "runtime_jobs_completed",
        "runtime_job_run_seconds",
        "runtime_worker_running_jobs",
    } <= names


def test_histogram_sums_of_days_in_the_sums_format_and_of_mixed_days() -> None:
    """Today's fields as lib/stats.lua writes them (sums in ms, the count in the
    buckets), and a day an earlier version began (n, mean) and this one went on."""
    sums = {"run:ms": 1500, "run:ms2": 1250000, "run:hist:ms500": 1, "run:hist:s1": 1}
    mixed = {**sums, "run:n": 1, "run:mean": 0.25, "run:hist:ms200": 1}
    samples = scraped(
        {
            "now_ms": 1,
            "queues": {"sums": counts(stats=sums), "mixed": counts(stats=mixed)},
            "groups": {},
            "workers": {},
        }
    )
    run = "runtime_job_run_seconds"
    assert samples[(f"{run}_count", (("queue", "sums"),))] == 2
    assert samples[(f"{run}_sum", (("queue", "sums"),))] == pytest.approx(1.5)
    assert samples[(f"{run}_count", (("queue", "mixed"),))] == 3
    assert samples[(f"{run}_sum", (("queue", "mixed"),))] == pytest.approx(1.75)


def counts(**values: Any) -> dict[str, Any]:
    return {**COUNTS, "stats": {}, **values}


def test_the_served_text_is_the_registrys_with_odd_labels_and_large_values() -> None:
    odd = {
        'quote " backslash \\ newline \n': counts(
            completed_total=12_345_678,  # written 1.2345678e+07
            oldest_waiting_ms=86_400_000_123,
            stats={"wait:n": 3, "wait:mean": 0.1, "wait:hist:ms0": 2, "wait:hist:d365": 1},
        ),
        "caf\u00e9 \u2603": counts(
            paused=False,
            stats={"run:n": 2, "run:mean": 1e-9, "run:hist:ms0": 2, "wait:n": 0},
        ),
        "": counts(),
    }
    snapshot = {
        "now_ms": 1,
        "queues": odd,
        "groups": {'a "b"\\': 3, "x\ny": 10_000_000},
        "workers": {"w\\1": {"seen_ms": 1, "running": 2}, 'w"2': {"seen_ms": 1, "running": 0}},
    }
    served, through_registry = served_and_registry(snapshot)
    same_text(served, through_registry)
    assert served.decode().count("\n") == through_registry.decode().count("\n")
    got = samples_of(served.decode())
    quoted = 'quote " backslash \\ newline \n'
    assert got[("runtime_jobs_completed_total", (("queue", quoted),))] == 12_345_678
    assert got[("runtime_job_wait_seconds_count", (("queue", quoted),))] == 3
    assert got[("runtime_failed_jobs", (("group", "x\ny"),))] == 10_000_000


def test_an_empty_deployment_writes_every_help_and_type() -> None:
    served, through_registry = served_and_registry({"queues": {}, "groups": {}, "workers": {}})
    same_text(served, through_registry)
    # 12 families, the 2 of open batches, the 2 of domain slots, the 2 of usage
    assert served.count(b"# HELP ") == 18 and served.count(b"# TYPE ") == 18


NAMES = st.text(max_size=8)
AMOUNTS = st.integers(0, 10**13)
STATS = st.fixed_dictionaries(
    {},
    optional={
        "wait:n": st.integers(0, 10**7),
        "wait:mean": st.floats(0, 1e6),
        "run:n": st.integers(0, 10**7),
        "run:mean": st.floats(0, 1e6),
        "wait:hist:ms3": AMOUNTS,
        "wait:hist:s59": AMOUNTS,
        "run:hist:ms100": AMOUNTS,
        "run:hist:h1": AMOUNTS,
        "run:hist:d365": AMOUNTS,
        "u:cpu:0.01:app.jobs:f": AMOUNTS,
        "u:cpu:inf:app.jobs:f": AMOUNTS,
        "u:cpu:ms:app.jobs:f": AMOUNTS,
        "u:rss:64:app.jobs:f": AMOUNTS,
        "u:rss:mb:app.jobs:f": AMOUNTS,
        "u:rss:inf:other": AMOUNTS,
    },
)
QUEUE: dict[str, st.SearchStrategy[Any]] = {state.value: AMOUNTS for state in STATES}
QUEUE |= {
    "paused": st.booleans(),
    "completed_total": AMOUNTS,
    "failed_total": AMOUNTS,
    "retried_total": AMOUNTS,
    "oldest_waiting_ms": AMOUNTS,
    "stats": STATS,
}
QUEUES = st.dictionaries(NAMES, st.fixed_dictionaries(QUEUE), max_size=4)
SNAPSHOTS = st.fixed_dictionaries(
    {
        "queues": QUEUES,
        "groups": st.dictionaries(NAMES, AMOUNTS, max_size=3),
        "workers": st.dictionaries(NAMES, st.fixed_dictionaries({"running": AMOUNTS}), max_size=3),
    }
)


@settings(max_examples=200, derandomize=True, database=None, deadline=None)
@given(SNAPSHOTS)
def test_any_snapshot_is_served_as_the_registry_writes_it(snapshot: dict[str, Any]) -> None:
    served, through_registry = served_and_registry(snapshot)
    same_text(served, through_registry)
