"""A process forked after using the database gets a connection of its own.

The parent prepares its statements, forks a real child (multiprocessing's ``fork`` start
method) that sends, reads and deletes, and then carries on itself. Sharing one server session
would make one of them fail with DuplicatePreparedStatement or a protocol error.
"""

from __future__ import annotations

import multiprocessing
import os
from typing import Any

import pytest
from django.db import connection

import pgq_django as pgq

pytestmark = pytest.mark.django_db(transaction=True)


def _child(queue_name: str, results: Any) -> None:
    try:
        from django.db import connection as child_connection

        msg_id = pgq.send(queue_name, {"from": "child"})
        messages = pgq.read(queue_name, qty=10)
        deleted = pgq.archive(queue_name, [m.msg_id for m in messages])  # a new statement
        results.put(("ok", msg_id, sorted(deleted), child_connection.connection.info.backend_pid))
    except BaseException as exc:
        results.put(("error", repr(exc), [], 0))


def test_a_forked_child_and_its_parent_each_use_their_own_session(queue):
    pgq.send(queue, {"from": "parent"})
    [first] = pgq.read(queue)  # the parent's read statement is prepared now
    parent_pid = connection.connection.info.backend_pid
    ctx = multiprocessing.get_context("fork")
    results = ctx.Queue()
    child = ctx.Process(target=_child, args=(queue.name, results))
    child.start()
    status, child_msg, archived, child_backend = results.get(timeout=60)
    child.join(timeout=60)
    assert status == "ok", child_msg
    assert child.exitcode == 0
    assert child_backend != parent_pid
    assert archived == [child_msg]  # the parent's message is leased: the child saw only its own
    # The parent's session survived the child: its statements, old and new, still work.
    assert connection.connection.info.backend_pid == parent_pid
    assert pgq.delete(queue, first.receipt) is True
    assert pgq.send(queue, {"from": "parent", "n": 2}) > 0
    assert pgq.purge_queue(queue) == 1
    assert os.getpid() != child.pid
