"""Input crafted to break the REST API, over real HTTP: each answers a JSON 4xx, never a 500,
and changes nothing."""

from __future__ import annotations

from typing import Any

import pytest

import pgq_django as pgq
from pgq_django.models import Binding

JSON = {"Content-Type": "application/json"}


@pytest.fixture
def q(admin_api):
    made = admin_api.post("/v1/queues", json={"id": "q_hostile"})
    assert made.status_code == 201, made.text
    pgq.send("q_hostile", "kept")
    return "q_hostile"


def assert_error(response: Any, status: int, code: str | None = None) -> None:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message", "details"}
    if code is not None:
        assert body["error"]["code"] == code, body


def assert_unchanged(queue: str = "q_hostile") -> None:
    m = pgq.metrics(queue)
    assert (m.queue_length, m.total_messages, m.in_flight) == (1, 1, 0)


@pytest.mark.parametrize("depth", [1_000, 5_000, 100_000])
def test_json_nested_too_deep_answers_400(admin_api, q, depth):
    deep = '{"body": ' + "[" * depth + "]" * depth + "}"
    response = admin_api.post(f"/v1/queues/{q}/messages", data=deep, headers=JSON)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["code"] in ("malformed_request", "invalid_message")
    assert_unchanged()


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("get", "/v1/queues/q%00x"),
        ("put", "/v1/queues/q%00x/purge"),
        ("get", "/v1/queues/q%00x/stats"),
        ("get", "/v1/queues/q%00x/messages"),
        ("post", "/v1/queues/q%00x/messages"),
        ("put", "/v1/queues/q%00x/messages/1/ack"),
        ("get", "/v1/topics/t%00x"),
        ("post", "/v1/topics/t%00x/messages"),
        ("get", "/v1/subscriptions/s%00x"),
        ("delete", "/v1/subscriptions/s%00x"),
    ],
)
def test_a_nul_in_a_name_in_the_path_answers_4xx(admin_api, q, method, path):
    response = getattr(admin_api, method)(path, json={"body": 1})
    assert 400 <= response.status_code < 500, response.text
    assert_error(response, response.status_code)
    assert_unchanged()


def test_a_nul_in_a_subscription_queue_or_a_dead_letter_queue_answers_400(admin_api, q):
    pgq.create_exchange("x_hostile")
    sub = {"id": "s_hostile", "topic_id": "x_hostile", "queue_id": "q\x00x"}
    assert_error(admin_api.post("/v1/subscriptions", json=sub), 400, "invalid_name")
    sub = {"id": "s_hostile", "topic_id": "x\x00y", "queue_id": q}
    assert_error(admin_api.post("/v1/subscriptions", json=sub), 400, "invalid_name")
    made = admin_api.post("/v1/queues", json={"id": "q_dlq", "dead_letter_queue": "d\x00l"})
    assert_error(made, 400, "invalid_name")
    changed = admin_api.put(f"/v1/queues/{q}", json={"dead_letter_queue": "d\x00l"})
    assert_error(changed, 400, "invalid_name")
    assert not Binding.objects.exists()
    assert [x.name for x in pgq.list_queues()] == [q]
    assert pgq.get_queue(q).dead_letter_queue is None
    assert_unchanged()


# A superscript two is a digit to str.isdigit() that int() refuses; an Arabic-Indic one and
# a fullwidth one are digits int() reads as 1: numbers are ASCII, so each is refused.
NOT_ASCII_DIGITS = ["\u00b2", "\u0661", "\uff11", "1\u00b9"]


@pytest.mark.parametrize("digits", NOT_ASCII_DIGITS)
def test_non_ascii_digits_are_not_message_ids(admin_api, q, digits):
    for path in (f"/v1/queues/{q}/messages/{digits}/ack", f"/v1/queues/{q}/messages/{digits}/nack"):
        assert_error(admin_api.put(path, json={}), 400, "invalid_argument")
    acked = admin_api.put(f"/v1/queues/{q}/messages/ack", json={"ids": [digits]})
    assert_error(acked, 400, "invalid_argument")
    assert pgq.metrics(q).queue_length == 1


def test_an_arabic_indic_one_does_not_ack_message_one(admin_api, q):
    """The Arabic-Indic spelling of a message's id once acked it; now it is refused."""
    target = pgq.send(q, "target")
    arabic = "".join(chr(0x0660 + int(d)) for d in str(target))
    assert_error(admin_api.put(f"/v1/queues/{q}/messages/{arabic}/ack"), 400, "invalid_argument")
    assert pgq.read_by_id(q, target) is not None


@pytest.mark.parametrize("digits", NOT_ASCII_DIGITS)
@pytest.mark.parametrize("param", ["limit", "offset"])
def test_non_ascii_digits_are_not_limits_or_offsets(admin_api, q, digits, param):
    for path in ("/v1/queues", "/v1/topics", "/v1/subscriptions"):
        assert_error(admin_api.get(f"{path}?{param}={digits}"), 400, "invalid_argument")
    if param == "limit":
        consumed = admin_api.get(f"/v1/queues/{q}/messages?limit={digits}")
        assert_error(consumed, 400, "invalid_argument")
    assert_unchanged()


@pytest.mark.parametrize("digits", NOT_ASCII_DIGITS)
def test_non_ascii_digits_are_not_subscription_ids(admin_api, q, digits):
    binding = pgq.bind_queue(q, pgq.create_exchange("x_digits"))
    assert_error(admin_api.get(f"/v1/subscriptions/{digits}"), 404, "subscription_not_found")
    assert_error(admin_api.delete(f"/v1/subscriptions/{digits}"), 404)
    assert Binding.objects.filter(pk=binding.pk).exists()


@pytest.mark.parametrize("username", ["ad\x00min", "\x00", "x" * 2_000])
def test_a_nul_or_an_overlong_basic_auth_username_answers_401(client_for, q, username):
    session = client_for(None)
    session.auth = (username, "whatever")
    response = session.post(f"/v1/queues/{q}/messages", json={"body": "intruder"})
    assert_error(response, 401, "authentication_failed")
    assert_unchanged()
