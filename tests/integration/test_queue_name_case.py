"""Queue names that differ only in case are one queue to PGMQ (its tables, and our views,
are q_<lower name>): a second such name is refused at creation, and the PGMQ interface's
views of a queue are never taken over or dropped by another queue."""

from __future__ import annotations

import importlib
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

import pgq_django as pgq
from tests.pgmq_support import ours_dsn, ours_sql, pgmq_sql

__all__ = ["pgmq_sql"]  # the fixture, imported for the tests below

collisions = importlib.import_module("pgq_django.migrations.0019_queue_name_folded_unique")


def _view_bodies(name: str) -> list[Any]:
    return [row[0] for row in ours_sql(f"SELECT message FROM pgmq.q_{name.lower()} ORDER BY 1")]


def test_a_name_differing_only_in_case_is_refused_and_changes_nothing(
    db: Any, queue_name: str
) -> None:
    pgq.create_queue(queue_name)
    with pytest.raises(pgq.QueueAlreadyExists) as refused:
        pgq.create_queue(queue_name.upper())
    assert "differs from it only in case" in refused.value.message
    assert queue_name in refused.value.message
    assert [q.name for q in pgq.list_queues() if q.name.lower() == queue_name] == [queue_name]
    with pytest.raises(pgq.QueueAlreadyExists, match=f"Queue '{queue_name}' already exists."):
        pgq.create_queue(queue_name)


def test_the_attack_on_a_queues_pgmq_views_is_refused(pgmq_sql: str, queue_name: str) -> None:
    victim = pgq.create_queue(queue_name)
    pgq.send(victim, "the victim's")
    attacker_name = queue_name.upper()
    with pytest.raises(pgq.QueueAlreadyExists):
        pgq.create_queue(attacker_name)
    assert pgq.drop_queue(attacker_name) is False
    # PGMQ's own create of the other spelling names the same queue, as in PGMQ.
    ours_sql("SELECT pgmq.create(%s)", [attacker_name])
    ours_sql("SELECT * FROM pgmq.send(%s, %s)", [attacker_name, Jsonb("via pgmq")])
    assert pgq.Queue.objects.filter(name__iexact=queue_name).count() == 1
    assert _view_bodies(queue_name) == ["the victim's", "via pgmq"]


def test_the_views_trigger_never_replaces_or_drops_another_queues_views(
    pgmq_sql: str, queue_name: str
) -> None:
    victim = pgq.create_queue(queue_name)
    pgq.send(victim, "the victim's")
    stranger = victim.id + 1_000_000
    ours_sql("SELECT pgmq._pgq_make_views(%s, %s)", [stranger, queue_name.upper()])
    ours_sql("SELECT pgmq._pgq_drop_views(%s, %s)", [stranger, queue_name.upper()])
    assert _view_bodies(queue_name) == ["the victim's"]
    owners = ours_sql(
        "SELECT obj_description(to_regclass(v), 'pg_class') FROM unnest(%s::text[]) v",
        [[f"pgmq.q_{queue_name}", f"pgmq.a_{queue_name}"]],
    )
    assert owners == [(f"pgq queue {victim.id}",)] * 2


def test_a_database_holding_such_names_keeps_each_queues_views(
    pgmq_sql: str, queue_name: str
) -> None:
    """A database from before the unique index may hold two such names: the first keeps
    its views while the second exists, and dropping the second leaves them alone. (In a
    transaction rolled back at the end, with the index dropped for it.)"""
    victim = pgq.create_queue(queue_name)
    pgq.send(victim, "the victim's")
    with psycopg.connect(ours_dsn()) as conn:
        columns = [
            row[0]
            for row in conn.execute(
                "SELECT column_name FROM information_schema.columns "
                "WHERE table_name = 'pgq_queue' AND column_name NOT IN ('id', 'name')"
            )
        ]
        listed = ", ".join(columns)
        conn.execute("DROP INDEX pgq_queue_name_folded_uniq")
        (attacker,) = conn.execute(
            f"INSERT INTO pgq_queue (name, {listed}) SELECT upper(name), {listed} "
            "FROM pgq_queue WHERE id = %s RETURNING id",
            [victim.id],
        ).fetchone()
        conn.execute(
            "INSERT INTO pgq_message (msg_id, queue_id, message) "
            "VALUES (nextval('pgq_message_msg_id_seq'), %s, '\"forged\"')",
            [attacker],
        )

        def seen() -> list[Any]:
            return [r[0] for r in conn.execute(f"SELECT message FROM pgmq.q_{queue_name}")]

        assert seen() == ["the victim's"]
        refused = pytest.raises(psycopg.errors.RaiseException, match=queue_name.upper())
        with refused, conn.transaction():
            conn.execute(collisions.REFUSE_COLLISIONS)
        conn.execute("DELETE FROM pgq_queue WHERE id = %s", [attacker])
        assert seen() == ["the victim's"]
        conn.rollback()
    assert _view_bodies(queue_name) == ["the victim's"]
