"""The queue statements are prepared once per connection, unless settings say not to."""

from __future__ import annotations

from typing import Any

from django.db import connection
from django.test import override_settings

import pgq_django as pgq


def _prepared_queue_statements() -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE %s",
            ["%pgq_queue%"],
        )
        return cursor.fetchone()[0]


@override_settings(PGQ={"PREPARED_STATEMENTS": True})  # the default (not behind a pooler)
def test_send_read_and_delete_are_prepared_on_the_django_connection(queue: Any) -> None:
    # The test runs inside one transaction, so behind a transaction pooler too every
    # statement runs on one server connection, which keeps what was prepared on it.
    before = _prepared_queue_statements()
    msg_id = pgq.send(queue, {"n": 1})
    [message] = pgq.read(queue)
    assert pgq.delete(queue, message.msg_id) is True
    assert message.msg_id == msg_id and message.message == {"n": 1}
    assert _prepared_queue_statements() >= before + 3
    # Django's own queries keep their default: client-side binding, never prepared.
    with connection.cursor() as cursor:
        cursor.execute("SELECT 'pgq_queue django' WHERE %s", [True])
    assert not connection.connection.execute(
        "SELECT 1 FROM pg_prepared_statements WHERE statement LIKE '%pgq_queue django%'"
    ).fetchone()


def test_prepared_statements_can_be_turned_off_for_poolers(queue: Any) -> None:
    with override_settings(PGQ={"PREPARED_STATEMENTS": False}):
        before = _prepared_queue_statements()
        pgq.send(queue, {"n": 2})
        [message] = pgq.read(queue)
        assert pgq.delete(queue, message) is True
        assert _prepared_queue_statements() == before
