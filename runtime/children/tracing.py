"""OpenTelemetry in a child: each attempt runs in a span `run <klass>`.

Only when the worker has tracing on (`runtime worker --otel`, `--otel-file PATH`,
or the standard OTEL_* environment naming an exporter): otherwise nothing here
imports opentelemetry, and a child pays one attribute test per job. The span of
a first attempt is a child of the span that put the job (its W3C traceparent,
stored with the job: runtime/queue/wire.py); a later attempt starts a new trace
linked to it, so a retried job does not stretch the producer's trace over
hours. Attributes: queue, jid, attempt, worker, outcome (complete, retry,
failed).

The provider is made in the child, after the fork (a batch processor's thread
must not cross a fork); the fork server only imports the SDK (`preload`), so
children start warm. Spans are flushed before a child exits (`shutdown`,
called on every way out of the child that runs Python). `--otel-file` writes one
JSON span per line (the SDK's own JSON of a span), batched like any exporter:
for local debugging and tests. docs/operating.md, "Tracing".
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from runtime.children import protocol
from runtime.vocabulary import JobState

FLUSH_TIMEOUT_MS = 5000
RETRY = "retry"  # the outcome of an attempt that is retried (else the job's end state)
# Any of these set (and OTEL_TRACES_EXPORTER not "none") turns tracing on.
ENV_MARKERS = (
    "OTEL_TRACES_EXPORTER",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
)


def wanted(flag: bool, file: str | None, env: Mapping[str, str]) -> bool:
    """Whether a worker traces: asked for, or the environment names an exporter."""
    if flag or file:
        return True
    if env.get("OTEL_SDK_DISABLED", "").lower() == "true":
        return False
    if env.get("OTEL_TRACES_EXPORTER", "").lower() == "none":
        return False
    return any(env.get(name) for name in ENV_MARKERS)


def preload() -> None:
    """Imports the SDK (in the fork server: no thread is started)."""
    import opentelemetry.sdk.trace  # noqa: PLC0415 - only a tracing worker loads it
    import opentelemetry.sdk.trace.export  # noqa: F401, PLC0415


class Tracer:
    """A child's tracing: its provider and tracer, made at the first job."""

    def __init__(self, worker: str, file: str | None) -> None:
        self.worker = worker
        self.file = file
        self.provider: Any = None
        self.tracer: Any = None

    def _start(self) -> None:
        from opentelemetry import trace  # noqa: PLC0415 - only a tracing worker loads it
        from opentelemetry.sdk.resources import Resource  # noqa: PLC0415
        from opentelemetry.sdk.trace import TracerProvider  # noqa: PLC0415

        resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME") or
                                    "runtime-worker"})  # fmt: skip
        provider = TracerProvider(resource=resource)
        for processor in _processors(self.file):
            provider.add_span_processor(processor)
        trace.set_tracer_provider(provider)
        self.provider = provider
        self.tracer = provider.get_tracer("runtime")

    @contextmanager
    def attempt(self, run: protocol.Run) -> Iterator[Any]:
        """The attempt's span, current while the job runs; yields it."""
        if self.tracer is None:
            self._start()
        from opentelemetry import trace  # noqa: PLC0415
        from opentelemetry.context import Context  # noqa: PLC0415
        from opentelemetry.trace import Link, SpanKind  # noqa: PLC0415

        parent = _remote(run.traceparent)
        context: Any = Context()  # a root unless the first attempt has a parent
        links: Sequence[Any] = ()
        if parent is not None and run.attempt <= 1:
            context = trace.set_span_in_context(trace.NonRecordingSpan(parent), Context())
        elif parent is not None:
            links = [Link(parent, {"runtime.link": "put"})]
        attributes = {"queue": run.queue, "jid": run.jid, "attempt": run.attempt,
                      "worker": self.worker}  # fmt: skip
        with self.tracer.start_as_current_span(
            f"run {run.klass}", context=context, links=links, kind=SpanKind.CONSUMER,
            attributes=attributes, record_exception=False, set_status_on_exception=False,
        ) as span:  # fmt: skip
            yield span

    @staticmethod
    def ended(span: Any, outcome: protocol.Message) -> None:
        """Sets the span's outcome (complete, retry, failed) and status."""
        from opentelemetry.trace import Status, StatusCode  # noqa: PLC0415

        if isinstance(outcome, protocol.Failed):
            span.set_attribute("outcome", RETRY if outcome.retry else JobState.FAILED.value)
            span.set_attribute("failure.group", outcome.group)
            span.set_status(Status(StatusCode.ERROR, outcome.group))
        else:
            span.set_attribute("outcome", JobState.COMPLETE.value)

    def shutdown(self) -> None:
        """Exports what is left (before the child exits)."""
        if self.provider is not None:
            self.provider.force_flush(FLUSH_TIMEOUT_MS)
            self.provider.shutdown()
            self.provider = self.tracer = None


def _remote(traceparent: str | None) -> Any:
    """The SpanContext a traceparent names (remote), or None."""
    if not traceparent:
        return None
    from opentelemetry.trace import SpanContext, TraceFlags  # noqa: PLC0415

    parts = traceparent.split("-")
    if len(parts) != 4:
        return None
    try:
        trace_id, span_id, flags = int(parts[1], 16), int(parts[2], 16), int(parts[3], 16)
    except ValueError:
        return None
    context = SpanContext(trace_id, span_id, is_remote=True, trace_flags=TraceFlags(flags))
    return context if context.is_valid else None


def _processors(file: str | None) -> list[Any]:
    """Batch processors (the SDK's: a thread, spans sent every few seconds and at
    shutdown) for the file exporter and, when the environment names one, the
    OTLP or console exporter."""
    from opentelemetry.sdk.trace.export import (  # noqa: PLC0415
        BatchSpanProcessor,
        ConsoleSpanExporter,
    )

    out: list[Any] = []
    if file:
        out.append(BatchSpanProcessor(_file_exporter(file)))
    names = os.environ.get("OTEL_TRACES_EXPORTER", "otlp" if not file else "none")
    for name in (n.strip().lower() for n in names.split(",")):
        if name == "console":
            out.append(BatchSpanProcessor(ConsoleSpanExporter()))
        elif name == "otlp":
            exporter = _otlp_exporter()
            if exporter is not None:
                out.append(BatchSpanProcessor(exporter))
    return out


def _otlp_exporter() -> Any:
    """The OTLP exporter if one is installed (opentelemetry-exporter-otlp): it
    reads its endpoint and headers from OTEL_EXPORTER_OTLP_*."""
    protocol_name = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or os.environ.get(
        "OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"
    )
    try:
        if protocol_name == "grpc":
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (  # noqa: PLC0415
                OTLPSpanExporter,
            )
        else:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import (  # noqa: PLC0415
                OTLPSpanExporter,
            )
    except ImportError:
        return None
    return OTLPSpanExporter()


def _file_exporter(path: str) -> Any:
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult  # noqa: PLC0415

    class FileExporter(SpanExporter):
        """One JSON span per line, appended (children share the file)."""

        def __init__(self) -> None:
            self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)

        def export(self, spans: Sequence[Any]) -> Any:
            lines = "".join(span.to_json(indent=None) + "\n" for span in spans)
            try:
                os.write(self.fd, lines.encode())
            except OSError:
                return SpanExportResult.FAILURE
            return SpanExportResult.SUCCESS

        def shutdown(self) -> None:
            os.close(self.fd)

    return FileExporter()
