"""Tracing's pure parts: when a worker traces, a traceparent read back into a span
context, and the traceparent a put takes from the active span (docs/operating.md,
"Tracing")."""

from __future__ import annotations

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

from runtime.children import tracing
from runtime.queue import wire


@pytest.mark.parametrize(
    ("flag", "file", "env", "traces"),
    [
        (False, None, {}, False),
        (True, None, {}, True),
        (False, "/tmp/spans.jsonl", {}, True),
        (False, None, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, True),
        (False, None, {"OTEL_TRACES_EXPORTER": "console"}, True),
        (False, None, {"OTEL_TRACES_EXPORTER": "none"}, False),
        (False, None, {"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, False),
        (False, None, {"OTEL_SERVICE_NAME": "billing"}, False),
    ],
)
def test_a_worker_traces_when_asked_or_when_the_environment_names_an_exporter(
    flag: bool, file: str | None, env: dict[str, str], traces: bool
) -> None:
    assert tracing.wanted(flag, file, env) is traces


def test_a_traceparent_reads_back_as_a_remote_span_context() -> None:
    context = tracing._remote("00-" + "ab" * 16 + "-" + "cd" * 8 + "-01")
    assert context is not None and context.is_remote
    assert (context.trace_id, context.span_id) == (int("ab" * 16, 16), int("cd" * 8, 16))
    for bad in (None, "", "00-zz-01-01", "00-" + "0" * 32 + "-" + "0" * 16 + "-01", "1-2-3"):
        assert tracing._remote(bad) is None, bad


def test_a_put_takes_the_traceparent_of_the_active_span_only() -> None:
    assert "traceparent" not in wire.JobSpec.build("q", "a.b:c", {}).options
    tracer = TracerProvider().get_tracer("tests")
    with tracer.start_as_current_span("request") as span:
        spec = wire.JobSpec.build("q", "a.b:c", {})
    context = span.get_span_context()
    flags = int(context.trace_flags)
    expected = f"00-{context.trace_id:032x}-{context.span_id:016x}-{flags:02x}"
    assert spec.options["traceparent"] == expected
    assert f'"traceparent":"{expected}"' in spec.to_wire()[0]
    assert trace.get_current_span() is trace.INVALID_SPAN
