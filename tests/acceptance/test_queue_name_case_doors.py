"""Over real HTTP and the admin: a queue name differing only in case from an existing one
(one queue to PGMQ's clients) is refused by every door that creates queues, and nothing is
created."""

from __future__ import annotations

import uuid
from typing import Any

import pgq_django as pgq
from tests.acceptance.test_security import AdminSession, _submit, _url, people

__all__ = ["people"]  # the fixture, imported for the tests below


def _same_name_ignoring_case(name: str) -> list[str]:
    return [q.name for q in pgq.Queue.objects.filter(name__iexact=name)]


def test_rest_refuses_a_name_differing_only_in_case(admin_api: Any) -> None:
    name = "q_" + uuid.uuid4().hex[:12]
    pgq.create_queue(name)
    response = admin_api.post("/v1/queues", json={"id": name.upper()})
    assert response.status_code == 409, response.text
    assert "only in case" in response.json()["error"]["message"]
    assert _same_name_ignoring_case(name) == [name]


def test_the_admin_refuses_a_name_differing_only_in_case(people: dict[str, Any]) -> None:
    name = "q_" + uuid.uuid4().hex[:12]
    pgq.create_queue(name)
    admin = AdminSession(people["root"])
    response = _submit(admin, _url("add"), {"name": name.upper()})
    assert response.status_code == 200
    assert b"ignoring case, already exists" in response.content
    assert _same_name_ignoring_case(name) == [name]
