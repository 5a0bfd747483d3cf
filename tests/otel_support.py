"""OpenTelemetry for the telemetry tests: the real SDK, in this process or in a child.

In the test process, :func:`in_memory` gives pgq_django a tracer and a meter of their own
(an in-memory span exporter and metric reader) for one test, without setting the
process-wide provider, which could never be unset and would add a ``pgq_trace`` header to
the messages of every test that runs after it in the same process.

A child process (a worker, a live server, a sender) imports this module with
``PGQ_TEST_OTEL_FILE`` set: importing configures the global SDK with a span processor that
appends each finished span to that file as one JSON line, which the test reads back with
:func:`spans_in`. Its handlers are here too (``pgq_worker --import tests.otel_support``).
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import pgq_django as pgq
from pgq_django import telemetry

ENV = "PGQ_TEST_OTEL_FILE"


class InMemory(NamedTuple):
    spans: InMemorySpanExporter
    metrics: InMemoryMetricReader
    tracer: Any
    provider: TracerProvider

    def finished(self, name: str | None = None) -> list[ReadableSpan]:
        found = list(self.spans.get_finished_spans())
        return [s for s in found if name is None or s.name == name]

    def metric_points(self, metric: str) -> list[Any]:
        data = self.metrics.get_metrics_data()
        points: list[Any] = []
        for resource in data.resource_metrics if data else []:
            for scope in resource.scope_metrics:
                for m in scope.metrics:
                    if m.name == metric:
                        points.extend(m.data.data_points)
        return points


def in_memory() -> tuple[InMemory, Any]:
    """An SDK tracer and meter for pgq_django, and the ``_Live`` to put in place."""
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader])
    tracer = provider.get_tracer("tests")
    live = telemetry._Live(provider.get_tracer("pgq_django"), meters.get_meter("pgq_django"))
    return InMemory(spans, reader, tracer, provider), live


def hex_trace(span: ReadableSpan) -> str:
    return format(span.context.trace_id, "032x")


def traceparent(span: ReadableSpan) -> str:
    c = span.context
    return f"00-{c.trace_id:032x}-{c.span_id:016x}-{c.trace_flags:02x}"


# ---------------------------------------------------------------------------------------------
# Children: spans to a JSON-lines file


class _FileExporter(SpanExporter):
    def __init__(self, path: str) -> None:
        self.path = path
        self.lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        lines = [json.dumps(span_json(s)) + "\n" for s in spans]
        with self.lock, open(self.path, "a") as f:
            f.writelines(lines)
        return SpanExportResult.SUCCESS


def span_json(s: ReadableSpan) -> dict[str, Any]:
    return {
        "name": s.name,
        "kind": s.kind.name,
        "trace_id": f"{s.context.trace_id:032x}",
        "span_id": f"{s.context.span_id:016x}",
        "parent": None if s.parent is None else f"{s.parent.span_id:016x}",
        "parent_trace": None if s.parent is None else f"{s.parent.trace_id:032x}",
        "links": [
            {"trace_id": f"{k.context.trace_id:032x}", "span_id": f"{k.context.span_id:016x}"}
            for k in s.links
        ],
        "attributes": dict(s.attributes or {}),
        "status": s.status.status_code.name,
        "events": [e.name for e in s.events],
        "pid": os.getpid(),
    }


def spans_in(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _configure_child() -> None:
    path = os.environ.get(ENV)
    if not path or not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        return
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(_FileExporter(path)))
    trace.set_tracer_provider(provider)


_configure_child()


# ---------------------------------------------------------------------------------------------
# Handlers the worker children run (set as queue callbacks)


def handle(message: Any) -> dict[str, Any]:
    """Driven by the body: ``fail`` raises; ``then`` sends a follow-up to that queue."""
    body = message.message if isinstance(message.message, dict) else {}
    if body.get("fail"):
        raise ValueError(f"failing message {message.msg_id}")
    if body.get("then"):
        pgq.send(body["then"], {"after": message.msg_id})
    return {"handled": message.msg_id}
