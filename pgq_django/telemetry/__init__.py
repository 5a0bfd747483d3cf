"""OpenTelemetry spans and metrics by the messaging semantic conventions.

Everything goes through the OpenTelemetry API (the ``otel`` extra), never the SDK: the
project configures an SDK, or nothing happens. Each hook answers at once while no tracer
provider is configured (or while the API is not installed), so a project without
OpenTelemetry pays a clock reading per call; the first call after a provider is set makes
the tracer and the instruments, once.

The hooks, each a decorator or a line in the code it observes:

- :func:`traced_send` around the store's insert: one ``send`` PRODUCER span per call (a
  batch is one span with ``messaging.batch.message_count``), whose context every message
  of the call keeps in its reserved ``pgq_trace`` header (:mod:`.carriers`);
- :func:`traced_receive` around ``read`` and ``pop``: a ``receive`` CLIENT span for each
  lease that found messages, linked to their creation contexts (an idle poll makes none);
- :func:`traced_process` around the worker's handling of one message: a ``process``
  CONSUMER span, linked to the message's creation context, or its child when
  ``PGQ["TRACE_PROCESS_AS_CHILD"]`` says so;
- :func:`traced_settle` around ack, nack, archive and reject: a ``settle`` CLIENT span
  named by its operation (``ack``, ``nack``, ``archive``, ``dead_letter``);
- :func:`continuing`, for the doors whose clients send a context of their own (REST's
  per-message ``traceparent``, SQS's ``X-Amzn-Trace-Id``): the send is made in it.

docs/observability.md lists every span, attribute and metric.
"""

from __future__ import annotations

import contextvars
import json
import logging
import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import wraps
from importlib.metadata import PackageNotFoundError, version
from typing import Any, ParamSpec, TypeVar

from .. import validation as v
from ..conf import settings
from .carriers import (
    MAX_TRACE_TEXT,
    SQS_TRACE_HEADER,
    TRACE_HEADER,
    stored_context,
    valid_traceparent,
    xray_to_traceparent,
)

try:
    from opentelemetry import context as otel_context
    from opentelemetry import metrics as otel_metrics
    from opentelemetry import trace
    from opentelemetry.baggage.propagation import W3CBaggagePropagator
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
except ImportError:  # the otel extra is not installed: every hook passes straight through
    API = False
else:
    API = True

__all__ = [
    "SQS_TRACE_HEADER",
    "TRACE_HEADER",
    "carry_trace_ids",
    "continuing",
    "record_failure",
    "settled_as",
    "traced_process",
    "traced_receive",
    "traced_send",
    "traced_settle",
]

P = ParamSpec("P")
R = TypeVar("R")

#: ``messaging.system``: not one of the conventions' well-known values, so our own name.
SYSTEM = "pgq_django"
_SCOPE = "pgq_django"
# Attribute names of the conventions.
_SYSTEM = "messaging.system"
_OPERATION = "messaging.operation.name"
_OPERATION_TYPE = "messaging.operation.type"
_DESTINATION = "messaging.destination.name"
_MESSAGE_ID = "messaging.message.id"
_CONVERSATION = "messaging.message.conversation_id"
_BATCH = "messaging.batch.message_count"
_BODY_SIZE = "messaging.message.body.size"
_ERROR_TYPE = "error.type"
# The reserved headers of request/reply (api.workflows owns them; read here as text).
_CORRELATION_ID = "pgq_correlation_id"
_REPLY_TO = "pgq_reply_to"

# The context a door's client gave for the message being sent (REST's traceparent field),
# kept for the send when no SDK is configured: the message still carries it to a worker
# that has one.
_GIVEN: contextvars.ContextVar[dict[str, str] | None] = contextvars.ContextVar(
    "pgq_trace_given", default=None
)
# What happened inside a process or settle span that its hook learns only from the code it
# wraps (the handler's error, a nack's dead letter): ``error`` and ``operation``.
_NOTES: contextvars.ContextVar[dict[str, str] | None] = contextvars.ContextVar(
    "pgq_trace_notes", default=None
)

Insert = Callable[[str, list[str], int, dict[str, Any], "float | None"], list[int]]


class _Live:
    """The tracer and the instruments, made once a tracer provider is configured."""

    def __init__(self, tracer: Any, meter: Any) -> None:
        self.tracer = tracer
        self.duration = meter.create_histogram(
            "messaging.client.operation.duration",
            unit="s",
            description="Duration of messaging operation initiated by a producer or consumer "
            "client.",
        )
        self.sent = meter.create_counter(
            "messaging.client.sent.messages",
            unit="{message}",
            description="Number of messages producer attempted to send to the broker.",
        )
        self.consumed = meter.create_counter(
            "messaging.client.consumed.messages",
            unit="{message}",
            description="Number of messages that were delivered to the application.",
        )
        self.processed = meter.create_histogram(
            "messaging.process.duration",
            unit="s",
            description="Duration of processing operation.",
        )

    def measure(
        self, histogram: Any, started: float, operation: str, queue: str, error: str | None
    ) -> None:
        attributes = {_SYSTEM: SYSTEM, _OPERATION: operation, _DESTINATION: queue}
        if error is not None:
            attributes[_ERROR_TYPE] = error
        histogram.record(time.perf_counter() - started, attributes)

    @contextmanager
    def sending(
        self, name: str, count: int, size: int, opts: dict[str, Any]
    ) -> Iterator[tuple[Any, dict[str, Any]]]:
        """The ``send`` span of ``count`` messages into ``name`` (a queue, or an exchange for
        a publish), and the send options carrying its context."""
        attributes = _attributes("send", "send", name)
        if count > 1:
            attributes[_BATCH] = count
        elif settings.TRACE_BODY_SIZE:
            attributes[_BODY_SIZE] = size
        conversation = _conversation(opts["headers"])
        if conversation is not None:
            attributes[_CONVERSATION] = conversation
        given = _GIVEN.get()
        parent = _propagator.extract(given) if given else None
        started = time.perf_counter()
        with self.tracer.start_as_current_span(
            f"send {name}", context=parent, kind=trace.SpanKind.PRODUCER, attributes=attributes
        ) as span:
            carrier: dict[str, str] = {}
            _propagator.inject(carrier)
            _baggage.inject(carrier)
            try:
                yield span, _with_context(opts, carrier)
            except BaseException as exc:
                self.measure(self.duration, started, "send", name, _failure(span, exc))
                raise
        self.measure(self.duration, started, "send", name, None)
        self.sent.add(count, {_SYSTEM: SYSTEM, _OPERATION: "send", _DESTINATION: name})

    def receive(self, read: Callable[..., list[Any]], args: Any, kwargs: Any) -> list[Any]:
        name = _queue_name(args[0] if args else kwargs.get("queue"))
        started, start_time = time.perf_counter(), time.time_ns()
        try:
            found = read(*args, **kwargs)
        except BaseException as exc:
            span = self._receive_span(name, start_time, [])
            self.measure(self.duration, started, "receive", name, _failure(span, exc))
            span.end()
            raise
        self.measure(self.duration, started, "receive", name, None)
        if found:
            # Only a lease that found messages is a span: an idle worker polls every second.
            span = self._receive_span(name, start_time, found)
            span.end()
            self.consumed.add(
                len(found), {_SYSTEM: SYSTEM, _OPERATION: "receive", _DESTINATION: name}
            )
        return found

    def _receive_span(self, name: str, start_time: int, found: list[Any]) -> Any:
        attributes = _attributes("receive", "receive", name)
        if len(found) == 1:
            attributes[_MESSAGE_ID] = str(found[0].msg_id)
        else:
            attributes[_BATCH] = len(found)
        links = [
            trace.Link(context)
            for m in found
            if (context := _span_context(stored_context(m.headers, m.attributes))) is not None
        ]
        return self.tracer.start_span(
            f"receive {name}",
            kind=trace.SpanKind.CLIENT,
            attributes=attributes,
            links=links,
            start_time=start_time,
        )

    def process(self, run: Callable[[Any, Any], R], entry: Any, message: Any) -> R:
        name = entry.queue
        carrier = stored_context(message.headers, message.attributes)
        attributes = _attributes("process", "process", name)
        attributes[_MESSAGE_ID] = str(message.msg_id)
        conversation = _message_conversation(message)
        if conversation is not None:
            attributes[_CONVERSATION] = conversation
        if settings.TRACE_BODY_SIZE:
            attributes[_BODY_SIZE] = len(v.body(message.message, message.headers).encode())
        links: list[Any] = []
        if carrier is None:
            parent = otel_context.Context()  # a new trace: the message came with none
        elif settings.TRACE_PROCESS_AS_CHILD:
            parent = _baggage.extract(carrier, context=_propagator.extract(carrier))
        else:
            parent = _baggage.extract(carrier, context=otel_context.Context())
            context = _span_context(carrier)
            links = [] if context is None else [trace.Link(context)]
        started = time.perf_counter()
        notes: dict[str, str] = {}
        token = _NOTES.set(notes)
        try:
            with self.tracer.start_as_current_span(
                f"process {name}",
                context=parent,
                kind=trace.SpanKind.CONSUMER,
                attributes=attributes,
                links=links,
            ) as span:
                try:
                    outcome = run(entry, message)
                except BaseException as exc:  # a batch's handler: it fails the message
                    notes["error"] = _failure(span, exc)
                    raise
        finally:
            _NOTES.reset(token)
            self.measure(self.processed, started, "process", name, notes.get("error"))
        return outcome

    def settle(self, call: Callable[..., R], operation: str, args: Any, kwargs: Any) -> R:
        name = _queue_name(args[0] if args else kwargs.get("queue"))
        attributes = _attributes(operation, "settle", name)
        ref = args[1] if len(args) > 1 else kwargs.get("msg_ids", kwargs.get("msg_id"))
        message_id = _single_id(ref)
        if message_id is not None:
            attributes[_MESSAGE_ID] = message_id
        elif isinstance(ref, list | tuple):
            attributes[_BATCH] = len(ref)
        started = time.perf_counter()
        notes: dict[str, str] = {}
        token = _NOTES.set(notes)
        try:
            with self.tracer.start_as_current_span(
                f"{operation} {name}", kind=trace.SpanKind.CLIENT, attributes=attributes
            ) as span:
                try:
                    done = call(*args, **kwargs)
                except BaseException as exc:
                    error = _failure(span, exc)
                    self.measure(self.duration, started, operation, name, error)
                    raise
                if "operation" in notes:
                    operation = notes["operation"]
                    span.update_name(f"{operation} {name}")
                    span.set_attribute(_OPERATION, operation)
        finally:
            _NOTES.reset(token)
        self.measure(self.duration, started, operation, name, None)
        return done


_live: _Live | None = None
# When the provider was last found unset: asking OpenTelemetry costs more than the rest of a
# hook, so a process without an SDK asks at most once per RECHECK seconds, and a provider
# set after the first message is picked up within that time.
_unset_at = -math.inf
RECHECK = 1.0
if API:
    _propagator = TraceContextTextMapPropagator()
    _baggage = W3CBaggagePropagator()


def _on() -> _Live | None:
    """The tracer and instruments when the project has configured a tracer provider."""
    global _live, _unset_at
    if _live is not None or not API:
        return _live
    now = time.monotonic()
    if now - _unset_at < RECHECK:
        return None
    provider = trace.get_tracer_provider()
    if isinstance(provider, trace.ProxyTracerProvider):
        _unset_at = now
        return None
    version = _version()
    _live = _Live(
        provider.get_tracer(_SCOPE, version),
        otel_metrics.get_meter(_SCOPE, version),
    )
    return _live


def _version() -> str:
    try:
        return version("pgq-django")
    except PackageNotFoundError:
        return "0"


def _attributes(operation: str, kind: str, queue: str) -> dict[str, Any]:
    return {_SYSTEM: SYSTEM, _OPERATION: operation, _OPERATION_TYPE: kind, _DESTINATION: queue}


def _queue_name(queue: Any) -> str:
    return str(getattr(queue, "name", queue))


def _single_id(ref: Any) -> str | None:
    """The message id of a settle on one message (an id or a receipt), else None."""
    if isinstance(ref, int) and not isinstance(ref, bool):
        return str(ref)
    msg_id = getattr(ref, "msg_id", None)
    return None if msg_id is None else str(msg_id)


def _failure(span: Any, exc: BaseException) -> str:
    """Record ``exc`` on ``span`` as the conventions ask; answers its ``error.type``."""
    code = getattr(exc, "code", None)
    error = code if isinstance(code, str) else type(exc).__qualname__
    span.set_attribute(_ERROR_TYPE, error)
    span.set_status(trace.Status(trace.StatusCode.ERROR, f"{error}: {exc}"))
    return error


def _with_context(opts: dict[str, Any], carrier: dict[str, str]) -> dict[str, Any]:
    """The checked send options with ``carrier`` added to their (encoded) headers.

    A key the headers already hold (a replay's copy of its original) is overridden: jsonb
    keeps the last of duplicate keys.
    """
    entry = json.dumps({TRACE_HEADER: carrier}, separators=(",", ":"))
    text = opts["headers"]
    return {**opts, "headers": entry if text == "{}" else f"{text[:-1]},{entry[1:]}"}


def _conversation(headers: str) -> str | None:
    """The correlation id a send's encoded headers carry (a reply's), if any."""
    if _CORRELATION_ID not in headers:
        return None
    found = json.loads(headers).get(_CORRELATION_ID)
    return None if found is None else str(found)


def _message_conversation(message: Any) -> str | None:
    """The conversation a message belongs to: a reply's correlation id, or the id of a
    request (the correlation id its reply will carry)."""
    headers = message.headers
    if not isinstance(headers, dict):
        return None
    if _CORRELATION_ID in headers:
        return str(headers[_CORRELATION_ID])
    if _REPLY_TO in headers:
        return str(message.msg_id)
    return None


def _span_context(carrier: dict[str, str] | None) -> Any:
    """The remote span context a stored carrier names, or None."""
    if not carrier:
        return None
    context = trace.get_current_span(_propagator.extract(carrier)).get_span_context()
    return context if context.is_valid else None


def traced_send(insert: Insert) -> Insert:
    """The store insert every send goes through, with its ``send`` span and context."""

    @wraps(insert)
    def send(
        name: str, bodies: list[str], size: int, opts: dict[str, Any], deadline: float | None
    ) -> list[int]:
        live = _on()
        if live is None:
            given = _GIVEN.get()
            if given is not None:
                opts = _with_context(opts, given)
            return insert(name, bodies, size, opts, deadline)
        with live.sending(name, len(bodies), size, opts) as (span, traced):
            ids = insert(name, bodies, size, traced, deadline)
            if len(ids) == 1:
                span.set_attribute(_MESSAGE_ID, str(ids[0]))
        return ids

    return send


@contextmanager
def publishing(exchange: str, size: int, opts: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """A publish through an exchange: its ``send`` span (destination: the exchange), and
    the checked send options every routed copy is sent with."""
    live = _on()
    if live is None:
        given = _GIVEN.get()
        yield opts if given is None else _with_context(opts, given)
        return
    with live.sending(exchange, 1, size, opts) as (_span, traced):
        yield traced


def traced_receive(read: Callable[P, list[R]]) -> Callable[P, list[R]]:
    """A lease (``read``, ``pop``) with its ``receive`` span and metrics."""
    if not API:
        return read

    @wraps(read)
    def receive(*args: P.args, **kwargs: P.kwargs) -> list[R]:
        live = _on()
        if live is None:
            return read(*args, **kwargs)
        return live.receive(read, args, kwargs)

    return receive


def traced_process(run: Callable[[Any, Any], R]) -> Callable[[Any, Any], R]:
    """The worker's handling of one message (``run(entry, message)``), in its ``process``
    span."""
    if not API:
        return run

    @wraps(run)
    def process(entry: Any, message: Any) -> R:
        live = _on()
        if live is None:
            return run(entry, message)
        return live.process(run, entry, message)

    return process


def traced_settle(operation: str) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """An acknowledgement (``ack``, ``nack``, ``archive``, ``dead_letter``) of the messages
    named by its second argument, in its ``settle`` span."""

    def decorate(call: Callable[P, R]) -> Callable[P, R]:
        if not API:
            return call

        @wraps(call)
        def settle(*args: P.args, **kwargs: P.kwargs) -> R:
            live = _on()
            if live is None:
                return call(*args, **kwargs)
            return live.settle(call, operation, args, kwargs)

        return settle

    return decorate


def settled_as(outcome: str | None) -> None:
    """A nack that moved its message to the dead-letter queue (or archived it as dead) is
    a ``dead_letter`` settle: its span and duration are named so."""
    notes = _NOTES.get()
    if notes is not None and outcome in ("dead_lettered", "dead"):
        notes["operation"] = "dead_letter"


def record_failure(exc: BaseException) -> None:
    """A handler's failure, on the current (process) span: the exception, an error
    status, and ``error.type`` (a PgqError's code, else the exception's class)."""
    notes = _NOTES.get()
    if notes is None:
        return
    span = trace.get_current_span()
    notes["error"] = _failure(span, exc)
    span.record_exception(exc)


@contextmanager
def continuing(
    traceparent: str | None = None, tracestate: str | None = None, xray: str | None = None
) -> Iterator[None]:
    """Send in the context a door's client gave for its message: a W3C ``traceparent``
    (and ``tracestate``), or an X-Ray trace header. With a configured SDK the send span
    becomes that context's child; without one, a traceparent is still stored with the
    message, for a worker that has one. A context that does not parse is ignored, as W3C
    asks of receivers."""
    parent = valid_traceparent(traceparent) or xray_to_traceparent(xray)
    if parent is None:
        yield
        return
    carrier = {"traceparent": parent}
    if isinstance(tracestate, str) and tracestate and len(tracestate) <= MAX_TRACE_TEXT:
        carrier["tracestate"] = tracestate
    token = _GIVEN.set(carrier)
    try:
        yield
    finally:
        _GIVEN.reset(token)


class _TraceIds(logging.Filter):
    """Adds ``trace_id`` and ``span_id`` (hex, empty outside a span) to each record, for a
    log format's ``%(trace_id)s`` and for structured handlers."""

    def filter(self, record: logging.LogRecord) -> bool:
        context = trace.get_current_span().get_span_context()
        if context.is_valid:
            record.trace_id = format(context.trace_id, "032x")
            record.span_id = format(context.span_id, "016x")
        else:
            record.trace_id = record.span_id = ""
        return True


def carry_trace_ids(*loggers: logging.Logger) -> None:
    """Give each logger's records the current span's ids (when the API is installed)."""
    if not API:
        return
    for logger in loggers:
        if not any(isinstance(f, _TraceIds) for f in logger.filters):
            logger.addFilter(_TraceIds())
