"""Leases rewrite rows in place: the live partitions leave each page room for them.

A lease changes only ``vt`` and ``read_ct``, which no index covers, so it can be a HOT
update (the new row version on the same page, no index entry written) when the page has
room. A ``read(qty=100)`` rewrites every row of a page at once; with too little room most of
those versions move to other pages and insert into every index, which made a wide read
and its ack cost the server more than PGMQ's (docs/performance.md).
"""

from __future__ import annotations

from typing import Any

from django.db import connection

import pgq_django as pgq
from pgq_django.partitions import FILLFACTOR, MESSAGE_TABLE


def _blocks(queue: str) -> dict[int, int]:
    """msg_id -> the heap page its current row version is on."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT m.msg_id, (m.ctid::text::point)[0]::int FROM pgq_message m "
            "JOIN pgq_queue q ON q.id = m.queue_id WHERE q.name = %s",
            [queue],
        )
        return dict(cursor.fetchall())


def _fillfactors() -> dict[str, str]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname, o.option_value FROM pg_inherits i "
            "JOIN pg_class c ON c.oid = i.inhrelid "
            "CROSS JOIN LATERAL pg_options_to_table(c.reloptions) o "
            "WHERE i.inhparent = 'pgq_message'::regclass AND o.option_name = 'fillfactor'"
        )
        return dict(cursor.fetchall())


def test_every_live_partition_leaves_half_of_each_page_free(db: Any) -> None:
    found = _fillfactors()
    assert found, "the migrations made no live partition with a fillfactor"
    assert set(found.values()) == {str(FILLFACTOR[MESSAGE_TABLE])} == {"50"}
    assert "pgq_message_default" in found


def test_a_lease_of_every_row_on_a_page_keeps_each_row_on_its_page(db: Any) -> None:
    pgq.create_queue("lease_room")
    body = {"event": "order.created", "order_id": 12345, "note": "x" * 64}
    ids = pgq.send_batch("lease_room", [body] * 300)
    before = _blocks("lease_room")
    assert sorted(before) == sorted(ids)
    assert len(set(before.values())) < len(ids) // 10  # many rows share each page

    leased = pgq.read("lease_room", qty=100) + pgq.read("lease_room", qty=100)
    leased += pgq.read("lease_room", qty=100)
    assert sorted(m.msg_id for m in leased) == sorted(ids)

    after = _blocks("lease_room")
    moved = sorted(i for i in ids if after[i] != before[i])
    assert moved == [], f"{len(moved)} of {len(ids)} leased rows moved to another page"
