"""settings.PGQ: defaults, overrides, and system checks that catch mistakes early."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

import pgq_django
from pgq_django.checks import check_settings
from pgq_django.conf import DEFAULTS, REMOVED_SETTINGS, PgqSettings, settings


def test_defaults_apply_when_pgq_is_not_set():
    with override_settings(PGQ=None):
        assert DEFAULTS["NOTIFY_CHANNEL"] == settings.NOTIFY_CHANNEL
        assert settings.DEFAULT_VISIBILITY_TIMEOUT == 30


def test_user_values_override_defaults_and_reload_on_change():
    with override_settings(PGQ={"DEFAULT_VISIBILITY_TIMEOUT": 5}):
        assert settings.DEFAULT_VISIBILITY_TIMEOUT == 5
    with override_settings(PGQ={"DEFAULT_VISIBILITY_TIMEOUT": 9}):
        assert settings.DEFAULT_VISIBILITY_TIMEOUT == 9


def test_valid_settings_pass_the_checks():
    assert check_settings() == []


def test_unknown_keys_bad_values_and_missing_databases_are_reported():
    with override_settings(PGQ={"VISIBILITY": 3}):
        assert [e.id for e in check_settings()] == ["pgq_django.E002"]
    with override_settings(PGQ={"PARTITION_SIZE": -1}):
        assert [e.id for e in check_settings()] == ["pgq_django.E005"]
    with override_settings(PGQ={"DATABASE": "nowhere"}):
        assert [e.id for e in check_settings()] == ["pgq_django.E003"]
    for bad in ("no", 0, None):
        with override_settings(PGQ={"SERVER_FUNCTIONS": bad}):
            errors = check_settings()
        assert [e.id for e in errors] == ["pgq_django.E008"]
        assert "SERVER_FUNCTIONS" in errors[0].msg
    with override_settings(PGQ=["not", "a", "dict"]):
        assert [e.id for e in check_settings()] == ["pgq_django.E001"]


def test_a_mistyped_key_is_reported_with_the_key_it_was_meant_to_be():
    with override_settings(PGQ={"DEFAULT_VISIBILTY_TIMEOUT": 5}):
        [error] = check_settings()
        # The typo changes nothing: the default stays in force.
        assert DEFAULTS["DEFAULT_VISIBILITY_TIMEOUT"] == settings.DEFAULT_VISIBILITY_TIMEOUT
    assert error.id == "pgq_django.E002"
    assert "Did you mean 'DEFAULT_VISIBILITY_TIMEOUT'?" in error.msg
    # Nothing close: no guess, and a key that is not even a string is reported as it is.
    for far in ("ZZZ", 7):
        with override_settings(PGQ={far: 1}):
            [error] = check_settings()
        assert error.id == "pgq_django.E002" and "Did you mean" not in error.msg
    with pytest.raises(AttributeError, match=r"Did you mean 'MAX_WAIT_SECONDS'\?"):
        settings.MAX_WAIT_SECOND  # noqa: B018 (reading is the point)


def test_a_removed_key_is_a_clear_error_naming_what_to_do_instead():
    with override_settings(PGQ={"REST_ENABLED": False}):
        errors = check_settings()
        assert [e.id for e in errors] == ["pgq_django.E006"]
        assert "pgq_django.rest.urls" in errors[0].msg
        with pytest.raises(ImproperlyConfigured, match=r"REST_ENABLED.*has been removed"):
            settings.NOTIFY_CHANNEL  # noqa: B018 (reading is the point)
    # Once the key is gone the settings reload and read normally again.
    assert DEFAULTS["NOTIFY_CHANNEL"] == settings.NOTIFY_CHANNEL


def test_the_settings_object_types_every_key_and_only_those():
    assert set(PgqSettings.__annotations__) == set(DEFAULTS)


def test_every_setting_is_read_somewhere_in_the_package():
    """A key nothing reads is a switch that does nothing: remove it (REMOVED_SETTINGS)."""
    package = Path(pgq_django.__file__).parent
    source = "\n".join(
        p.read_text()
        for p in package.rglob("*.py")
        if p.name != "conf.py" and "migrations" not in p.parts
    )
    unread = [
        key for key in DEFAULTS if f"settings.{key}" not in source and f'"{key}"' not in source
    ]
    assert unread == []
    assert not set(DEFAULTS) & set(REMOVED_SETTINGS)
