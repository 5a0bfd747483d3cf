"""Dropping a queue while others send to it: nothing of the queue outlives the next upkeep.

The message and archive tables have no foreign key to the queue (migration 0011), so a
send does not lock the queue's row. These tests commit for real (``transactional_db``) from
several connections: a send that found the queue before a drop committed may commit its row
after it, and such a row must be unreachable at once and gone after upkeep.
"""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from typing import Any

from django.db import connection, connections, transaction
from django.utils import timezone

import pgq_django as pgq
from pgq_django.api.upkeep import prune
from pgq_django.models import ArchivedMessage, DroppedQueue, Message, QueueCounter
from pgq_django.store.sql.delivery import DROPPED_QUEUE_MEMORY_SECONDS


def rows_of(queue_id: int) -> tuple[int, int]:
    """(messages, archive rows) still carrying ``queue_id``."""
    return (
        Message.objects.filter(queue_id=queue_id).count(),
        ArchivedMessage.objects.filter(queue_id=queue_id).count(),
    )


def in_thread(target: Any) -> threading.Thread:
    """Run ``target`` on its own Django connection (closed when it ends)."""

    def run() -> None:
        try:
            target()
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_dropping_removes_messages_archive_and_counters_in_the_same_statement(transactional_db):
    q = pgq.create_queue("drop_whole", archive_on_ack=True)
    ids = pgq.send_batch(q, [1, 2, 3])
    (m,) = pgq.read(q)
    pgq.delete(q, m.receipt)
    with transaction.atomic():
        pgq.send(q, 4)  # counted in its statement: a counter row
    assert rows_of(q.id) == (3, 1)
    assert QueueCounter.objects.filter(queue_id=q.id).exists()
    with connection.cursor() as cursor:  # the path the admin and raw SQL take too
        cursor.execute("DELETE FROM pgq_queue WHERE id = %s", [q.id])
    assert rows_of(q.id) == (0, 0)
    assert not QueueCounter.objects.filter(queue_id=q.id).exists()
    assert not Message.objects.filter(msg_id__in=ids).exists()
    assert DroppedQueue.objects.filter(queue_id=q.id).exists()


def test_a_send_committed_after_a_repeatable_read_drop_began_is_swept(transactional_db):
    """Under REPEATABLE READ the drop cannot see a message committed after its snapshot.

    With a foreign key this drop failed with a serialization error; now it succeeds, the
    message it could not see is unreachable, and upkeep removes it.
    """
    q = pgq.create_queue("drop_rr")
    sent: list[int] = []
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            cursor.execute("SELECT count(*) FROM pgq_message")  # takes the snapshot
        in_thread(lambda: sent.append(pgq.send("drop_rr", {"late": True}))).join(30)
        assert sent, "the concurrent send did not commit"
        assert pgq.drop_queue("drop_rr") is True
    assert rows_of(q.id) == (1, 0)  # left behind: committed after the drop's snapshot

    again = pgq.create_queue("drop_rr")  # a new queue of the same name does not see it
    assert again.id != q.id
    assert pgq.read(again) == []
    assert pgq.metrics(again).queue_length == 0

    assert prune()["dropped_swept"] == 1
    assert rows_of(q.id) == (0, 0)
    assert pgq.metrics(again).queue_length == 0


def test_a_transaction_that_sent_and_commits_after_the_drop_leaves_nothing_after_upkeep(
    transactional_db,
):
    """The drop does not wait for a transaction that sent to the queue (no key locks the
    queue's row); what that transaction commits afterwards is swept."""
    q = pgq.create_queue("drop_open_tx")
    sent = threading.Event()
    dropped = threading.Event()

    def sender() -> None:
        with transaction.atomic():
            pgq.send("drop_open_tx", {"n": 1})  # counted here: a counter row too
            sent.set()
            assert dropped.wait(30)

    thread = in_thread(sender)
    assert sent.wait(30)
    assert pgq.drop_queue("drop_open_tx") is True
    dropped.set()
    thread.join(30)
    assert rows_of(q.id) == (1, 0)
    assert QueueCounter.objects.filter(queue_id=q.id).exists()
    assert prune()["dropped_swept"] == 1
    assert rows_of(q.id) == (0, 0)
    assert not QueueCounter.objects.filter(queue_id=q.id).exists()


def test_senders_hammering_a_queue_while_it_is_dropped_leave_nothing_after_upkeep(
    transactional_db,
):
    q = pgq.create_queue("drop_hammer")
    stop = threading.Event()
    counts: list[int] = []
    errors: list[BaseException] = []

    def sender() -> None:
        n = 0
        try:
            while not stop.is_set():
                pgq.send("drop_hammer", {"n": n})
                n += 1
        except pgq.QueueNotFound:
            pass  # the drop has committed: every later send is refused
        except BaseException as exc:
            errors.append(exc)
        counts.append(n)

    threads = [in_thread(sender) for _ in range(3)]
    while Message.objects.filter(queue_id=q.id).count() < 200 and all(
        t.is_alive() for t in threads
    ):
        time.sleep(0.005)
    assert pgq.drop_queue("drop_hammer") is True
    stop.set()
    for thread in threads:
        thread.join(30)
    assert errors == []
    assert sum(counts) >= 200
    prune()
    assert rows_of(q.id) == (0, 0)


def test_a_dropped_queue_is_remembered_for_a_day_then_forgotten(transactional_db):
    q = pgq.create_queue("drop_forget")
    pgq.drop_queue(q.name)
    prune()
    assert DroppedQueue.objects.filter(queue_id=q.id).exists()
    DroppedQueue.objects.filter(queue_id=q.id).update(
        dropped_at=timezone.now() - timedelta(seconds=DROPPED_QUEUE_MEMORY_SECONDS + 60)
    )
    prune()
    assert not DroppedQueue.objects.filter(queue_id=q.id).exists()
