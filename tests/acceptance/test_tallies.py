"""Counters of autocommit sends and acks, summed per process (pgq_django.store.tallies)."""

from __future__ import annotations

import json
import multiprocessing
import threading

import pytest
from django.db import connections, transaction
from django.db.models import Sum

import pgq_django as pgq
from pgq_django.models import QueueCounter
from pgq_django.store import tallies
from tests.conftest import wait_until

pytestmark = pytest.mark.django_db(transaction=True)
# The store's services under test: this process runs them, as a worker's does.
RUNS_SERVICES = True


def _stored(queue: pgq.Queue, kind: str) -> int:
    total = QueueCounter.objects.filter(queue=queue, kind=kind).aggregate(n=Sum("n"))["n"]
    return int(total or 0)


def test_autocommit_counts_reach_the_metrics_and_the_counter_rows(make_queue):
    q = make_queue()
    for n in range(5):
        pgq.send(q, {"n": n})
    got = pgq.read(q, qty=3)
    pgq.delete(q, [m.receipt for m in got])
    # The statements wrote no counter row themselves; metrics write this process's sums.
    assert pgq.metrics(q).total_messages == 5
    assert (_stored(q, "sent"), _stored(q, "acked")) == (5, 3)
    tallies.flush()  # nothing left to write: the sums went out once
    assert (_stored(q, "sent"), _stored(q, "acked")) == (5, 3)
    # One row per queue, kind and minute, not one per statement.
    assert QueueCounter.objects.filter(queue=q, kind="sent").count() <= 2


def test_a_reader_waits_for_sums_the_thread_took_and_is_still_writing(make_queue):
    """The flusher thread may take the sums just before a reader's own flush: the reader
    then finds nothing to write, and must not read the counters before that write commits."""
    q = make_queue()
    holder = connections.create_connection("default")
    try:
        holder.set_autocommit(False)
        with holder.cursor() as cursor:  # the thread's insert waits behind this lock
            cursor.execute("LOCK TABLE pgq_queue_counter IN SHARE MODE")
        pgq.send(q, {"n": 1})

        def write() -> None:  # as the pgq-tallies thread does
            try:
                tallies.flusher.flush()
            finally:
                connections.close_all()

        writer = threading.Thread(target=write)
        writer.start()
        wait_until(lambda: not tallies.flusher.pending, what="a writer to take the sums")
        seen: list[int] = []

        def read() -> None:
            try:
                seen.append(pgq.metrics(q).total_messages)
            finally:
                connections.close_all()

        reader = threading.Thread(target=read)
        reader.start()
        reader.join(0.5)  # long enough for a reader that does not wait to have read 0
    finally:
        holder.rollback()
        holder.close()
    writer.join(30)
    reader.join(30)
    assert seen == [1]


def test_counts_inside_a_transaction_roll_back_with_it(make_queue):
    q = make_queue()
    with transaction.atomic():
        pgq.send(q, {"kept": True})
    with pytest.raises(RuntimeError), transaction.atomic():
        pgq.send(q, {"kept": False})
        raise RuntimeError("roll back")
    assert pgq.metrics(q).total_messages == 1


def test_counts_of_a_dropped_queue_are_left_out_without_losing_the_others(make_queue):
    gone, kept = make_queue(), make_queue()
    pgq.send(gone, {"n": 1})
    pgq.send(kept, {"n": 2})
    pgq.drop_queue(gone.name)
    tallies.flush()
    assert _stored(kept, "sent") == 1
    assert not QueueCounter.objects.filter(queue_id=gone.pk).exists()


def test_counts_made_in_a_database_the_alias_no_longer_names_are_dropped(make_queue, caplog):
    """As at the end of a test run: the test database is destroyed and the alias gets its
    first NAME back before the process exits. The counts went with their database; they are
    neither written to the other one nor reported as a failed write."""
    q = make_queue()
    pgq.send(q, {"n": 1})  # pending: counted in this database
    settings_dict = connections["default"].settings_dict
    name = settings_dict["NAME"]
    settings_dict["NAME"] = f"{name}_first_name"
    try:
        with caplog.at_level("DEBUG", logger="pgq_django.store.tallies"):
            tallies.flush()
    finally:
        settings_dict["NAME"] = name
    assert [r.message for r in caplog.records] == [
        "event=tally_dropped alias=default reason=database_changed"
    ]
    tallies.flush()  # nothing was put back
    assert _stored(q, "sent") == 0
    pgq.send(q, {"n": 2})  # counted and written as usual once the name is the same
    tallies.flush()
    assert _stored(q, "sent") == 1


SENDER = """
import sys
import django
django.setup()
import pgq_django as pgq
for n in range(7):
    pgq.send(sys.argv[1], {"n": n})
"""


def test_another_process_writes_its_counts_by_the_time_it_exits(make_queue, spawn):
    q = make_queue()
    child = spawn("-c", SENDER, q.name)
    _out, err = child.communicate(timeout=120)
    assert child.returncode == 0, err
    assert pgq.metrics(q).total_messages == 7


def _child_flushes() -> None:
    tallies.flush()
    connections.close_all()


def test_a_forked_child_does_not_write_its_parents_pending_counts_again(make_queue):
    q = make_queue()
    pgq.send(q, {"n": 1})  # pending in this process
    connections.close_all()
    child = multiprocessing.get_context("fork").Process(target=_child_flushes)
    child.start()
    child.join(timeout=60)
    assert child.exitcode == 0
    tallies.flush()
    assert _stored(q, "sent") == 1


THREADS_OF_A_SENDER = """
import json
import sys
import threading

import django
django.setup()
from django.db.models import Sum
from django.test import override_settings

import pgq_django as pgq
from pgq_django.conf import settings
from pgq_django.models import QueueCounter

with override_settings(PGQ={**settings.user_settings, "BACKGROUND_SERVICES": sys.argv[2] == "on"}):
    for n in range(5):
        pgq.send(sys.argv[1], {"n": n})
    stored = QueueCounter.objects.filter(queue__name=sys.argv[1]).aggregate(n=Sum("n"))["n"]
    threads = sorted(t.name for t in threading.enumerate() if t.name.startswith("pgq-"))
    print(json.dumps({"threads": threads, "stored": stored or 0}))
"""


@pytest.mark.parametrize("services", ["on", "off"])
def test_background_services_are_the_only_threads_a_sender_starts(make_queue, spawn, services):
    """With them on, a process that only sends starts the counter flusher (its sums are
    written later); with ``BACKGROUND_SERVICES`` off it starts no thread at all and each
    send has written its own counter row by the time it returns."""
    q = make_queue()
    child = spawn("-c", THREADS_OF_A_SENDER, q.name, services)
    out, err = child.communicate(timeout=120)
    assert child.returncode == 0, err
    seen = json.loads(out.strip().splitlines()[-1])
    if services == "on":
        assert "pgq-tallies" in seen["threads"]
        assert set(seen["threads"]) <= {"pgq-tallies", "pgq-wakeups"}
    else:
        assert seen == {"threads": [], "stored": 5}
    assert pgq.metrics(q).total_messages == 5
