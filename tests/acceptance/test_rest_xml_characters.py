"""Over real HTTP, the REST API refuses text XML 1.0 cannot carry (which SQS refuses, and
an SQS Query-protocol answer could not hold) with a JSON 400, and stores nothing."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

import pgq_django as pgq


@pytest.mark.parametrize(
    "payload",
    [
        {"body": "a\x01b"},
        {"body": {"k": "\ufffe"}},
        {"body": "ok", "headers": {"note": "\x0b"}},
        {"body": "ok", "attributes": {"k": "\x08"}},
        {"body": "ok", "label": "a\x1fb"},
        {"messages": [{"body": "fine"}, {"body": "a\x0cb"}]},
    ],
)
def test_rest_send_refuses_text_xml_cannot_carry_and_stores_nothing(
    admin_api: Any, payload: dict[str, Any]
) -> None:
    name = "q_" + uuid.uuid4().hex[:12]
    pgq.create_queue(name)
    response = admin_api.post(f"/v1/queues/{name}/messages", json=payload)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] in ("invalid_message", "invalid_argument"), error
    assert "XML cannot carry" in error["message"]
    assert pgq.metrics(name).total_messages == 0
