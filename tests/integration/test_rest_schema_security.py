"""The OpenAPI schema describes how to authenticate, and generating it says nothing alarming.

pgq_django serves DRF's basic and token authentication through hardened subclasses; the
schema generator knows DRF's classes only, so without extensions of our own every view's
schema logged "could not resolve authenticator" and the schema offered no way to log in.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.test import override_settings
from rest_framework.test import APIClient

pytestmark = pytest.mark.django_db


def test_fetching_the_schema_warns_of_nothing_and_lists_the_security_schemes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    capsys.readouterr()
    with override_settings(PGQ={"PUBLIC_API_SCHEMA": True}):
        answer = APIClient().get("/v1/schema?format=json")
    assert answer.status_code == 200
    logged = capsys.readouterr()
    assert "Warning" not in logged.err and "could not resolve" not in logged.err, logged.err
    schema: dict[str, Any] = answer.json()
    schemes = schema["components"]["securitySchemes"]
    assert schemes["basicAuth"] == {"type": "http", "scheme": "basic"}
    assert schemes["tokenAuth"]["type"] == "apiKey" and schemes["tokenAuth"]["in"] == "header"
    assert schemes["cookieAuth"]["in"] == "cookie"
    consume = schema["paths"]["/v1/queues/{queue}/messages"]["get"]
    assert {"basicAuth": []} in consume["security"]
    assert {"tokenAuth": []} in consume["security"]
