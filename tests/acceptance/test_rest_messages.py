"""Our fields on top of psqlqueue's, over real HTTP: batches, receipts, long-polls, routing."""

from __future__ import annotations

import threading
import time

import pytest
import requests

import pgq_django as pgq
from tests.conftest import wait_until


@pytest.fixture
def q(admin_api):
    assert admin_api.post("/v1/queues", json={"id": "q_msgs"}).status_code == 201
    return "q_msgs"


def consume(api, queue, query=""):
    response = api.get(f"/v1/queues/{queue}/messages{query}")
    assert response.status_code == 200, response.text
    return response.json()["data"]


def test_a_batch_is_sent_in_order_with_each_items_own_options(admin_api, q):
    sent = admin_api.post(
        f"/v1/queues/{q}/messages",
        json={
            "messages": [
                {"body": {"n": 1}},
                {"body": {"n": 2}},
                {"body": {"n": 3}, "priority": -5, "headers": {"h": "v"}, "label": "urgent"},
                {"body": {"n": 4}, "delay": 3600},
            ]
        },
    )
    assert sent.status_code == 201, sent.text
    ids = sent.json()["ids"]
    assert ids == sorted(ids) and len(ids) == 4
    got = consume(admin_api, q, "?limit=10")
    assert [m["body"]["n"] for m in got] == [3, 1, 2]  # priority first; the delayed one waits
    urgent = got[0]
    assert (urgent["priority"], urgent["headers"], urgent["label"]) == (-5, {"h": "v"}, "urgent")
    assert urgent["receipt"] == f"{urgent['id']}:1"


def test_a_stale_receipt_is_refused_like_in_python(admin_api, q):
    pgq.send(q, "once")
    [first] = consume(admin_api, q, "?visibility_timeout_seconds=0")
    [second] = consume(admin_api, q)
    assert first["id"] == second["id"] and second["delivery_attempts"] == 2
    stale = admin_api.put(f"/v1/queues/{q}/messages/{first['receipt']}/ack")
    assert stale.status_code == 409, stale.text
    assert stale.json()["error"]["code"] == "stale_receipt"
    assert pgq.metrics(q).queue_length == 1
    assert admin_api.put(f"/v1/queues/{q}/messages/{second['receipt']}/ack").status_code == 204
    assert pgq.metrics(q).queue_length == 0


def test_batch_ack_answers_the_ids_it_acked(admin_api, q):
    pgq.send_batch(q, list(range(5)))
    got = consume(admin_api, q, "?limit=5")
    receipts = [m["receipt"] for m in got[:3]] + [got[3]["id"], 999_999_999]
    acked = admin_api.put(f"/v1/queues/{q}/messages/ack", json={"ids": receipts})
    assert acked.status_code == 200, acked.text
    assert sorted(acked.json()["acked"]) == sorted(m["id"] for m in got[:4])
    assert pgq.metrics(q).queue_length == 1


def test_nack_without_a_timeout_uses_the_queues_retry_delay(admin_api, q):
    admin_api.put(f"/v1/queues/{q}", json={"retry_delay": 0, "backoff": "none"})
    pgq.send(q, "retry me")
    [m] = consume(admin_api, q)
    assert admin_api.put(f"/v1/queues/{q}/messages/{m['receipt']}/nack", json={}).status_code == 204
    [again] = consume(admin_api, q)
    assert again["delivery_attempts"] == 2


def test_label_filter_and_dead_letter_queue(admin_api):
    admin_api.post("/v1/queues", json={"id": "q_dlq"})
    made = admin_api.post(
        "/v1/queues", json={"id": "q_work", "max_retries": 1, "dead_letter_queue": "q_dlq"}
    )
    assert made.status_code == 201, made.text
    assert made.json()["dead_letter_queue"] == "q_dlq"
    admin_api.post("/v1/queues/q_work/messages", json={"body": "a", "label": "x"})
    admin_api.post("/v1/queues/q_work/messages", json={"body": "b", "label": "y"})
    [m] = consume(admin_api, "q_work", "?label=y")
    assert m["body"] == "b"
    for _ in range(2):
        admin_api.put(
            f"/v1/queues/q_work/messages/{m['id']}/nack", json={"visibility_timeout_seconds": 0}
        )
        got = consume(admin_api, "q_work", "?label=y")
        if not got:
            break
        m = got[0]
    assert [d["body"] for d in consume(admin_api, "q_dlq")] == ["b"]


def test_a_long_poll_is_woken_by_a_send(admin_api, q, live_url):
    def waiting() -> int:
        return requests.get(f"{live_url}/_test/waiters", timeout=30).json()["waiters"]

    def send_later():
        wait_until(lambda: waiting() >= 1, what="the long poll to wait")
        pgq.send(q, "wake")
        from django.db import connections

        connections.close_all()

    sender = threading.Thread(target=send_later)
    started = time.monotonic()
    sender.start()
    got = consume(admin_api, q, "?wait_seconds=15")
    sender.join()
    assert [m["body"] for m in got] == ["wake"]
    assert time.monotonic() - started < 14  # woken, not timed out


def test_a_long_poll_with_nothing_to_read_answers_empty(admin_api, q):
    assert consume(admin_api, q, "?wait_seconds=0.3") == []


@pytest.mark.parametrize(
    ("kind", "bindings", "publish", "expected"),
    [
        ("fanout", [("q_a", None), ("q_b", None)], {}, {"q_a", "q_b"}),
        ("direct", [("q_a", "red"), ("q_b", "blue")], {"routing_key": "red"}, {"q_a"}),
        (
            "topic",
            [("q_a", "order.*"), ("q_b", "#.paid")],
            {"routing_key": "order.paid"},
            {"q_a", "q_b"},
        ),
        ("headers", [("q_a", None)], {"headers": {"kind": "x"}}, {"q_a"}),
    ],
)
def test_every_exchange_type_routes_through_rest(admin_api, kind, bindings, publish, expected):
    for name in ("q_a", "q_b"):
        admin_api.post("/v1/queues", json={"id": name})
    made = admin_api.post("/v1/topics", json={"id": "x_t", "type": kind})
    assert made.status_code == 201 and made.json()["type"] == kind
    for n, (queue, key) in enumerate(bindings):
        sub = {"id": f"s{n}", "topic_id": "x_t", "queue_id": queue, "routing_key": key}
        if kind == "headers":
            sub["message_filters"] = {"kind": ["x"]}
        assert admin_api.post("/v1/subscriptions", json=sub).status_code == 201
    published = admin_api.post("/v1/topics/x_t/messages", json={"body": "hi", **publish})
    assert published.status_code == 201, published.text
    assert len(published.json()["ids"]) == len(expected)
    assert {n for n in ("q_a", "q_b") if pgq.metrics(n).queue_length} == expected
    # A topic with subscriptions cannot be dropped until they are.
    assert admin_api.delete("/v1/topics/x_t").status_code == 409
    for n in range(len(bindings)):
        assert admin_api.delete(f"/v1/subscriptions/s{n}").status_code == 204
    assert admin_api.delete("/v1/topics/x_t").status_code == 204


def test_metrics_are_for_staff_or_the_bearer_token(admin_api, q, make_user, client_for, settings):
    pgq.send_batch(q, [1, 2, 3])
    text = admin_api.get("/metrics")
    assert text.status_code == 200
    assert text.headers["Content-Type"].startswith("text/plain")
    assert f'pgq_queue_length{{queue="{q}"}} 3.0' in text.text
    # This process writes the count of its autocommit send within a second
    # (pgq_django.store.tallies); the server's scrape then shows exactly the three messages.
    sent = f'pgq_messages_sent_total{{queue="{q}"}} 3.0'
    wait_until(lambda: sent in admin_api.get("/metrics").text, what="the sent counter")
    plain = client_for(make_user())
    assert plain.get("/metrics").status_code == 403
    bearer = client_for(None)
    bearer.headers["Authorization"] = "Bearer not-the-token"
    assert bearer.get("/metrics").status_code == 401
