"""The one table of queue settings (:mod:`pgq_django.api.queue_settings`): each setting's
check at its bounds, the JSON Schema the REST API publishes from it, and its default."""

from __future__ import annotations

import pytest
from django.test import override_settings

from pgq_django.api.queue_settings import QUEUE_SETTINGS, QueueSetting, queue_setting_defaults
from pgq_django.exceptions import InvalidArgument

NUMERIC = [s for s in QUEUE_SETTINGS.values() if s.kind in ("seconds", "integer")]


def _refused(setting: QueueSetting, value) -> InvalidArgument:
    with pytest.raises(InvalidArgument) as caught:
        setting.check(value)
    assert caught.value.details == {"field": setting.name}
    return caught.value


@pytest.mark.parametrize("setting", NUMERIC, ids=lambda s: s.name)
def test_each_number_is_accepted_at_its_bounds_and_refused_just_outside(setting) -> None:
    low = setting.minimum or 0
    high = setting.maximum
    assert setting.check(low) == low
    assert setting.check(high) == high
    step = 1 if setting.kind == "integer" else 0.5
    _refused(setting, low - step)
    _refused(setting, high + step)


@pytest.mark.parametrize("setting", NUMERIC, ids=lambda s: s.name)
def test_the_published_schema_states_the_bounds_the_check_enforces(setting) -> None:
    schema = setting.json_schema()
    assert schema["type"] == ("integer" if setting.kind == "integer" else "number")
    assert (schema["minimum"], schema["maximum"]) == (setting.minimum or 0, setting.maximum)
    assert schema.get("nullable", False) is setting.nullable
    assert schema["description"] == setting.doc


@pytest.mark.parametrize("value", [1, 0, "true", None])
def test_flags_take_only_true_or_false(value) -> None:
    error = _refused(QUEUE_SETTINGS["archive_on_ack"], value)
    assert error.message == f"archive_on_ack must be True or False, not {value!r}."


def test_a_choice_is_one_of_its_listed_values_and_the_schema_lists_them() -> None:
    backoff = QUEUE_SETTINGS["backoff"]
    assert backoff.check("linear") == "linear"
    error = _refused(backoff, "LINEAR")
    assert error.message == "backoff must be one of none, linear, exponential, not 'LINEAR'."
    assert backoff.json_schema()["enum"] == ["none", "linear", "exponential"]


@pytest.mark.parametrize(
    "value", [0, -1, 0.0, 5e-324, 0.0009, float("inf"), float("nan"), True, "5", 2e6]
)
def test_a_rate_limit_is_a_positive_number_of_messages_per_second(value: object) -> None:
    setting = QUEUE_SETTINGS["rate_limit"]
    assert setting.check(None) is None
    assert setting.check(20) == 20.0 and setting.check(0.5) == 0.5
    assert setting.check(0.001) == 0.001 and setting.check(1_000_000) == 1_000_000.0
    assert "messages per second from 0.001" in _refused(setting, value).message
    schema = setting.json_schema()
    assert (schema["type"], schema["minimum"], schema["maximum"]) == ("number", 0.001, 1e6)


def test_a_concurrency_limit_is_a_whole_number_from_one() -> None:
    setting = QUEUE_SETTINGS["concurrency_limit"]
    assert setting.check(None) is None
    assert setting.check(3) == 3
    for value in (0, -2, 1.5, "3"):
        _refused(setting, value)


@pytest.mark.parametrize("name", ["dead_letter_queue", "callback", "owner"])
def test_settings_naming_other_rows_are_not_checked_here(name: str) -> None:
    with pytest.raises(TypeError, match=r"is checked by \.queues"):
        QUEUE_SETTINGS[name].check("anything")


def test_defaults_follow_the_project_settings_and_tags_are_never_shared() -> None:
    with override_settings(PGQ={"DEFAULT_VISIBILITY_TIMEOUT": 90, "DEFAULT_MAX_RETRIES": 3}):
        defaults = queue_setting_defaults()
        assert (defaults["visibility_timeout"], defaults["max_retries"]) == (90, 3)
    first, second = queue_setting_defaults()["tags"], queue_setting_defaults()["tags"]
    assert first == {} and first is not second
