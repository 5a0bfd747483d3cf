"""A send inside the caller's transaction commits or rolls back with the caller's rows."""

from __future__ import annotations

import asyncio

import psycopg
import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth.models import Group
from django.db import DatabaseError, connection, connections, transaction
from django.db.transaction import TransactionManagementError

import pgq_django as pgq
from pgq_django.store.notify import connection_params
from tests.conftest import statements_run

pytestmark = pytest.mark.django_db(transaction=True)


def _count_from_another_connection(queue_name: str) -> int:
    with psycopg.connect(**connection_params()) as other:
        row = other.execute(
            "SELECT count(*) FROM pgq_message m JOIN pgq_queue q ON q.id = m.queue_id "
            "WHERE q.name = %s",
            [queue_name],
        ).fetchone()
        return row[0]


def test_a_send_appears_to_others_only_when_the_transaction_commits(queue_name):
    pgq.create_queue(queue_name)
    with transaction.atomic():
        Group.objects.create(name="order-1")
        pgq.send(queue_name, {"order": 1})
        assert _count_from_another_connection(queue_name) == 0
    assert _count_from_another_connection(queue_name) == 1


def test_a_send_rolls_back_with_the_callers_rows(queue_name):
    pgq.create_queue(queue_name)
    with pytest.raises(RuntimeError), transaction.atomic():
        Group.objects.create(name="order-2")
        pgq.send(queue_name, {"order": 2})
        raise RuntimeError("payment failed")
    assert not Group.objects.filter(name="order-2").exists()
    assert pgq.metrics(queue_name).queue_length == 0


def test_a_delete_inside_a_failed_transaction_leaves_the_message_queued(queue_name):
    pgq.create_queue(queue_name)
    msg_id = pgq.send(queue_name, "work")
    [m] = pgq.read(queue_name, vt=0)
    with pytest.raises(RuntimeError), transaction.atomic():
        pgq.delete(queue_name, m.receipt)
        raise RuntimeError("handler crashed")
    assert [x.msg_id for x in pgq.read(queue_name)] == [msg_id]


# The queue statements skip Django's cursor wrapper when no hook needs it
# (pgq_django.store.db._fetch); these pin down that they still behave as Django's queries do.


def test_no_queue_statement_runs_in_a_transaction_that_must_roll_back(queue_name):
    pgq.create_queue(queue_name)
    with transaction.atomic():
        with pytest.raises(RuntimeError), transaction.atomic(savepoint=False):
            raise RuntimeError("an inner block failed without a savepoint")
        with pytest.raises(TransactionManagementError):
            pgq.send(queue_name, {"after": "the failure"})
        with pytest.raises(TransactionManagementError):
            pgq.read(queue_name)
    assert pgq.metrics(queue_name).queue_length == 0


def test_a_failing_queue_statement_raises_djangos_error_and_spoils_the_transaction(queue_name):
    pgq.create_queue(queue_name)
    with pytest.raises(DatabaseError) as failed, transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SET TRANSACTION READ ONLY")
        pgq.send(queue_name, {"refused": True})
    assert type(failed.value).__module__ == "django.db.utils"
    assert isinstance(failed.value.__cause__, psycopg.errors.ReadOnlySqlTransaction)
    # The connection is usable again once the transaction rolled back.
    assert pgq.send(queue_name, {"n": 1}) > 0


def test_execute_wrappers_and_query_logging_see_the_queue_statements(queue_name):
    from django.test.utils import CaptureQueriesContext

    pgq.create_queue(queue_name)
    with statements_run() as seen:
        msg_id = pgq.send(queue_name, {"n": 1})
        [message] = pgq.read(queue_name)
    assert message.msg_id == msg_id
    assert [s for s in seen if "INSERT INTO pgq_message" in s]
    assert [s for s in seen if "UPDATE pgq_message" in s]
    with CaptureQueriesContext(connection) as captured:
        assert pgq.delete(queue_name, message.receipt) is True
    assert len(captured.captured_queries) == 1


def test_async_twins_send_and_read(queue_name):
    async def scenario():
        await pgq.acreate_queue(queue_name)
        msg_id = await pgq.asend(queue_name, {"async": True})
        [m] = await pgq.aread(queue_name)
        deleted = await pgq.adelete(queue_name, m.receipt)
        await sync_to_async(connections.close_all)()
        return msg_id, m, deleted

    msg_id, m, deleted = asyncio.run(scenario())
    assert (m.msg_id, m.message, deleted) == (msg_id, {"async": True}, True)
    assert pgq.adelete.__name__ == "adelete"
    assert pgq.metrics(queue_name).queue_length == 0
