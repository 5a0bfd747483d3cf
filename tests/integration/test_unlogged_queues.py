"""Non-durable queues (``durable=False``): PGMQ's unlogged queues on the shared message table.

Their messages take ids from a second sequence, in UNLOGGED ranges of ``pgq_message``; every
operation a durable queue has works the same, and every path that makes a message draws its
id from the space of the queue it lands in. What a crash does to them is proven with a real
crash in tests/acceptance/test_unlogged_crash.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from io import StringIO
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.db import connection
from django.test import override_settings
from rest_framework.test import APIClient

import pgq_django as pgq
from pgq_django import partitions
from pgq_django.api import queues as queues_api
from pgq_django.models import ArchivedMessage, Message, Queue
from pgq_django.store.sql.fragments import TRANSIENT_FIRST_ID
from tests.conftest import sequence_kept, set_sequence, top_of_ranges

pytestmark = pytest.mark.django_db

SIZE = 100
JSON_SAFE = 2**53


# How long the upkeep calls in this file wait for their lock on the message table. Upkeep's own
# timeouts are short on purpose (it tries again at its next run); a test needs an answer. Any
# other session's lock on a partition makes them give up: one CI run of the py3.13 row lost
# three of the upkeep tests at once to such a lock (its holder was not recorded). An
# autovacuum of a partition is one such holder, cancelled for a waiting lock request only
# after deadlock_timeout (1 s).
PATIENT_MS = 10_000


@pytest.fixture(autouse=True)
def patient_first_ranges(monkeypatch: pytest.MonkeyPatch) -> None:
    """``create_queue(durable=False)`` gives up on its first ranges after a second's wait for
    ``pgq_message``'s lock (the busy-table test below shows that). Another session can hold
    that lock for about as long: an autovacuum of a partition is cancelled for a waiter only
    after ``deadlock_timeout``, also a second. In CI that race once deferred a queue's first
    range to upkeep and failed the premake test. Tests that assert where messages land wait
    as long as upkeep's calls here do."""
    monkeypatch.setattr(
        queues_api,
        "ensure_transient_ranges",
        partial(partitions.ensure_transient_ranges, lock_timeout_ms=PATIENT_MS),
    )


def _persistence(msg_id: int, table: str = "pgq_message") -> str:
    """'u' when the row sits in an UNLOGGED partition, 'p' in a logged one."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT c.relpersistence FROM {table} m JOIN pg_class c ON c.oid = m.tableoid "
            "WHERE m.msg_id = %s",
            [msg_id],
        )
        return str(cursor.fetchone()[0])


def _relpersistence(name: str) -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT relpersistence FROM pg_class WHERE oid = to_regclass(%s)", [name])
        return str(cursor.fetchone()[0])


def _transient(msg_id: int) -> bool:
    return TRANSIENT_FIRST_ID <= msg_id < JSON_SAFE


def test_a_non_durable_queue_sends_reads_nacks_archives_and_deletes(make_queue):
    q = make_queue(durable=False)
    assert q.durable is False
    one = pgq.send(q, {"n": 0})
    batch = pgq.send_batch(q, [{"n": i} for i in range(1, 6)])
    assert all(_transient(i) for i in [one, *batch])
    assert batch == sorted(batch) and batch[0] > one  # ids in input order, as durable ones

    read = pgq.read(q, qty=3, vt=30)
    assert [m.message["n"] for m in read] == [0, 1, 2]
    assert pgq.delete(q, read[0].receipt) is True
    assert pgq.archive(q, read[1].msg_id) is True
    assert pgq.nack(q, read[2].receipt, delay=0) is True
    again = pgq.read(q, qty=10, vt=30)
    assert [(m.message["n"], m.read_ct) for m in again] == [(2, 2), (3, 1), (4, 1), (5, 1)]
    assert pgq.read_by_id(q, batch[3]).message == {"n": 4}
    assert pgq.metrics(q).queue_length == 4

    archived = ArchivedMessage.objects.get(msg_id=read[1].msg_id)
    assert archived.message == {"n": 1}
    assert _persistence(archived.msg_id, "pgq_archived_message") == "p"  # archive is durable
    assert pgq.purge_queue(q) == 4


def test_its_messages_sit_in_unlogged_ranges_and_a_durable_queues_in_logged_ones(make_queue):
    durable, transient = make_queue(), make_queue(durable=False)
    kept = pgq.send(durable, "kept")
    fleeting = pgq.send(transient, "fleeting")
    assert kept < TRANSIENT_FIRST_ID <= fleeting
    assert _persistence(kept) == "p"
    assert _persistence(fleeting) == "u"
    pgq.archive(transient, fleeting)
    assert _persistence(fleeting, "pgq_archived_message") == "p"


def test_every_path_that_makes_a_message_draws_from_its_queues_space(make_queue):
    durable, transient = make_queue(), make_queue(durable=False)
    fanout = pgq.create_exchange("x_" + durable.name, "fanout")
    pgq.bind_queue(durable, fanout)
    pgq.bind_queue(transient, fanout)

    published = pgq.publish(fanout, {"p": 1})
    deduplicated = pgq.publish(fanout, {"p": 2}, dedup_id="d1")
    sent_once = pgq.send(transient, "once", dedup_id="d2")
    assert pgq.send(transient, "once", dedup_id="d2") == sent_once  # the claim held
    for ids in (published, deduplicated):
        by_queue = dict(Message.objects.filter(msg_id__in=ids).values_list("queue_id", "msg_id"))
        assert by_queue[durable.pk] < TRANSIENT_FIRST_ID <= by_queue[transient.pk]
    assert _transient(sent_once)

    # Replay from the archive: into the queue it names, in that queue's space either way.
    pgq.archive(transient, sent_once)
    [back] = pgq.replay(transient, [sent_once])
    [across] = pgq.replay(transient, [sent_once], to=durable)
    assert _transient(back) and back > sent_once
    assert across < TRANSIENT_FIRST_ID
    assert _persistence(back) == "u" and _persistence(across) == "p"


def test_a_failing_message_is_retried_and_dead_lettered_keeping_its_id(make_queue):
    """Moves between queues keep the msg_id, so a message keeps the storage it was sent to."""
    dlq = make_queue(durable=False)
    q = make_queue(durable=False, max_retries=1, retry_delay=0, dead_letter_queue=dlq)
    msg_id = pgq.send(q, "fails")
    for _ in range(2):
        [m] = pgq.read(q, vt=30)
        pgq.nack(q, m.receipt, delay=0)
    assert pgq.read(q) == []
    [dead] = pgq.read(dlq, vt=30)
    assert dead.msg_id == msg_id and _persistence(msg_id) == "u"
    assert dead.headers["pgq_dead_letter"]["attempts"] == 2


def test_durability_is_fixed_when_the_queue_is_created(make_queue):
    durable, transient = make_queue(), make_queue(durable=False)
    for q, other in ((durable, False), (transient, True)):
        with pytest.raises(pgq.InvalidArgument, match="durability cannot change") as caught:
            pgq.alter_queue(q, durable=other)
        assert caught.value.details["field"] == "durable"
        assert Queue.objects.get(pk=q.pk).durable is (not other)
        assert pgq.alter_queue(q, durable=not other).durable is (not other)  # no change: fine
    with pytest.raises(pgq.QueueAlreadyExists):
        pgq.create_queue(durable.name, durable=False)
    assert Queue.objects.get(pk=durable.pk).durable is True


@pytest.mark.parametrize("value", ["no", 0, 1, None])
def test_durable_must_be_a_boolean(queue_name, value):
    if value is None:  # None is "not given" for every create_queue setting: the default
        assert pgq.create_queue(queue_name, durable=value).durable is True
        return
    with pytest.raises(pgq.InvalidArgument, match="durable must be True or False"):
        pgq.create_queue(queue_name, durable=value)
    assert not Queue.objects.filter(name=queue_name).exists()


def test_rest_creates_a_non_durable_queue_and_shows_durability(queue_name):
    user = get_user_model().objects.create_superuser("root_" + queue_name, "r@example.com", "pw")
    api = APIClient()
    api.force_authenticate(user)
    made = api.post("/v1/queues", {"id": queue_name, "durable": False}, format="json")
    assert made.status_code == 201, made.content
    assert made.json()["durable"] is False
    assert api.get(f"/v1/queues/{queue_name}").json()["durable"] is False
    bad = api.post("/v1/queues", {"id": queue_name + "b", "durable": "yes"}, format="json")
    assert bad.status_code == 400
    changed = api.put(f"/v1/queues/{queue_name}", {"durable": True}, format="json")
    assert changed.status_code == 400  # not a setting a change may give
    assert Queue.objects.get(name=queue_name).durable is False
    assert not Queue.objects.filter(name=queue_name + "b").exists()


# -- upkeep of both id spaces ---------------------------------------------------------------


def set_transient(value: int) -> None:
    set_sequence(value, partitions.TRANSIENT)


@pytest.fixture
def transient_top(db: Any) -> Iterator[int]:
    """The second sequence just past its highest range, tiny ranges; restored after (the DDL
    rolls back with the test's transaction, setval does not)."""
    with (
        sequence_kept(partitions.TRANSIENT),
        override_settings(PGQ={"PARTITION_SIZE": SIZE, "PARTITION_PREMAKE": 1}),
    ):
        top = top_of_ranges(partitions.TRANSIENT)
        set_transient(top + 5)
        yield top


def _bounds(action: str) -> tuple[int, int]:
    """The [lower, upper) an upkeep action line names."""
    lower, upper = action.split("[")[1].split(")")[0].split(", ")
    return int(lower), int(upper)


def _created(actions: list[str], space: partitions.IdSpace) -> list[str]:
    return [
        a
        for a in actions
        if a.startswith("create ") and partitions.space_of(_bounds(a)[0]) is space
    ]


def test_premake_makes_unlogged_ranges_ahead_of_the_second_sequence(transient_top, make_queue):
    top = transient_top
    durable_before = partitions.list_partitions("pgq_message", partitions.DURABLE)
    # No non-durable queue: nothing in the second space, whatever premake says.
    actions = partitions.premake_partitions(3)
    assert _created(actions, partitions.TRANSIENT) == []
    # Durable ranges follow the durable sequence only: none made in the far space.
    for action in _created(actions, partitions.DURABLE):
        assert "unlogged" not in action
    durable_now = partitions.list_partitions("pgq_message", partitions.DURABLE)
    assert all(p.upper <= TRANSIENT_FIRST_ID for p in durable_now)
    assert set(durable_before) <= set(durable_now)

    # Creating one makes the ranges its first ids need (unlogged live, logged archive) ...
    q = make_queue(durable=False)
    assert _relpersistence(f"pgq_message_r{top}") == "u"
    assert _relpersistence(f"pgq_message_r{top + SIZE}") == "u"
    assert _relpersistence(f"pgq_archived_message_r{top}") == "p"
    with connection.cursor() as cursor:
        cursor.execute("SHOW lock_timeout")
        assert cursor.fetchone()[0] == "0"  # the caller's transaction keeps its own
    # ... and from then on premake keeps all its ranges ahead.
    planned = partitions.premake_partitions(3, dry_run=True)
    assert _created(planned, partitions.TRANSIENT)[:2] == [
        f"create pgq_message_r{top + 2 * SIZE} [{top + 2 * SIZE}, {top + 3 * SIZE}) unlogged",
        f"create pgq_message_r{top + 3 * SIZE} [{top + 3 * SIZE}, {top + 4 * SIZE}) unlogged",
    ]
    assert f"pgq_message_r{top + 2 * SIZE}" not in {
        p.name for p in partitions.list_partitions("pgq_message")
    }  # the dry run made nothing
    out = StringIO()
    call_command("pgq_partitions", "--premake", "3", "--dry-run", stdout=out)
    assert f"would create pgq_message_r{top + 2 * SIZE} " in out.getvalue()
    assert f"[{top + 2 * SIZE}, {top + 3 * SIZE}) unlogged" in out.getvalue()

    msg_id = pgq.send(q, "here")
    assert top <= msg_id < top + SIZE
    assert _persistence(msg_id) == "u"


def test_drained_ranges_of_each_space_go_by_their_own_sequence(transient_top, make_queue):
    top = transient_top
    q = make_queue(durable=False)
    partitions.premake_partitions()
    [msg_id] = pgq.send_batch(q, ["x"])
    assert top <= msg_id < top + SIZE
    durable_position = partitions.sequence_position(partitions.DURABLE)
    ahead = {
        p.name
        for p in partitions.list_partitions("pgq_message", partitions.DURABLE)
        if p.upper - 1 > durable_position
    }
    set_transient(top + SIZE + 5)  # the second sequence has passed [top, top + SIZE)
    # It still holds a message: kept.
    assert f"pgq_message_r{top} " not in " ".join(
        partitions.drop_drained_partitions(lock_timeout_ms=PATIENT_MS)
    )

    pgq.delete(q, msg_id)
    dropped = partitions.drop_drained_partitions(lock_timeout_ms=PATIENT_MS)
    assert f"drop pgq_message_r{top} [{top}, {top + SIZE})" in dropped
    assert f"drop pgq_archived_message_r{top} [{top}, {top + SIZE})" in dropped
    remaining = {p.name for p in partitions.list_partitions("pgq_message")}
    assert f"pgq_message_r{top + SIZE}" in remaining  # the one the sequence is in stays
    assert ahead <= remaining  # durable ranges ahead of the durable sequence all stay


def _unlogged_tables() -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "WHERE i.inhparent = 'pgq_message'::regclass AND c.relpersistence = 'u'"
        )
        return [row[0] for row in cursor.fetchall()]


def test_once_no_non_durable_queue_is_left_its_empty_unlogged_ranges_go(transient_top, make_queue):
    """No UNLOGGED table outlives the last non-durable queue: a hot standby refuses to open
    one, so it would fail any query of pgq_message there that is not pruned."""
    top = transient_top
    q = make_queue(durable=False)
    pgq.delete(q, pgq.send(q, "gone"))
    assert _unlogged_tables()
    kept = partitions.drop_drained_partitions(
        lock_timeout_ms=PATIENT_MS
    )  # the queue may still send
    assert not [a for a in kept if partitions.space_of(_bounds(a)[0]) is partitions.TRANSIENT]
    pgq.drop_queue(q)
    dropped = partitions.drop_drained_partitions(lock_timeout_ms=PATIENT_MS)
    assert f"drop pgq_message_r{top} [{top}, {top + SIZE})" in dropped
    assert _unlogged_tables() == []
    assert not [a for a in partitions.premake_partitions() if "unlogged" in a]  # none again

    again = make_queue(durable=False)  # a new one starts at the sequence's slot
    msg_id = pgq.send(again, "back")
    assert msg_id >= top and _persistence(msg_id) == "u"


def test_rows_of_a_non_durable_queue_in_the_default_are_repaired_into_an_unlogged_range(
    transient_top, make_queue
):
    top = transient_top
    q = make_queue(durable=False)
    set_transient(top + 10 * SIZE + 5)  # no range there: the send lands in the default
    msg_id = pgq.send(q, "stray")
    assert _persistence(msg_id) == "p"  # the default partition is logged
    lower = top + 10 * SIZE
    assert partitions.repair_default(dry_run=True) == [
        f"repair pgq_message_default: 1 rows into pgq_message_r{lower} [{lower}, {lower + SIZE})"
    ]
    # A row of the second space in the default pushes no range across the spaces' border.
    for action in partitions.premake_partitions(dry_run=True):
        low, high = _bounds(action)
        assert high <= TRANSIENT_FIRST_ID or low >= TRANSIENT_FIRST_ID
    assert partitions.repair_default(lock_timeout_ms=PATIENT_MS) == [
        f"repair pgq_message_default: 1 rows into pgq_message_r{lower} [{lower}, {lower + SIZE})"
    ]
    assert _persistence(msg_id) == "u"
    assert pgq.read(q, vt=30)[0].msg_id == msg_id


@pytest.mark.parametrize("durable", [True, False])
def test_a_batch_gets_ids_in_input_order_in_either_space(make_queue, durable):
    """The id is drawn in the insert's select list now (not the column default): it must
    still be drawn after the rows are put in input order."""
    q = make_queue(durable=durable)
    ids = pgq.send_batch(q, [{"n": i} for i in range(200)])
    stored = dict(Message.objects.filter(msg_id__in=ids).values_list("msg_id", "message"))
    assert [stored[i]["n"] for i in ids] == list(range(200))


def test_a_busy_message_table_does_not_hold_up_create_queue_and_upkeep_catches_up(
    transient_top, make_queue, monkeypatch
):
    """Making the first unlogged range needs pgq_message's exclusive lock; create_queue
    waits for it no longer than a second, and the queue's first messages land in the
    (logged) default partition until the next upkeep run moves them into their range."""
    import psycopg

    from pgq_django.store.notify import connection_params

    monkeypatch.setattr(queues_api, "ensure_transient_ranges", partitions.ensure_transient_ranges)
    top = transient_top
    with psycopg.connect(**connection_params()) as other:
        other.execute("LOCK TABLE pgq_message IN ACCESS SHARE MODE")  # a long reader
        q = make_queue(durable=False)
        other.rollback()
    assert f"pgq_message_r{top}" not in {p.name for p in partitions.list_partitions("pgq_message")}
    msg_id = pgq.send(q, "early")
    assert _persistence(msg_id) == "p"
    with connection.cursor() as cursor:
        cursor.execute("SHOW lock_timeout")
        assert cursor.fetchone()[0] == "0"  # the timeout went back with the savepoint

    partitions.run_maintenance()

    assert _persistence(msg_id) == "u"
    assert pgq.read(q, vt=30)[0].msg_id == msg_id


@pytest.mark.django_db(transaction=True)
def test_the_relaxed_commit_of_a_non_durable_send_never_outlives_its_own_transaction(
    make_queue,
):
    """A send that is its own transaction into a non-durable queue commits without waiting
    for the WAL flush; a send inside the caller's transaction must leave the caller's commit
    as it was, and nothing carries over to the next transaction."""
    from django.db import transaction

    durable, transient = make_queue(), make_queue(durable=False)

    def setting() -> str:
        with connection.cursor() as cursor:
            cursor.execute("SHOW synchronous_commit")
            return str(cursor.fetchone()[0])

    assert pgq.send(transient, "own transaction") and setting() == "on"
    with transaction.atomic():
        pgq.send_batch(transient, ["inside", "the caller's"])
        pgq.send(durable, "its own rows")
        assert setting() == "on"
    assert [m.message for m in pgq.read(transient, qty=5)] == [
        "own transaction",
        "inside",
        "the caller's",
    ]
