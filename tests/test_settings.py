"""settings.PGQ: defaults, overrides, and system checks that catch mistakes early."""

from __future__ import annotations

from django.test import override_settings

from pgq_django.checks import check_settings
from pgq_django.conf import DEFAULTS, settings


def test_defaults_apply_when_pgq_is_not_set():
    with override_settings(PGQ=None):
        assert DEFAULTS["NOTIFY_CHANNEL"] == settings.NOTIFY_CHANNEL
        assert settings.DEFAULT_VISIBILITY_TIMEOUT == 30


def test_user_values_override_defaults_and_reload_on_change():
    with override_settings(PGQ={"DEFAULT_VISIBILITY_TIMEOUT": 5}):
        assert settings.DEFAULT_VISIBILITY_TIMEOUT == 5
    with override_settings(PGQ={"DEFAULT_VISIBILITY_TIMEOUT": 9}):
        assert settings.DEFAULT_VISIBILITY_TIMEOUT == 9


def test_queue_defaults_come_from_settings(db, queue_name):
    import pgq_django as pgq

    with override_settings(PGQ={"DEFAULT_VISIBILITY_TIMEOUT": 12, "DEFAULT_MAX_RETRIES": 2}):
        q = pgq.create_queue(queue_name)
    assert (q.visibility_timeout, q.max_retries) == (12, 2)


def test_valid_settings_pass_the_checks():
    assert check_settings() == []


def test_unknown_keys_bad_values_and_missing_databases_are_reported():
    with override_settings(PGQ={"VISIBILITY": 3}):
        assert [e.id for e in check_settings()] == ["pgq_django.E002"]
    with override_settings(PGQ={"PARTITION_SIZE": -1}):
        assert [e.id for e in check_settings()] == ["pgq_django.E005"]
    with override_settings(PGQ={"DATABASE": "nowhere"}):
        assert [e.id for e in check_settings()] == ["pgq_django.E003"]
    with override_settings(PGQ=["not", "a", "dict"]):
        assert [e.id for e in check_settings()] == ["pgq_django.E001"]
