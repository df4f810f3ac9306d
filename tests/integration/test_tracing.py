"""Traces from put to run through a real worker (docs/operating.md, "Tracing"):
the span of a job's first attempt is a child of the span that put it, a later
attempt starts a new trace linked to it, every span is exported even when
children are recycled after each job, and without tracing runtime loads no
tracing SDK."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

from runtime import Client
from tests.integration.conftest import StartMaster
from tests.support.waiting import ended, wait_for

S = "tests.integration.seeing_jobs"
MODULES = (S,)


@pytest.fixture(scope="module")
def tracer() -> Iterator[trace.Tracer]:
    provider = TracerProvider()
    yield provider.get_tracer("tests")
    provider.shutdown()


def spans(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_a_job_runs_in_the_trace_of_the_span_that_put_it(
    start_master: StartMaster, plain_client: Client, tracer: trace.Tracer, workdir: Path
) -> None:
    path = workdir / "spans.jsonl"
    start_master("q", "-c", "1", "--otel-file", str(path), modules=MODULES)
    with tracer.start_as_current_span("request") as producer:
        jid = plain_client.queue("q").put(f"{S}:span_of", {})
    context = producer.get_span_context()
    job = ended(plain_client, jid, 60)
    assert job.state == "complete", job.failure
    assert job.result["trace_id"] == f"{context.trace_id:032x}"
    assert job.result["parent"] == f"{context.span_id:016x}", "the producer's span is its parent"
    [run] = wait_for(lambda: spans(path), 20, what="the run span in the file")
    assert run["name"] == f"run {S}:span_of"
    assert run["context"]["span_id"] == "0x" + job.result["span_id"]
    assert run["attributes"] == {
        "queue": "q", "jid": jid, "attempt": 1, "worker": run["attributes"]["worker"],
        "outcome": "complete",
    }  # fmt: skip


def test_a_retried_attempt_runs_in_a_new_trace_linked_to_the_producer(
    start_master: StartMaster, plain_client: Client, tracer: trace.Tracer, workdir: Path
) -> None:
    path = workdir / "spans.jsonl"
    start_master("q", "-c", "1", "--otel-file", str(path), modules=MODULES)
    with tracer.start_as_current_span("request") as producer:
        jid = plain_client.queue("q").put(
            f"{S}:span_then_fail_once", {}, retries=1, backoff=(0.01, 0.01)
        )
    producer_trace = f"{producer.get_span_context().trace_id:032x}"
    job = ended(plain_client, jid, 60)
    assert job.state == "complete", job.failure
    assert job.result["trace_id"] != producer_trace, "a new trace"
    assert job.result["parent"] is None
    assert job.result["links"] == [producer_trace], "linked to the producer's span"
    found: list[dict[str, Any]] = wait_for(
        lambda: spans(path) if len(spans(path)) == 2 else [], 20, what="two spans"
    )
    first, second = sorted(found, key=lambda s: s["attributes"]["attempt"])
    assert first["context"]["trace_id"] == "0x" + producer_trace
    assert first["attributes"]["outcome"] == "retry" and first["status"]["status_code"] == "ERROR"
    assert second["attributes"]["outcome"] == "complete"


def test_every_span_is_exported_with_children_recycled_after_each_job(
    start_master: StartMaster, plain_client: Client, workdir: Path
) -> None:
    path = workdir / "spans.jsonl"
    master = start_master(
        "q", "-c", "2", "--max-jobs-per-child", "1", "--otel-file", str(path), modules=MODULES
    )
    q = plain_client.queue("q")
    jids = [q.put(f"{S}:light", {}) for _ in range(100)]
    for jid in jids:
        ended(plain_client, jid, 120)
    found: list[dict[str, Any]] = wait_for(
        lambda: spans(path) if len(spans(path)) >= 100 else [], 30, what="100 spans"
    )
    assert sorted(s["attributes"]["jid"] for s in found) == sorted(jids), master.log()[-2000:]


PUTTER = """
import sys
import redis  # redis-py loads opentelemetry itself when the SDK is installed: not ours
before = {m for m in sys.modules if m.startswith("opentelemetry")}
from runtime import Client
client = Client.from_url(sys.argv[1], namespace=sys.argv[2])
client.queue("q").put("tests.integration.seeing_jobs:modules", {}, jid=sys.argv[3])
after = {m for m in sys.modules if m.startswith("opentelemetry")}
print(sorted(after - before))
"""


def test_without_tracing_runtime_loads_no_tracing_sdk_in_a_putter_or_a_child(
    start_master: StartMaster, plain_client: Client
) -> None:
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("OTEL_")}
    start_master("q", "-c", "1", modules=MODULES, env={"OTEL_TRACES_EXPORTER": "none"})
    argv = [sys.executable, "-c", PUTTER, plain_client.url, plain_client.keys.namespace, "p1"]
    out = subprocess.run(argv, capture_output=True, text=True, env=env, check=True).stdout
    assert out.strip() == "[]", "nothing loaded by runtime in the putting process"
    job = ended(plain_client, "p1", 60)
    assert job.state == "complete", job.failure
    loaded = set(job.result)
    assert "opentelemetry.sdk.trace" not in loaded, sorted(loaded)
    assert not {m for m in loaded if m.startswith("opentelemetry.sdk.trace")}
