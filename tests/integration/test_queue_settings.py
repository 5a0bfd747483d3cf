"""One table of queue settings, read by the API, the admin form and the REST serializers.

Each test checks that a surface takes its rule from ``pgq_django.QUEUE_SETTINGS`` rather than
declaring a bound of its own, and the model (the database's last word) agrees with it.
"""

from __future__ import annotations

import pytest
from django.contrib.admin.sites import site
from django.contrib.auth.models import User
from django.core.validators import MinValueValidator
from django.test import RequestFactory, override_settings
from rest_framework.test import APIClient

import pgq_django as pgq
from pgq_django.conf import DEFAULTS
from pgq_django.models import Queue
from pgq_django.rest.serializers import QUEUE_FIELDS, QueueCreateIn
from tests.conftest import ROOT

BOUNDED = [s for s in pgq.QUEUE_SETTINGS.values() if s.kind in ("seconds", "integer")]


def test_every_model_setting_has_the_tables_default_and_lower_bound():
    for setting in pgq.QUEUE_SETTINGS.values():
        field = Queue._meta.get_field(setting.name)
        default = DEFAULTS[setting.default_setting] if setting.default_setting else setting.default
        if setting.kind not in ("queue", "user", "unenforced"):
            model_default = field.get_default()
            assert model_default == default, setting.name
        assert field.null == (setting.nullable and setting.kind != "callback"), setting.name
        lowest = [x.limit_value for x in field.validators if isinstance(x, MinValueValidator)]
        if setting.kind == "seconds":
            assert lowest == [setting.minimum], setting.name


@pytest.mark.parametrize("setting", BOUNDED, ids=lambda s: s.name)
def test_the_api_accepts_each_bound_and_refuses_one_step_beyond(db, setting):
    step = 1 if setting.kind == "integer" else 0.001
    low, high = setting.minimum or 0, setting.maximum
    check = pgq.validate_queue_settings
    assert check(**{setting.name: low}) == {setting.name: low}
    assert check(**{setting.name: high}) == {setting.name: high}
    for beyond in (low - step, high + step):
        with pytest.raises(pgq.InvalidArgument) as caught:
            check(**{setting.name: beyond})
        assert caught.value.details["field"] == setting.name


def test_create_queue_takes_its_defaults_from_the_table(db, queue_name):
    with override_settings(PGQ={"DEFAULT_RETENTION": 600}):
        queue = pgq.create_queue(queue_name)
    for setting in pgq.QUEUE_SETTINGS.values():
        if setting.kind in ("seconds", "integer", "flag", "choice", "tags", "callback"):
            expected = 600 if setting.name == "retention" else setting.default_value()
            assert getattr(queue, setting.name) == expected, setting.name


def test_an_unknown_setting_is_refused_by_name(db):
    with pytest.raises(pgq.InvalidArgument, match="'colour' is not a queue setting"):
        pgq.validate_queue_settings(colour="red")


def test_the_admin_form_explains_each_setting_with_the_tables_words(db):
    request = RequestFactory().get("/admin/")
    request.user = User.objects.create_superuser("root", "root@example.com", "pw")
    form = site.get_model_admin(Queue).get_form(request)()
    shown = [name for name in pgq.QUEUE_SETTINGS if name in form.fields]
    assert {"visibility_timeout", "retention", "max_retries", "callback"} <= set(shown)
    for name in shown:
        assert form.fields[name].help_text == pgq.QUEUE_SETTINGS[name].doc


def test_the_admin_form_refuses_a_value_past_the_tables_bound(db):
    request = RequestFactory().get("/admin/")
    request.user = User.objects.create_superuser("root", "root@example.com", "pw")
    form_class = site.get_model_admin(Queue).get_form(request)
    too_many = pgq.QUEUE_SETTINGS["max_retries"].maximum + 1
    form = form_class(
        data={
            "name": "bounded_q",
            "visibility_timeout": 30,
            "delivery_delay": 0,
            "retention": 3600,
            "max_retries": too_many,
            "retry_delay": 30,
            "backoff": "exponential",
            "backoff_cap": 3600,
            "max_message_size": 1024,
            "receive_wait_time": 0,
        }
    )
    assert not form.is_valid()
    assert "max_retries" in form.errors


def test_the_rest_request_fields_and_openapi_bounds_come_from_the_table(db):
    declared = set(QueueCreateIn().fields) - {"id"}
    assert declared == set(QUEUE_FIELDS)
    client = APIClient()
    client.force_authenticate(User(username="reader"))  # the schema needs a login by default
    answer = client.get("/v1/schema?format=json")
    assert answer.status_code == 200, answer.content
    properties = answer.json()["components"]["schemas"]["QueueCreateInRequest"]["properties"]
    for rest_name, name in QUEUE_FIELDS.items():
        setting = pgq.QUEUE_SETTINGS[name]
        assert properties[rest_name]["description"] == setting.doc, rest_name
        if setting.kind in ("seconds", "integer", "rate"):
            assert properties[rest_name]["minimum"] == (setting.minimum or 0), rest_name
            assert properties[rest_name]["maximum"] == setting.maximum, rest_name


def _docs_row(setting: pgq.QueueSetting) -> str:
    """The row docs/reference/api.md shows for a setting."""

    def number(x: float) -> str:
        return str(int(x)) if float(x).is_integer() else str(x)

    bounds = ""
    if setting.kind in ("seconds", "integer", "rate"):
        bounds = f"{number(setting.minimum or 0)} to {number(setting.maximum)}"
    elif setting.kind == "choice":
        bounds = " / ".join(f"`{c}`" for c in setting.choices)
    if setting.nullable and setting.kind != "unenforced":
        bounds = f"{bounds}, or None" if bounds else "or None"
    if setting.default_setting:
        default = f'`PGQ["{setting.default_setting}"]`'
    elif setting.default is None:
        default = "None"
    elif isinstance(setting.default, str):
        default = f'`"{setting.default}"`'
    elif isinstance(setting.default, float):
        default = f"`{number(setting.default)}`"
    else:
        default = f"`{setting.default!r}`"
    return f"| `{setting.name}` | {setting.kind} | {bounds} | {default} | {setting.doc} |"


def test_the_reference_page_lists_every_setting_as_the_table_has_it():
    page = (ROOT / "docs" / "reference" / "api.md").read_text()
    rows = [line for line in page.splitlines() if line.startswith("| `")]
    expected = [_docs_row(setting) for setting in pgq.QUEUE_SETTINGS.values()]
    assert [row for row in rows if row in expected] == expected


def test_queue_defaults_come_from_settings(db, queue_name):
    with override_settings(PGQ={"DEFAULT_VISIBILITY_TIMEOUT": 12, "DEFAULT_MAX_RETRIES": 2}):
        q = pgq.create_queue(queue_name)
    assert (q.visibility_timeout, q.max_retries) == (12, 2)
