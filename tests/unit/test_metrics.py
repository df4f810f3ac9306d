"""The Prometheus collector's translation of a snapshot (runtime/metrics.py), with
no Redis: cumulative buckets from stored ones, families, names, no jid in a label."""

from __future__ import annotations

from typing import Any

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry

from runtime.errors import RedisCondition, RedisTransient
from runtime.metrics import BUCKETS_S, RuntimeCollector, cumulative_fields, exposition

COUNTS = {
    "waiting": 3,
    "throttled": 1,
    "scheduled": 2,
    "running": 4,
    "stalled": 0,
    "depends": 0,
    "complete": 7,
    "failed": 1,
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


def scrape(snapshot: dict[str, Any] | None) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The samples of one scrape through the registry, as served (runtime.metrics.exposition)."""
    registry = CollectorRegistry()
    registry.register(RuntimeCollector(Snapshots(snapshot)))
    served = samples_of(exposition(registry).decode())
    assert served == samples_of(generate_latest(registry).decode())
    return served


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
    samples = scrape(SNAPSHOT)
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
    assert scrape(None) == {("runtime_redis_up", ()): 0}


def test_describe_names_every_family_without_reading() -> None:
    names = {m.name for m in RuntimeCollector(Snapshots(None)).describe()}
    assert {
        "runtime_jobs",
        "runtime_jobs_completed",
        "runtime_job_run_seconds",
        "runtime_worker_running_jobs",
    } <= names
