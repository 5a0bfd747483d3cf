"""Partition upkeep: ranges made ahead of the sequence, drained ones dropped, nothing lost."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.test import override_settings

import pgq_django as pgq
from pgq_django import partitions
from pgq_django.models import ArchivedMessage, Message
from tests.conftest import sequence_kept, set_sequence, top_of_ranges

SIZE = 1000


@pytest.fixture
def near_the_last_boundary(db):
    """Move the sequence just below the end of the highest range either table has; restore
    it afterwards.

    On a new database that is the first premade range's end; on one where an earlier test
    (of another file, in whatever order a parallel run takes them) left ranges further on,
    it is the end of those, so premake has the same two ranges to make. The test's rows
    roll back with its transaction, so putting the sequence back cannot collide with a
    committed id.
    """
    with sequence_kept():
        top = top_of_ranges()
        set_sequence(top - 10)
        with override_settings(PGQ={"PARTITION_SIZE": SIZE, "PARTITION_PREMAKE": 2}):
            yield top


def test_premake_creates_ranges_ahead_of_the_sequence_for_both_tables(near_the_last_boundary):
    start = near_the_last_boundary
    actions = partitions.premake_partitions()
    assert actions == [
        f"create pgq_message_r{start} [{start}, {start + SIZE})",
        f"create pgq_message_r{start + SIZE} [{start + SIZE}, {start + 2 * SIZE})",
        f"create pgq_archived_message_r{start} [{start}, {start + SIZE})",
        f"create pgq_archived_message_r{start + SIZE} [{start + SIZE}, {start + 2 * SIZE})",
    ]
    assert partitions.premake_partitions() == []


def test_messages_past_the_first_range_land_in_the_premade_partition(near_the_last_boundary, queue):
    start = near_the_last_boundary
    partitions.premake_partitions()
    ids = pgq.send_batch(queue, list(range(20)))
    assert max(ids) >= start
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pgq_message_default")
        assert cursor.fetchone()[0] == 0
        cursor.execute(f'SELECT count(*) FROM "pgq_message_r{start}"')
        assert cursor.fetchone()[0] == sum(1 for i in ids if i >= start)


def test_a_drained_range_is_dropped_and_one_with_messages_is_kept(near_the_last_boundary, queue):
    start = near_the_last_boundary
    partitions.premake_partitions()
    with connection.cursor() as cursor:
        cursor.execute("SELECT setval('pgq_message_msg_id_seq', %s)", [start + SIZE - 5])
    kept = pgq.send_batch(queue, ["a", "b", "c"])
    with connection.cursor() as cursor:
        cursor.execute("SELECT setval('pgq_message_msg_id_seq', %s)", [start + SIZE + 5])
    lower_before = {p.lower for p in partitions.list_partitions("pgq_message")}

    actions = partitions.drop_drained_partitions()
    remaining = {p.lower for p in partitions.list_partitions("pgq_message")}
    # The range holding live messages and the one the sequence is in are both kept.
    assert start in remaining and start + SIZE in remaining
    assert not any(a.startswith(f"drop pgq_message_r{start} ") for a in actions)
    assert remaining <= lower_before
    assert Message.objects.filter(msg_id__in=kept).count() == 3

    pgq.archive(queue, kept)
    actions = partitions.drop_drained_partitions()
    assert f"drop pgq_message_r{start} [{start}, {start + SIZE})" in actions
    # The archive range keeps its rows until retention empties it.
    assert ArchivedMessage.objects.filter(msg_id__in=kept).count() == 3
    assert start in {p.lower for p in partitions.list_partitions("pgq_archived_message")}

    ArchivedMessage.objects.filter(msg_id__in=kept).delete()
    actions = partitions.drop_drained_partitions()
    assert f"drop pgq_archived_message_r{start} [{start}, {start + SIZE})" in actions


def test_dry_run_reports_without_changing_anything(near_the_last_boundary):
    before = partitions.list_partitions("pgq_message")
    out = StringIO()
    call_command("pgq_partitions", "--dry-run", stdout=out)
    assert "would create pgq_message_r" in out.getvalue()
    assert partitions.list_partitions("pgq_message") == before


def test_the_command_prints_what_it_did_and_rejects_bad_arguments(near_the_last_boundary):
    out = StringIO()
    call_command("pgq_partitions", "--premake", "1", stdout=out)
    assert out.getvalue().count("create ") == 2
    out = StringIO()
    call_command("pgq_partitions", "--premake", "1", stdout=out)
    assert "up to date" in out.getvalue()
    with pytest.raises(CommandError):
        call_command("pgq_partitions", "--premake", "-1")
