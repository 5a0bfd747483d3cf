"""A handler that runs no statement: its ack commits alone, in one round trip.

These tests commit for real (``transactional_db``): inside the per-test transaction every
handler's block is a savepoint, and the lone ack never applies.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.conf import settings
from django.db import transaction
from django.test import override_settings

import pgq_django as pgq
from pgq_django.worker import registry
from pgq_django.worker.executor import Outcome, execute
from tests.protocol_trace import protocol_trace


def commands(sent: list[str]) -> list[str]:
    """The transaction commands among the traced messages."""
    return [word for line in sent for word in ("BEGIN", "COMMIT") if f'"{word}"' in line]


@pytest.mark.parametrize("fast_paths", [True, False])
def test_a_handler_that_runs_no_statement_is_acked_without_begin_or_commit(
    transactional_db, fast_paths
):
    """Telling that the handler's block is empty reads Django's transaction state (a
    shortcut of pgq_django.seams); on the public path the ack commits with the block."""
    q = pgq.create_queue("lone_ack", archive_on_ack=True)
    msg_id = pgq.send(q, {"n": 1})
    (m,) = pgq.read(q)
    with (
        override_settings(PGQ={**settings.PGQ, "FAST_PATHS": fast_paths}),
        protocol_trace() as sent,
    ):
        outcome = execute(registry.Handler(q.name, lambda message: {"seen": message.msg_id}), m)
    assert outcome is Outcome.ACKED
    assert commands(sent) == ([] if fast_paths else ["BEGIN", "COMMIT"])
    assert pgq.result(msg_id).result == {"seen": msg_id}
    assert pgq.metrics(q).queue_length == 0


def test_a_handler_that_writes_still_commits_with_its_ack(transactional_db):
    q = pgq.create_queue("lone_ack_writes")
    pgq.send(q, {})
    (m,) = pgq.read(q)

    def writes(message: Any) -> None:
        pgq.send(q, {"from": message.msg_id})

    with protocol_trace() as sent:
        assert execute(registry.Handler(q.name, writes), m) is Outcome.ACKED
    assert commands(sent) == ["BEGIN", "COMMIT"]
    assert [r.message for r in pgq.read(q, qty=10)] == [{"from": m.msg_id}]


def test_a_lone_ack_that_lost_its_lease_leaves_the_new_lease_alone(transactional_db):
    q = pgq.create_queue("lone_ack_lost")
    pgq.send(q, {})
    (stale,) = pgq.read(q, vt=0)
    (current,) = pgq.read(q, vt=30)
    assert execute(registry.Handler(q.name, lambda message: None), stale) is Outcome.LEASE_LOST
    again = pgq.read_by_id(q, current.msg_id)
    assert again.read_ct == 2
    assert pgq.delete(q, current.receipt)


def test_on_commit_callbacks_still_run_after_the_ack_has_committed(transactional_db):
    """A callback registered without a statement keeps the ack inside the transaction, so
    it runs only once the message is gone, as it always did."""
    q = pgq.create_queue("lone_ack_hooks")
    pgq.send(q, {})
    (m,) = pgq.read(q)
    seen: list[int] = []

    def hooks(message: Any) -> None:
        transaction.on_commit(lambda: seen.append(pgq.metrics(q).queue_length))

    assert execute(registry.Handler(q.name, hooks), m) is Outcome.ACKED
    assert seen == [0]


def test_a_failing_handler_without_statements_is_nacked(transactional_db):
    q = pgq.create_queue("lone_ack_fails", max_retries=0)
    msg_id = pgq.send(q, {})
    (m,) = pgq.read(q)

    def fails(message: Any) -> None:
        raise RuntimeError("no statement, still a failure")

    assert execute(registry.Handler(q.name, fails), m) is Outcome.FAILED
    dead = pgq.result(msg_id)
    assert dead.outcome == "dead"
    assert "no statement, still a failure" in dead.error
