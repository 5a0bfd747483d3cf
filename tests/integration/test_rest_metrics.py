"""/metrics, /v1/schema and /v1/docs access through the DRF test client: the bearer token,
an opened permission, a public schema."""

from __future__ import annotations

import re

import pytest
from django.test import override_settings
from rest_framework.test import APIClient

import pgq_django as pgq

pytestmark = pytest.mark.django_db


def test_the_metrics_token_admits_a_scraper_without_a_user(queue_name):
    pgq.create_queue(queue_name)
    pgq.send(queue_name, 1)
    client = APIClient()
    with override_settings(PGQ={"METRICS_TOKEN": "s3cret"}):
        assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 401
        ok = client.get("/metrics", HTTP_AUTHORIZATION="Bearer s3cret")
    assert ok.status_code == 200
    assert f'pgq_queue_length{{queue="{queue_name}"}} 1.0' in ok.content.decode()


def test_metrics_can_be_opened_with_a_permission_setting(queue_name):
    pgq.create_queue(queue_name)
    with override_settings(PGQ={"METRICS_PERMISSION": "rest_framework.permissions.AllowAny"}):
        assert APIClient().get("/metrics").status_code == 200
    assert APIClient().get("/metrics").status_code == 401


def test_the_schema_and_swagger_ui_are_served_without_a_cdn():
    with override_settings(PGQ={"PUBLIC_API_SCHEMA": True}):
        schema = APIClient().get("/v1/schema?format=json")
        page = APIClient().get("/v1/docs").content.decode()
    assert schema.status_code == 200
    paths = schema.json()["paths"]
    assert "/v1/queues/{queue}/messages" in paths and "/metrics" not in paths
    assert "drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js" in page
    # Every asset the page loads comes from this server: no absolute or scheme-relative URL.
    # (A substring check for "cdn" failed when the page's random CSRF token spelled it.)
    assets = re.findall(r'(?:src|href)\s*=\s*["\']([^"\']+)', page)
    assert assets
    assert [url for url in assets if re.match(r"(?i)([a-z][a-z0-9+.-]*:|//)", url)] == []
    assert "unpkg.com" not in page and "jsdelivr" not in page


def test_the_schema_and_swagger_ui_are_refused_to_anonymous_callers_by_default():
    for path in ("/v1/schema", "/v1/docs"):
        refused = APIClient().get(path)
        assert refused.status_code == 401
        assert refused.json()["error"]["code"] == "not_authenticated"
