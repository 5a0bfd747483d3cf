"""The trace-context formats a message carries, against OpenTelemetry's own propagators,
and the documentation's list of every span, attribute and metric."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from opentelemetry.propagators.aws.aws_xray_propagator import AwsXRayPropagator
from opentelemetry.trace import get_current_span
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from pgq_django import telemetry
from pgq_django.telemetry import carriers
from tests.conftest import ROOT

XRAY = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"


def _w3c(traceparent: str) -> tuple[int, int, int]:
    context = get_current_span(
        TraceContextTextMapPropagator().extract({"traceparent": traceparent})
    ).get_span_context()
    return context.trace_id, context.span_id, int(context.trace_flags)


@pytest.mark.parametrize(
    "header",
    [
        XRAY,
        "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=0",
        "Parent=53995c3f42cd8ad8;Lineage=a:1;Root=1-5759e988-bd862e3fe1be46a994272793;Sampled=1",
    ],
)
def test_an_x_ray_header_reads_as_the_aws_propagator_reads_it(header: str) -> None:
    theirs = get_current_span(
        AwsXRayPropagator().extract({"X-Amzn-Trace-Id": header})
    ).get_span_context()
    ours = carriers.xray_to_traceparent(header)
    assert ours is not None
    assert _w3c(ours) == (theirs.trace_id, theirs.span_id, int(theirs.trace_flags))


@pytest.mark.parametrize(
    "header",
    [
        None,
        "",
        "Root=1-5759e988-bd862e3fe1be46a994272793",  # no parent
        "Root=2-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8",
        "Root=1-5759E988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8",
        "Root=1-00000000-000000000000000000000000;Parent=53995c3f42cd8ad8",
        XRAY + ";" + "x" * 600,
    ],
)
def test_a_malformed_x_ray_header_names_no_context(header: str | None) -> None:
    assert carriers.xray_to_traceparent(header) is None


def test_a_traceparent_turns_into_the_x_ray_header_it_came_from() -> None:
    traceparent = carriers.xray_to_traceparent(XRAY)
    assert traceparent is not None
    assert carriers.traceparent_to_xray(traceparent) == XRAY


@pytest.mark.parametrize(
    "value",
    [
        "00-" + "0" * 32 + "-b7ad6b7169203331-01",
        "00-0af7651916cd43dd8448eb211c80319c-" + "0" * 16 + "-01",
        "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01",
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01 ",
        42,
    ],
)
def test_only_a_usable_w3c_traceparent_is_taken(value: object) -> None:
    assert carriers.valid_traceparent(value) is None


def test_the_server_written_context_wins_over_what_a_client_wrote() -> None:
    own = "00-" + "12" * 16 + "-" + "34" * 8 + "-01"
    server = {"traceparent": "00-" + "56" * 16 + "-" + "78" * 8 + "-01", "tracestate": "a=1"}
    assert carriers.stored_context({"traceparent": own, "pgq_trace": server}) == server
    assert carriers.stored_context({"pgq_sqs_trace_header": XRAY, "traceparent": own}) == {
        "traceparent": carriers.xray_to_traceparent(XRAY)
    }
    assert carriers.stored_context({"traceparent": own}, {"traceparent": "bad"}) == {
        "traceparent": own
    }
    assert carriers.stored_context({}, {"traceparent": own}) == {"traceparent": own}
    assert carriers.stored_context({"pgq_trace": "not a mapping"}) is None


def test_the_admin_link_fills_the_template() -> None:
    headers = {"pgq_trace": {"traceparent": "00-" + "ab" * 16 + "-" + "cd" * 8 + "-01"}}
    assert carriers.trace_url("https://j/trace/{trace_id}", headers) == (
        "ab" * 16,
        "https://j/trace/" + "ab" * 16,
    )
    assert carriers.trace_url(None, headers) == ("ab" * 16, "")
    assert carriers.trace_url("https://j/{trace_id}", {"a": 1}) == ("", "")


def test_the_sqs_trace_header_is_the_recorded_one_else_the_creation_context() -> None:
    assert carriers.xray_header({"pgq_sqs_trace_header": "Root=whatever"}) == "Root=whatever"
    traceparent = carriers.xray_to_traceparent(XRAY)
    assert carriers.xray_header({"pgq_trace": {"traceparent": traceparent}}) == XRAY
    assert carriers.xray_header({}) is None


def test_the_observability_page_lists_every_span_attribute_and_metric() -> None:
    page = (ROOT / "docs" / "observability.md").read_text()
    source = (ROOT / "pgq_django" / "telemetry" / "__init__.py").read_text()
    attributes = set(re.findall(r'"((?:messaging|error)\.[a-z_.]+)"', source))
    assert {"messaging.system", "messaging.process.duration"} <= attributes
    for name in attributes:
        assert f"`{name}`" in page, name
    for span in ("send", "receive", "process", "ack", "nack", "dead_letter", "archive"):
        assert f"| `{span}` |" in page, span
    assert telemetry.SYSTEM in page


WITHOUT_API = """
import json, logging, sys
sys.modules["opentelemetry"] = None  # as if the otel extra were not installed
import django
from django.conf import settings
settings.configure(INSTALLED_APPS=["pgq_django"], USE_TZ=True)
django.setup()
import pgq_django.api.messages, pgq_django.worker.executor, pgq_django.worker.batch
from pgq_django import telemetry
assert not telemetry.API
seen = []
send = telemetry.traced_send(lambda name, bodies, size, opts, deadline: seen.append(opts) or [7])
assert send("q", ["1"], 1, {"headers": "{}"}, None) == [7]
with telemetry.continuing("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"):
    send("q", ["1"], 1, {"headers": '{"a":1}'}, None)
assert seen[0] == {"headers": "{}"}, seen
assert json.loads(seen[1]["headers"])["pgq_trace"]["traceparent"].startswith("00-0af7"), seen
assert telemetry.traced_receive(lambda q: [1])("q") == [1]
assert telemetry.traced_settle("ack")(lambda q, ref: True)("q", 1) is True
telemetry.record_failure(ValueError("x"))
telemetry.settled_as("dead")
logger = logging.getLogger("pgq_django.worker")
assert logger.filters == [], logger.filters
print("ok")
"""


def test_without_the_api_every_hook_passes_straight_through() -> None:
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_API], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("ok")
