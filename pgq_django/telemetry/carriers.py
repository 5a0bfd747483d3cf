"""Where a message keeps the trace context it was created in, and the formats it comes in.

Plain text handling, without OpenTelemetry: the admin shows a message's trace id and the
SQS endpoint keeps an X-Ray header whether or not the project has installed the API.

A message's creation context is found, in this order of trust, in:

1. ``headers["pgq_trace"]``: written by the server when the message was sent (the W3C
   ``traceparent``, ``tracestate`` and ``baggage`` of the send span). ``pgq_`` header keys
   are refused from every sender (``pgq.send``, REST, SQS, the PGMQ SQL functions), so no
   client can plant one.
2. ``headers["pgq_sqs_trace_header"]``: the X-Ray header (``AWSTraceHeader``) the SQS
   endpoint recorded for a message sent without a configured SDK in the web process.
3. What the message's own client wrote for it, when the server wrote nothing: a
   ``traceparent`` header (PGMQ clients, REST) or a ``traceparent`` message attribute (SQS
   clients other than boto3). It can only ever describe that message, never another one.

A body is never read for trace context.
"""

from __future__ import annotations

import re
from typing import Any

#: The reserved header the server writes a message's creation context in.
TRACE_HEADER = "pgq_trace"
#: The reserved header the SQS endpoint keeps a message's ``AWSTraceHeader`` in.
SQS_TRACE_HEADER = "pgq_sqs_trace_header"

# W3C Trace Context, version 00: version-trace_id-parent_id-flags, lower-case hex.
_TRACEPARENT = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
# An X-Ray trace header: ``Root=1-<8 hex epoch>-<24 hex>;Parent=<16 hex>;Sampled=<0|1>``,
# fields in any order, others (Lineage, Self) allowed and ignored.
_XRAY_ROOT = re.compile(r"1-([0-9a-f]{8})-([0-9a-f]{24})")
_XRAY_PARENT = re.compile(r"[0-9a-f]{16}")
#: The longest tracestate or X-Ray header kept (W3C allows 32 entries of 256 characters
#: and advises 512 as a practical limit; SQS keeps X-Ray headers to 512 too).
MAX_TRACE_TEXT = 512
_ZERO_TRACE = "0" * 32
_ZERO_SPAN = "0" * 16


def valid_traceparent(value: Any) -> str | None:
    """``value`` when it is a usable W3C traceparent (not all zeros), else None."""
    if not isinstance(value, str):
        return None
    found = _TRACEPARENT.fullmatch(value)
    if found is None or found[1] == _ZERO_TRACE or found[2] == _ZERO_SPAN:
        return None
    return value


def xray_to_traceparent(header: Any) -> str | None:
    """The W3C traceparent an X-Ray trace header names (as the AWS X-Ray propagator reads
    it: the 32 hex digits of Root without its dashes, Parent as the span id, Sampled as
    the flag), or None when the header has no usable Root and Parent."""
    if not isinstance(header, str) or len(header) > MAX_TRACE_TEXT:
        return None
    fields: dict[str, str] = {}
    for part in header.split(";"):
        key, _, value = part.strip().partition("=")
        fields[key] = value
    root = _XRAY_ROOT.fullmatch(fields.get("Root", ""))
    parent = fields.get("Parent", "")
    if root is None or not _XRAY_PARENT.fullmatch(parent):
        return None
    flags = "01" if fields.get("Sampled") == "1" else "00"
    return valid_traceparent(f"00-{root[1]}{root[2]}-{parent}-{flags}")


def traceparent_to_xray(traceparent: str) -> str:
    """The X-Ray trace header of a W3C traceparent (what an SQS receive returns as
    ``AWSTraceHeader`` for a message sent through another door)."""
    _, trace_id, span_id, flags = traceparent.split("-")
    sampled = int(flags, 16) & 1
    return f"Root=1-{trace_id[:8]}-{trace_id[8:]};Parent={span_id};Sampled={sampled}"


def stored_context(headers: Any, attributes: Any = None) -> dict[str, str] | None:
    """A message's creation context as W3C carrier fields (``traceparent`` and, when
    known, ``tracestate`` and ``baggage``), by the order of trust above; None if it has
    none."""
    if isinstance(headers, dict) and headers:
        stored = headers.get(TRACE_HEADER)
        if isinstance(stored, dict) and valid_traceparent(stored.get("traceparent")):
            return {k: v for k, v in stored.items() if isinstance(v, str)}
        traceparent = xray_to_traceparent(headers.get(SQS_TRACE_HEADER))
        if traceparent is not None:
            return {"traceparent": traceparent}
        traceparent = valid_traceparent(headers.get("traceparent"))
        if traceparent is not None:
            state = headers.get("tracestate")
            if isinstance(state, str) and len(state) <= MAX_TRACE_TEXT:
                return {"traceparent": traceparent, "tracestate": state}
            return {"traceparent": traceparent}
    if isinstance(attributes, dict) and attributes:
        traceparent = valid_traceparent(attributes.get("traceparent"))
        if traceparent is not None:
            return {"traceparent": traceparent}
    return None


def trace_id(headers: Any, attributes: Any = None) -> str | None:
    """The 32 hex digits of the trace a message was created in, or None."""
    found = stored_context(headers, attributes)
    return found["traceparent"].split("-")[1] if found else None


def xray_header(headers: Any) -> str | None:
    """The ``AWSTraceHeader`` an SQS receive returns: the one the endpoint recorded, else
    the message's creation context in X-Ray form, else None."""
    if not isinstance(headers, dict) or not headers:
        return None
    recorded = headers.get(SQS_TRACE_HEADER)
    if isinstance(recorded, str):
        return recorded
    found = stored_context(headers)
    return traceparent_to_xray(found["traceparent"]) if found else None


def trace_url(template: str | None, headers: Any, attributes: Any = None) -> tuple[str, str]:
    """The trace id of a message and its link by ``template`` (``{trace_id}`` filled in);
    empty strings when the message has no trace, no link without a template."""
    found = trace_id(headers, attributes)
    if found is None:
        return "", ""
    return found, template.replace("{trace_id}", found) if template else ""
