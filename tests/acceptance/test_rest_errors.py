"""Every kind of bad input answers the JSON error shape with a 4xx, over real HTTP, and
changes nothing."""

from __future__ import annotations

import pytest

import pgq_django as pgq

JSON = {"Content-Type": "application/json"}


@pytest.fixture
def q(admin_api):
    made = admin_api.post("/v1/queues", json={"id": "q_errors"})
    assert made.status_code == 201, made.text
    return "q_errors"


def assert_error(response, status, code=None):
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"code", "message", "details"}
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    if code is not None:
        assert body["error"]["code"] == code, body


def assert_unchanged(queue="q_errors"):
    assert pgq.metrics(queue).total_messages == 0
    assert pgq.metrics(queue).queue_length == 0


@pytest.mark.parametrize(
    ("data", "code"),
    [
        ('{"body": "x"', "malformed_request"),
        ("not json at all", "malformed_request"),
        ('{"body": NaN}', "malformed_request"),
        (b"\xff\xfe{}", "malformed_request"),
        ("[1, 2]", "invalid_argument"),
        ('"just a string"', "invalid_argument"),
        ("{}", "invalid_argument"),
        ('{"body": "x", "colour": "red"}', "invalid_argument"),
        ('{"body": "x", "priority": "5"}', "invalid_argument"),
        ('{"body": "x", "priority": 1.5}', "invalid_argument"),
        ('{"body": "x", "priority": true}', "invalid_argument"),
        ('{"body": "x", "priority": 99999999999}', "invalid_argument"),
        ('{"body": "x", "delay": -1}', "invalid_argument"),
        ('{"body": "x", "delay": 1e300}', "invalid_argument"),
        ('{"body": "x", "attributes": ["a"]}', "invalid_argument"),
        ('{"body": "x", "label": 5}', "invalid_argument"),
        ('{"body": "x\\u0000y"}', "invalid_message"),
        ('{"messages": "nope"}', "invalid_argument"),
        ('{"messages": [{"body": 1}, {"nobody": 2}]}', "invalid_argument"),
        ('{"body": "x", "headers": {"content_type": "application/xml"}}', "invalid_message"),
    ],
)
def test_a_bad_send_answers_400_and_sends_nothing(admin_api, q, data, code):
    response = admin_api.post(f"/v1/queues/{q}/messages", data=data, headers=JSON)
    assert_error(response, 400, code)
    assert_unchanged()


def test_a_body_over_the_limit_answers_413(admin_api, q, settings):
    big = '{"body": "' + "x" * (9 * 1024 * 1024) + '"}'
    response = admin_api.post(f"/v1/queues/{q}/messages", data=big, headers=JSON)
    assert_error(response, 413, "request_too_large")
    assert_unchanged()


def test_a_message_over_the_queue_limit_answers_413(admin_api):
    admin_api.post("/v1/queues", json={"id": "q_small", "max_message_size": 100})
    response = admin_api.post("/v1/queues/q_small/messages", json={"body": "y" * 200})
    assert_error(response, 413, "message_too_large")
    assert_unchanged("q_small")


def test_a_batch_over_the_limit_is_refused_whole(admin_api, q):
    response = admin_api.post(
        f"/v1/queues/{q}/messages", json={"messages": [{"body": i} for i in range(1001)]}
    )
    assert_error(response, 400, "invalid_argument")
    assert_unchanged()


def test_a_batch_with_one_bad_item_sends_nothing(admin_api, q):
    response = admin_api.post(
        f"/v1/queues/{q}/messages",
        json={"messages": [{"body": 1}, {"body": 2, "priority": 3}, {"body": 3, "delay": -5}]},
    )
    assert_error(response, 400)
    assert_unchanged()


def test_unsupported_media_type_answers_415(admin_api, q):
    response = admin_api.post(
        f"/v1/queues/{q}/messages", data="body=x", headers={"Content-Type": "text/plain"}
    )
    assert_error(response, 415, "unsupported_media_type")
    assert_unchanged()


@pytest.mark.parametrize(
    "query",
    [
        "limit=0",
        "limit=-1",
        "limit=abc",
        "limit=1001",
        "limit=99999999999999999999",
        "limit=1&limit=2",
        "wait_seconds=-1",
        "wait_seconds=21",
        "wait_seconds=nan",
        "wait_seconds=inf",
        "visibility_timeout_seconds=-3",
        "visibility_timeout_seconds=1e309",
        "colour=red",
    ],
)
def test_bad_consume_parameters_answer_400_and_lease_nothing(admin_api, q, query):
    pgq.send(q, "keep me")
    response = admin_api.get(f"/v1/queues/{q}/messages?{query}")
    assert_error(response, 400, "invalid_argument")
    [message] = pgq.read(q)
    assert message.read_ct == 1  # nobody leased it before


def test_unknown_queue_and_message_answer_404(admin_api, q):
    assert_error(admin_api.get("/v1/queues/nope"), 404, "queue_not_found")
    assert_error(admin_api.get("/v1/queues/nope/messages"), 404, "queue_not_found")
    assert_error(admin_api.post("/v1/queues/nope/messages", json={"body": 1}), 404)
    assert_error(admin_api.put(f"/v1/queues/{q}/messages/12345/ack"), 404, "message_not_found")
    assert_error(
        admin_api.put(f"/v1/queues/{q}/messages/12345/nack", json={}), 404, "message_not_found"
    )
    assert_error(admin_api.get("/v1/topics/nope"), 404, "exchange_not_found")
    assert_error(admin_api.get("/v1/subscriptions/nope"), 404, "subscription_not_found")
    assert_error(admin_api.get("/v1/nothing-here"), 404)


@pytest.mark.parametrize("message", ["abc", "-1", "0", "1:x", "99999999999999999999"])
def test_a_malformed_message_id_answers_400(admin_api, q, message):
    assert_error(admin_api.put(f"/v1/queues/{q}/messages/{message}/ack"), 400)


def test_bad_queue_settings_answer_400_and_create_nothing(admin_api):
    for body in (
        {"id": "bad name!"},
        {"id": "q_x", "ack_deadline_seconds": -1},
        {"id": "q_x", "ack_deadline_seconds": "30"},
        {"id": "q_x", "backoff": "sometimes"},
        {"id": "q_x", "fifo": "yes"},
        {"id": "q_x", "max_retries": -2},
        {"id": "q_x", "dead_letter_queue": "missing"},
        {"id": "q_x", "unknown": 1},
        {"ack_deadline_seconds": 30},
    ):
        response = admin_api.post("/v1/queues", json=body)
        assert response.status_code in (400, 404), (body, response.text)
        assert_error(response, response.status_code)
    assert pgq.list_queues() == []


def test_creating_an_existing_queue_answers_409(admin_api, q):
    assert_error(admin_api.post("/v1/queues", json={"id": q}), 409, "queue_already_exists")


def test_method_not_allowed_answers_405_in_the_error_shape(admin_api, q):
    assert_error(admin_api.patch(f"/v1/queues/{q}", json={}), 405, "method_not_allowed")
