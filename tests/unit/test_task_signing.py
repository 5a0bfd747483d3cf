"""The enqueue signature of the django.tasks backend (:mod:`pgq_django.task_signing`): what
it covers, what breaks it, and key rotation. docs/threat-model.md states the signed text."""

from __future__ import annotations

import base64
import hashlib
import hmac
from typing import Any

import pytest
from django.core import signing
from django.test import override_settings

from pgq_django.task_signing import SIGNING_SALT, sign_call, signed_text, verified_call

CALL = {"task": "shop.tasks.ship", "args": [1, "a"], "kwargs": {"fast": True}, "backend": "default"}


def signed(call: dict[str, Any]) -> dict[str, Any]:
    return {**call, "signature": sign_call(call)}


def test_the_signed_text_is_sorted_compact_json_of_the_four_fields_only() -> None:
    call = {**CALL, "priority": 5, "signature": "ignored"}
    assert signed_text(call) == (
        '{"args":[1,"a"],"backend":"default","kwargs":{"fast":true},"task":"shop.tasks.ship"}'
    )


def test_whole_floats_are_signed_as_the_integers_postgresql_may_print() -> None:
    as_sent = {**CALL, "args": [2.0, 1e16, 0.5], "kwargs": {"n": {"deep": [3.0]}}}
    as_read = {**CALL, "args": [2, 10**16, 0.5], "kwargs": {"n": {"deep": [3]}}}
    assert signed_text(as_sent) == signed_text(as_read)
    assert verified_call({**as_read, "signature": sign_call(as_sent)}) is not None


def test_the_signature_is_hmac_sha256_under_secret_key_and_the_documented_salt() -> None:
    """Django's Signer keys its HMAC with SHA-256 of salt + "signer" + SECRET_KEY."""
    with override_settings(SECRET_KEY="k" * 50):
        key = hashlib.sha256((SIGNING_SALT + "signer" + "k" * 50).encode()).digest()
        mac = hmac.new(key, signed_text(CALL).encode(), hashlib.sha256).digest()
        assert sign_call(CALL) == base64.urlsafe_b64encode(mac).rstrip(b"=").decode()


def test_a_signed_call_verifies_to_exactly_its_four_fields() -> None:
    body = {**signed(CALL), "extra": "not part of the call"}
    assert verified_call(body) == CALL


@pytest.mark.parametrize(
    "change",
    [
        {"task": "os.system"},
        {"args": [1, "b"]},
        {"args": [1, "a", None]},
        {"kwargs": {"fast": False}},
        {"kwargs": {}},
        {"backend": "other"},
    ],
)
def test_any_change_to_a_signed_field_breaks_the_signature(change: dict[str, Any]) -> None:
    assert verified_call({**signed(CALL), **change}) is None


@pytest.mark.parametrize(
    "body",
    [
        None,
        "shop.tasks.ship",
        [CALL],
        {k: v for k, v in signed(CALL).items() if k != "signature"},
        {**signed(CALL), "signature": None},
        {**signed(CALL), "signature": ""},
        {**signed(CALL), "signature": "x" * 43},
        {**signed(CALL), "args": "1"},
        {**signed(CALL), "kwargs": [["fast", True]]},
        {**signed(CALL), "task": 5},
        {**signed(CALL), "backend": None},
    ],
)
def test_bodies_of_the_wrong_shape_or_unsigned_are_not_calls(body: Any) -> None:
    assert verified_call(body) is None


def test_a_signature_made_with_another_key_fails_until_that_key_is_a_fallback() -> None:
    with override_settings(SECRET_KEY="old-" + "k" * 46):
        body = signed(CALL)
    with override_settings(SECRET_KEY="new-" + "k" * 46, SECRET_KEY_FALLBACKS=[]):
        assert verified_call(body) is None
    with override_settings(SECRET_KEY="new-" + "k" * 46, SECRET_KEY_FALLBACKS=["old-" + "k" * 46]):
        assert verified_call(body) == CALL


def test_another_signed_value_of_the_project_cannot_pass_for_an_enqueue_signature() -> None:
    """The salt separates them: the same text signed with Django's default salt fails."""
    other = signing.Signer(algorithm="sha256").signature(signed_text(CALL))
    assert verified_call({**CALL, "signature": other}) is None
