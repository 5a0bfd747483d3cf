"""The SQS endpoint's answer when the database cannot be reached: ServiceUnavailable (503,
which the AWS SDKs retry by themselves), whether the API raised DatabaseUnavailable or the
key's look-up met the database's own error first; not InternalError with a traceback."""

from __future__ import annotations

import json

import psycopg
from django.db import OperationalError

from pgq_django.exceptions import DatabaseUnavailable
from pgq_django.sqs.protocol import refusal


def _refused_when_connecting() -> OperationalError:
    """Django's error for a connection that could not be made, as the key's look-up meets it."""
    try:
        try:
            raise psycopg.OperationalError("connection failed: Connection refused")
        except psycopg.OperationalError as cause:
            raise OperationalError(*cause.args) from cause
    except OperationalError as error:
        return error


def test_the_api_s_database_unavailable_answers_service_unavailable() -> None:
    answer = refusal(DatabaseUnavailable("down"), "req-1")
    assert answer.status == 503
    assert json.loads(answer.body)["__type"].endswith("#ServiceUnavailable")


def test_a_look_up_that_cannot_connect_answers_service_unavailable(caplog) -> None:
    answer = refusal(_refused_when_connecting(), "req-2")
    assert answer.status == 503
    assert json.loads(answer.body)["__type"].endswith("#ServiceUnavailable")
    xml = refusal(_refused_when_connecting(), "req-3", xml=True)
    assert xml.status == 503 and b"<Code>ServiceUnavailable</Code>" in xml.body
    assert "sqs_internal_error" not in caplog.text  # no traceback per request


def test_an_unexpected_error_is_still_an_internal_error() -> None:
    assert refusal(ValueError("bug"), "req-4").status == 500
