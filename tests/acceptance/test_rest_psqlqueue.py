"""psqlqueue's README, step by step, against a live server: only the host (and a login) differ."""

from __future__ import annotations

import pgq_django as pgq

JSON = {"Content-Type": "application/json"}


def test_the_psqlqueue_readme_queue_session_works_as_written(admin_api):
    api = admin_api
    created = api.post(
        "/v1/queues",
        headers=JSON,
        data="""{
    "id": "my-new-queue",
    "ack_deadline_seconds": 30,
    "message_retention_seconds": 1209600,
    "delivery_delay_seconds": 0
}""",
    )
    assert created.status_code == 201, created.text
    queue = created.json()
    assert {k: queue[k] for k in ("id", "ack_deadline_seconds", "message_retention_seconds")} == {
        "id": "my-new-queue",
        "ack_deadline_seconds": 30,
        "message_retention_seconds": 1209600,
    }
    assert queue["delivery_delay_seconds"] == 0
    assert queue["created_at"] and queue["updated_at"]

    sent = api.post(
        "/v1/queues/my-new-queue/messages",
        headers=JSON,
        data="""{
    "body": "message body",
    "label": "my-label",
    "attributes": {"attribute1": "attribute1", "attribute2": "attribute2"}
}""",
    )
    assert sent.status_code == 201, sent.text

    consumed = api.get("/v1/queues/my-new-queue/messages?limit=1")
    assert consumed.status_code == 200
    page = consumed.json()
    assert page["limit"] == 1
    [message] = page["data"]
    assert message["id"] == sent.json()["id"]
    assert message["queue_id"] == "my-new-queue"
    assert message["label"] == "my-label"
    assert message["body"] == "message body"
    assert message["attributes"] == {"attribute1": "attribute1", "attribute2": "attribute2"}
    assert message["delivery_attempts"] == 1
    assert message["created_at"]
    msg_id = message["id"]

    nacked = api.put(
        f"/v1/queues/my-new-queue/messages/{msg_id}/nack",
        headers=JSON,
        data='{\n    "visibility_timeout_seconds": 30 \n}',
    )
    assert nacked.status_code == 204, nacked.text
    # Within the 30 seconds nobody gets it ...
    assert api.get("/v1/queues/my-new-queue/messages?limit=1").json()["data"] == []
    # ... and "after this time" (fast-forwarded here) it comes back with a second attempt.
    pgq.set_vt("my-new-queue", msg_id, 0)
    again = api.get("/v1/queues/my-new-queue/messages?limit=1").json()
    assert [(m["id"], m["delivery_attempts"]) for m in again["data"]] == [(msg_id, 2)]

    acked = api.put(f"/v1/queues/my-new-queue/messages/{msg_id}/ack")
    assert acked.status_code == 204, acked.text
    empty = api.get("/v1/queues/my-new-queue/messages/?limit=1")
    assert empty.status_code == 200
    assert empty.json() == {"data": [], "limit": 1}

    cleaned = api.put("/v1/queues/my-new-queue/cleanup")
    assert cleaned.status_code == 204
    assert pgq.metrics("my-new-queue").queue_length == 0


def test_the_psqlqueue_readme_pub_sub_session_works_as_written(admin_api):
    api = admin_api
    topic = api.post("/v1/topics", headers=JSON, data='{\n    "id": "orders"\n}')
    assert topic.status_code == 201, topic.text
    assert topic.json()["id"] == "orders" and topic.json()["created_at"]
    for name in ("all-orders", "processed-orders"):
        made = api.post(
            "/v1/queues",
            headers=JSON,
            data=f"""{{
    "id": "{name}",
    "ack_deadline_seconds": 30,
    "message_retention_seconds": 1209600,
    "delivery_delay_seconds": 0
}}""",
        )
        assert made.status_code == 201, made.text

    first = api.post(
        "/v1/subscriptions",
        headers=JSON,
        data="""{
    "id": "orders-to-all-orders",
    "topic_id": "orders",
    "queue_id": "all-orders"
}""",
    )
    assert first.status_code == 201, first.text
    assert {k: v for k, v in first.json().items() if k not in ("created_at", "routing_key")} == {
        "id": "orders-to-all-orders",
        "topic_id": "orders",
        "queue_id": "all-orders",
        "message_filters": None,
    }
    second = api.post(
        "/v1/subscriptions",
        headers=JSON,
        data="""{
    "id": "orders-to-processed-orders",
    "topic_id": "orders",
    "queue_id": "processed-orders",
    "message_filters": {"status": ["processed"]}
}""",
    )
    assert second.status_code == 201, second.text
    assert second.json()["message_filters"] == {"status": ["processed"]}

    for status in ("created", "processed"):
        published = api.post(
            "/v1/topics/orders/messages",
            headers=JSON,
            data=f"""{{
    "body": "body-of-the-order",
    "attributes": {{"status": "{status}"}}
}}""",
        )
        assert published.status_code == 201, published.text

    everything = api.get("/v1/queues/all-orders/messages").json()
    assert everything["limit"] == 10
    assert [(m["body"], m["attributes"], m["label"]) for m in everything["data"]] == [
        ("body-of-the-order", {"status": "created"}, None),
        ("body-of-the-order", {"status": "processed"}, None),
    ]
    processed = api.get("/v1/queues/processed-orders/messages").json()
    assert [m["attributes"] for m in processed["data"]] == [{"status": "processed"}]
    assert processed["data"][0]["queue_id"] == "processed-orders"

    shown = api.get("/v1/subscriptions/orders-to-processed-orders")
    assert shown.status_code == 200 and shown.json()["topic_id"] == "orders"
    listed = api.get("/v1/subscriptions").json()
    assert {s["id"] for s in listed["data"]} == {
        "orders-to-all-orders",
        "orders-to-processed-orders",
    }
    assert api.get("/v1/queues/all-orders/stats").json()["num_undelivered_messages"] == 2
