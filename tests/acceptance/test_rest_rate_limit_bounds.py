"""Over real HTTP: a rate_limit out of bounds is a JSON 400 that changes nothing, and a
stored one (raw SQL, an older release) never turns a consume into a 500."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from django.db import connection

import pgq_django as pgq


@pytest.mark.parametrize("rate", [5e-324, 0.0001, 0, 2_000_000])
def test_rest_refuses_a_rate_limit_out_of_bounds_and_changes_nothing(
    admin_api: Any, rate: float
) -> None:
    name = "q_" + uuid.uuid4().hex[:12]
    pgq.create_queue(name, rate_limit=5)
    response = admin_api.put(f"/v1/queues/{name}", json={"rate_limit": rate})
    assert response.status_code == 400, response.text
    assert "rate_limit" in response.json()["error"]["message"]
    assert pgq.get_queue(name).rate_limit == 5
    created = admin_api.post("/v1/queues", json={"id": name + "_b", "rate_limit": rate})
    assert created.status_code == 400, created.text
    assert not pgq.Queue.objects.filter(name=name + "_b").exists()


def test_rest_consume_of_a_queue_with_a_stored_subnormal_rate_answers_200(admin_api: Any) -> None:
    name = "q_" + uuid.uuid4().hex[:12]
    queue = pgq.create_queue(name)
    pgq.send_batch(name, ["a", "b"])
    with connection.cursor() as cursor:
        cursor.execute("UPDATE pgq_queue SET rate_limit = 5e-324 WHERE id = %s", [queue.id])
    first = admin_api.get(f"/v1/queues/{name}/messages", params={"limit": 2})
    second = admin_api.get(f"/v1/queues/{name}/messages", params={"limit": 2})
    assert (first.status_code, second.status_code) == (200, 200), first.text + second.text
    assert [m["body"] for m in first.json()["data"]] == ["a"]
    assert second.json()["data"] == []
