"""Partition upkeep, complete: repair of the default partition, storage, archive retention,
one run at a time, and a clean stop.

The tests move the msg_id sequence past every range so that rows really land where the
scenario needs them (in the DEFAULT partition, or in tiny premade ranges); each runs in the
test's transaction, which PostgreSQL rolls back DDL and all.
"""

from __future__ import annotations

import signal
import threading
from datetime import timedelta
from io import StringIO
from typing import Any

import psycopg
import pytest
from django.core.management import call_command
from django.db import connection, connections
from django.test import override_settings

import pgq_django as pgq
from pgq_django import partitions
from pgq_django.models import ArchivedMessage, Message
from pgq_django.store.sql import partitions as partition_sql
from tests.conftest import _conninfo, sequence_kept, set_sequence, top_of_ranges

SIZE = 100


def _count(table: str) -> int:
    with connection.cursor() as cursor:
        cursor.execute(f'SELECT count(*) FROM "{table}"')
        return int(cursor.fetchone()[0])


@pytest.fixture
def past_every_range(db: Any) -> Any:
    """The sequence just past the highest range of both tables, tiny ranges; restored after."""
    with (
        sequence_kept(),
        override_settings(PGQ={"PARTITION_SIZE": SIZE, "PARTITION_PREMAKE": 1}),
    ):
        top = top_of_ranges()
        set_sequence(top + 10 * SIZE + 5)
        yield top


def test_rows_in_the_default_partition_move_into_a_new_range_partition(past_every_range, queue):
    top = past_every_range
    ids = pgq.send_batch(queue, [{"n": i} for i in range(30)])
    assert _count("pgq_message_default") == 30  # really forced there: no range covers them
    # PostgreSQL refuses the plain way: a range overlapping rows of the default partition.
    lower = top + 10 * SIZE
    assert all(lower <= i < lower + SIZE for i in ids)
    out = StringIO()
    call_command("pgq_partitions", "--dry-run", stdout=out)
    assert (
        f"would repair pgq_message_default: 30 rows into pgq_message_r{lower} "
        f"[{lower}, {lower + SIZE})" in out.getvalue()
    )
    assert _count("pgq_message_default") == 30  # the dry run changed nothing

    actions = partitions.repair_default()

    assert actions == [
        f"repair pgq_message_default: 30 rows into pgq_message_r{lower} [{lower}, {lower + SIZE})"
    ]
    assert _count("pgq_message_default") == 0
    assert _count(f"pgq_message_r{lower}") == 30
    read = pgq.read(queue, qty=100, vt=30)
    assert sorted(m.msg_id for m in read) == sorted(ids)
    assert sorted(m.message["n"] for m in read) == list(range(30))
    assert partitions.repair_default() == []


def test_repair_gives_each_stretch_of_default_rows_its_own_range_on_the_grid(
    past_every_range, queue
):
    top = past_every_range
    first = pgq.send_batch(queue, ["a", "b"])
    set_sequence(top + 13 * SIZE + 50)
    second = pgq.send_batch(queue, ["c"])
    pgq.archive(queue, first[:1])  # the archive's default gets a row too
    assert _count("pgq_message_default") == 2
    assert _count("pgq_archived_message_default") == 1

    actions = partitions.repair_default()

    low, high = top + 10 * SIZE, top + 13 * SIZE
    assert actions == [
        f"repair pgq_message_default: 1 rows into pgq_message_r{low} [{low}, {low + SIZE})",
        f"repair pgq_message_default: 1 rows into pgq_message_r{high} [{high}, {high + SIZE})",
        f"repair pgq_archived_message_default: 1 rows into pgq_archived_message_r{low} "
        f"[{low}, {low + SIZE})",
    ]
    assert Message.objects.filter(msg_id__in=[first[1], *second]).count() == 2
    assert ArchivedMessage.objects.get(msg_id=first[0]).message == "a"
    assert _count("pgq_message_default") + _count("pgq_archived_message_default") == 0


def test_upkeep_repairs_first_so_premade_ranges_follow_the_repaired_one(past_every_range, queue):
    top = past_every_range
    pgq.send_batch(queue, ["x"])
    lower = top + 10 * SIZE
    actions = partitions.run_maintenance()
    assert actions[0].startswith(f"repair pgq_message_default: 1 rows into pgq_message_r{lower}")
    assert f"create pgq_message_r{lower + SIZE} [{lower + SIZE}, {lower + 2 * SIZE})" in actions
    assert _count("pgq_message_default") == 0


def _reloptions(name: str) -> dict[str, str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT coalesce(reloptions, '{}') FROM pg_class WHERE relname = %s", [name])
        return dict(o.split("=", 1) for o in cursor.fetchone()[0])


def test_new_live_partitions_get_the_autovacuum_settings_and_old_ones_are_tuned(past_every_range):
    top = past_every_range
    old = "pgq_message_default"  # made by the migration, before any storage setting
    with connection.cursor() as cursor:
        cursor.execute(f'ALTER TABLE "{old}" RESET (autovacuum_vacuum_threshold)')
    storage = {"autovacuum_vacuum_threshold": 1234, "autovacuum_vacuum_scale_factor": 0.0}
    with override_settings(PGQ={"PARTITION_SIZE": SIZE, "LIVE_PARTITION_STORAGE": storage}):
        actions = partitions.run_maintenance()
    lower = top + 10 * SIZE
    live = _reloptions(f"pgq_message_r{lower}")
    assert live["autovacuum_vacuum_threshold"] == "1234"
    assert live["autovacuum_vacuum_scale_factor"] == "0.0"
    assert live["fillfactor"] == "50"
    assert "autovacuum_vacuum_threshold" not in _reloptions(f"pgq_archived_message_r{lower}")
    assert any(a.startswith(f"tune {old} ") for a in actions)
    assert _reloptions(old)["autovacuum_vacuum_threshold"] == "1234"
    with override_settings(PGQ={"PARTITION_SIZE": SIZE, "LIVE_PARTITION_STORAGE": storage}):
        assert partitions.tune_live_partitions() == []


def test_a_bad_storage_setting_is_refused_before_anything_is_made(past_every_range):
    before = partitions.list_partitions("pgq_message")
    bad = {"autovacuum_enabled = false); DROP TABLE pgq_queue; --": 1}
    with (
        override_settings(PGQ={"PARTITION_SIZE": SIZE, "LIVE_PARTITION_STORAGE": bad}),
        pytest.raises(pgq.InvalidArgument, match="LIVE_PARTITION_STORAGE"),
    ):
        partitions.premake_partitions()
    assert partitions.list_partitions("pgq_message") == before


def _drained_archive_range(queue: Any, top: int) -> tuple[int, list[int]]:
    """A live range drained by archiving its messages; its archive range still has them."""
    partitions.run_maintenance()
    set_sequence(top + 11 * SIZE - 5)
    ids = pgq.send_batch(queue, ["a", "b", "c"])
    lower = top + 10 * SIZE
    assert all(lower <= i < lower + SIZE for i in ids)
    pgq.archive(queue, ids)
    set_sequence(top + 12 * SIZE + 5)
    actions = partitions.run_maintenance()
    assert f"drop pgq_message_r{lower} [{lower}, {lower + SIZE})" in actions
    return lower, ids


def _age_archive(ids: list[int], seconds: float) -> None:
    ArchivedMessage.objects.filter(msg_id__in=ids).update(
        archived_at=pgq_now() - timedelta(seconds=seconds)
    )


def pgq_now() -> Any:
    from django.utils import timezone

    return timezone.now()


def test_an_archive_range_wholly_past_retention_is_dropped_whole(past_every_range, make_queue):
    queue = make_queue(retention=3600)
    lower, ids = _drained_archive_range(queue, past_every_range)
    name = f"pgq_archived_message_r{lower}"
    _age_archive(ids[:2], 7200)
    assert name in {p.name for p in partitions.list_partitions("pgq_archived_message")}
    assert not any(a.startswith(f"drop {name}") for a in partitions.run_maintenance())

    _age_archive(ids, 7200)
    out = StringIO()
    call_command("pgq_partitions", "--dry-run", stdout=out)
    assert f"would drop {name} [{lower}, {lower + SIZE}) (3 rows past retention)" in out.getvalue()
    assert ArchivedMessage.objects.filter(msg_id__in=ids).count() == 3

    actions = partitions.run_maintenance()
    assert f"drop {name} [{lower}, {lower + SIZE}) (3 rows past retention)" in actions
    assert ArchivedMessage.objects.filter(msg_id__in=ids).count() == 0


def test_with_export_required_an_archive_range_waits_for_an_export_covering_it(
    past_every_range, make_queue
):
    queue = make_queue(retention=60)
    lower, ids = _drained_archive_range(queue, past_every_range)
    _age_archive(ids, 7200)
    name = f"pgq_archived_message_r{lower}"
    required = {"PARTITION_SIZE": SIZE, "ARCHIVE_DROP_REQUIRES_EXPORT": True}
    with override_settings(PGQ=required):
        assert not any(a.startswith(f"drop {name}") for a in partitions.run_maintenance())
        # An export that stops short of the newest row does not cover the range.
        now = pgq_now()
        pgq.record_export(since=None, until=now - timedelta(hours=3), path="/x/1", rows=0)
        assert not any(a.startswith(f"drop {name}") for a in partitions.run_maintenance())
        assert ArchivedMessage.objects.filter(msg_id__in=ids).count() == 3
        # A later one, contiguous with it, does.
        pgq.record_export(since=now - timedelta(hours=3), until=now, path="/x/2", rows=3)
        actions = partitions.run_maintenance()
    assert f"drop {name} [{lower}, {lower + SIZE}) (3 rows past retention)" in actions
    assert not ArchivedMessage.objects.filter(msg_id__in=ids).exists()


def test_a_second_upkeep_run_does_nothing_while_one_holds_the_lock(past_every_range):
    before = partitions.list_partitions("pgq_message")
    with psycopg.connect(_conninfo(connection.settings_dict["NAME"])) as other:
        assert other.execute(partition_sql.TRY_UPKEEP_LOCK).fetchone()[0]  # held till rollback
        assert partitions.run_maintenance() == [
            "busy: another upkeep run holds the lock; nothing done"
        ]
        assert partitions.list_partitions("pgq_message") == before
        # A dry run only reads, so it still shows the plan.
        assert any(a.startswith("create ") for a in partitions.run_maintenance(dry_run=True))
        other.rollback()  # ends the transaction, and with it the lock
    assert any(a.startswith("create ") for a in partitions.run_maintenance())


def test_a_stop_request_ends_the_run_after_the_action_in_hand(past_every_range):
    seen = []
    for action in partitions.upkeep(stop=lambda: True):
        seen.append(action)
    assert len(seen) == 1 and seen[0].startswith("create pgq_message_r")
    # The lock was released: the next run goes on where this one stopped.
    assert partitions.run_maintenance()[0].startswith("create pgq_message_r")


def test_postgresql_refuses_a_concurrent_detach_beside_the_default_partition(db):
    """Why upkeep drops under a short lock instead: the DEFAULT partition rules CONCURRENTLY out."""
    part = partitions.list_partitions("pgq_message")[0]
    conninfo = _conninfo(connection.settings_dict["NAME"])
    with (
        psycopg.connect(conninfo, autocommit=True) as other,
        pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState, match="default"),
    ):
        other.execute(f'ALTER TABLE pgq_message DETACH PARTITION "{part.name}" CONCURRENTLY')


def test_with_export_required_retention_deletes_no_unexported_archive_row(make_queue):
    from pgq_django.api.upkeep import prune

    queue = make_queue(retention=60)
    ids = pgq.send_batch(queue, ["a", "b"])
    pgq.archive(queue, ids)
    _age_archive(ids, 7200)
    with override_settings(PGQ={"ARCHIVE_DROP_REQUIRES_EXPORT": True}):
        assert partitions.export_covered_until() is None  # no export recorded
        assert prune()["archive_pruned"] == 0
    assert ArchivedMessage.objects.filter(msg_id__in=ids).count() == 2
    # An export from the beginning that reaches past the first row (aged 2 h), not the second.
    ArchivedMessage.objects.filter(msg_id=ids[1]).update(
        archived_at=pgq_now() - timedelta(minutes=30)
    )
    pgq.record_export(since=None, until=pgq_now() - timedelta(hours=1), path="/x", rows=1)
    with override_settings(PGQ={"ARCHIVE_DROP_REQUIRES_EXPORT": True}):
        assert partitions.export_covered_until() is not None
        assert prune()["archive_pruned"] == 1
    assert list(
        ArchivedMessage.objects.filter(msg_id__in=ids).values_list("msg_id", flat=True)
    ) == [ids[1]]
    assert prune()["archive_pruned"] >= 1  # without the requirement, retention alone decides
    assert not ArchivedMessage.objects.filter(msg_id__in=ids).exists()


def test_the_command_runs_from_a_thread_that_is_not_the_main_one(past_every_range):
    """A scheduler or job runner calls it from its own thread, where no signal handler can
    be installed: the upkeep runs (here its dry run, which changes nothing) all the same."""
    lower = past_every_range + 10 * SIZE
    out = StringIO()
    errors: list[BaseException] = []

    def upkeep_in_a_thread() -> None:
        try:
            call_command("pgq_partitions", "--dry-run", stdout=out)
        except BaseException as exc:
            errors.append(exc)
        finally:
            connections.close_all()

    before = signal.getsignal(signal.SIGINT)
    thread = threading.Thread(target=upkeep_in_a_thread)
    thread.start()
    thread.join()

    assert errors == []
    assert f"would create pgq_message_r{lower}" in out.getvalue()
    assert signal.getsignal(signal.SIGINT) is before
    made = {p.name for p in partitions.list_partitions("pgq_message")}
    assert f"pgq_message_r{lower}" not in made  # a dry run
