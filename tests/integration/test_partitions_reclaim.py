"""Upkeep gives a drained live range back at once: TRUNCATE of a live partition that the
sequence has not passed yet and that holds no row, never of one with a message in it.

Each test sends real messages of about 1 KiB into a range the sequence is in, so the range
takes megabytes of dead rows and index entries once they are deleted; it runs in the test's
transaction, which PostgreSQL rolls back TRUNCATE and all.
"""

from __future__ import annotations

from io import StringIO
from typing import Any

import psycopg
import pytest
from django.core.management import call_command
from django.db import connection
from django.test import override_settings

import pgq_django as pgq
from pgq_django import partitions
from pgq_django.models import ArchivedMessage, Message
from tests.conftest import _conninfo, sequence_kept, set_sequence, top_of_ranges

SIZE = 100_000
BODY = "x" * 1000  # stored inline (below the TOAST threshold), so the heap really grows
COUNT = 2000


def _bytes(name: str) -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_total_relation_size(%s::regclass)", [name])
        return int(cursor.fetchone()[0])


def _live_bytes() -> int:
    """What the live table takes on disk: every partition, its indexes and TOAST."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT coalesce(sum(pg_total_relation_size(relid)), 0) "
            "FROM pg_partition_tree('pgq_message'::regclass) WHERE isleaf"
        )
        return int(cursor.fetchone()[0])


@pytest.fixture
def in_a_fresh_range(db: Any) -> Any:
    """The sequence at the start of a new range of SIZE ids past every existing one."""
    with (
        sequence_kept(),
        override_settings(PGQ={"PARTITION_SIZE": SIZE, "PARTITION_PREMAKE": 1}),
    ):
        top = top_of_ranges()
        set_sequence(top - 1)
        partitions.run_maintenance()  # makes [top, top + SIZE) and the one after
        yield top


def _fill(queue: str, top: int) -> list[int]:
    ids: list[int] = []
    for start in range(0, COUNT, 500):
        ids += pgq.send_batch(queue, [BODY] * min(500, COUNT - start))
    assert all(top <= i < top + SIZE for i in ids)
    return ids


def test_a_drained_range_returns_to_within_twice_a_fresh_one_after_one_pass(
    in_a_fresh_range, queue
):
    top = in_a_fresh_range
    name = f"pgq_message_r{top}"
    fresh = _live_bytes()
    ids = _fill(queue, top)
    assert pgq.delete(queue, ids) == ids
    drained = _live_bytes()
    assert drained > fresh + partitions.RECLAIM_MIN_BYTES  # megabytes of dead rows

    actions = partitions.run_maintenance()

    assert f"truncate {name} [{top}, {top + SIZE}) (drained, " in "\n".join(actions)
    assert _live_bytes() <= 2 * fresh, (fresh, drained, _live_bytes())
    # The range stays attached: new messages land in it and are read from it.
    [again] = pgq.send_batch(queue, ["after"])
    assert top <= again < top + SIZE
    [read] = pgq.read(queue, qty=5, vt=30)
    assert (read.msg_id, read.message) == (again, "after")
    # An empty partition under the threshold is left alone at the next runs.
    assert not any(a.startswith("truncate ") for a in partitions.run_maintenance())


@pytest.mark.parametrize("state", ["queued", "leased"])
def test_a_partition_with_one_message_left_is_never_truncated(in_a_fresh_range, queue, state):
    top = in_a_fresh_range
    name = f"pgq_message_r{top}"
    ids = _fill(queue, top)
    kept = ids[COUNT // 2]
    pgq.delete(queue, [i for i in ids if i != kept])
    if state == "leased":
        [leased] = pgq.read(queue, qty=1, vt=600)
        assert leased.msg_id == kept
    size = _bytes(name)
    assert size > partitions.RECLAIM_MIN_BYTES

    assert partitions.reclaim_drained_partitions(dry_run=True) == []
    actions = partitions.run_maintenance()

    assert not any(a.startswith("truncate ") for a in actions), actions
    assert _bytes(name) >= size
    message = Message.objects.get(msg_id=kept)
    assert message.read_ct == (1 if state == "leased" else 0)
    # A lease is intact (the message is not handed out again); a queued one is read; the ack
    # finds it either way.
    read = [m.msg_id for m in pgq.read(queue, qty=5, vt=30)]
    assert read == ([] if state == "leased" else [kept])
    assert pgq.delete(queue, [kept]) == [kept]


def test_the_dry_run_shows_the_truncate_and_changes_nothing(in_a_fresh_range, queue):
    top = in_a_fresh_range
    name = f"pgq_message_r{top}"
    ids = _fill(queue, top)
    pgq.delete(queue, ids)
    size = _bytes(name)

    out = StringIO()
    call_command("pgq_partitions", "--dry-run", stdout=out)

    mib = f"{size / 2**20:.1f}"
    assert f"would truncate {name} [{top}, {top + SIZE}) (drained, {mib} MiB)" in out.getvalue()
    assert _bytes(name) == size
    out = StringIO()
    call_command("pgq_partitions", stdout=out)
    assert f"truncate {name} [{top}, {top + SIZE}) (drained, {mib} MiB)" in out.getvalue()
    assert _bytes(name) < partitions.RECLAIM_MIN_BYTES


def test_a_busy_partition_is_skipped_not_waited_for(past_every_range_default, queue):
    """A session holding any lock on the partition (a pg_dump holds ACCESS SHARE on every
    table it dumps) makes the step give up after its short lock timeout, changing nothing."""
    name = "pgq_message_default"  # committed, so another session can lock it
    ids = pgq.send_batch(queue, [BODY] * COUNT)
    assert Message.objects.filter(msg_id__in=ids).count() == COUNT
    pgq.delete(queue, ids)
    size = _bytes(name)
    assert size > partitions.RECLAIM_MIN_BYTES
    with psycopg.connect(_conninfo(connection.settings_dict["NAME"])) as other:
        other.execute(f"LOCK TABLE {name} IN ACCESS SHARE MODE")

        assert partitions.reclaim_drained_partitions() == []

        assert _bytes(name) == size
        other.rollback()
    [action] = partitions.reclaim_drained_partitions()
    assert action.startswith(f"truncate {name} (drained, ")
    assert _bytes(name) < partitions.RECLAIM_MIN_BYTES


@pytest.fixture
def past_every_range_default(db: Any) -> Any:
    """The sequence past every range: sends land in the (committed) default partition."""
    with (
        sequence_kept(),
        override_settings(PGQ={"PARTITION_SIZE": SIZE, "PARTITION_PREMAKE": 1}),
    ):
        top = top_of_ranges()
        set_sequence(top + 10 * SIZE)
        yield top


def test_the_archive_is_never_truncated(in_a_fresh_range, make_queue):
    """Archived rows are kept by retention: an archive range with rows is no candidate, and
    an empty one is only ever dropped whole, after its live range."""
    top = in_a_fresh_range
    queue = make_queue(archive_on_ack=True).name
    ids = _fill(queue, top)
    pgq.delete(queue, ids)  # archived on ack
    archive = f"pgq_archived_message_r{top}"
    size = _bytes(archive)
    actions = partitions.run_maintenance()
    assert not any(a.startswith("truncate pgq_archived") for a in actions), actions
    assert _bytes(archive) == size
    assert ArchivedMessage.objects.filter(msg_id__in=ids).count() == COUNT
