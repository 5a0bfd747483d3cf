"""The PGMQ SQL interface's catalog equals real PGMQ 1.13.0's: every public function with the
same name, argument names, types, defaults and result, no extra overloads, and the same
record types, field for field.

The reference is PGMQ 1.13.0 installed from the SQL the ``pgmq`` 1.1.4 package bundles, into
a second database of the same server (tests/pgmq_support.py).
"""

from __future__ import annotations

from typing import Any

import psycopg

from tests.pgmq_support import pgmq_sql, reference_dsn

__all__ = ["pgmq_sql", "reference_dsn"]  # the fixtures, imported for the tests below

# PGMQ's functions we do not provide, each with the reason.
NOT_PROVIDED = {
    # Converts a PGMQ archive table to pg_partman partitions: there is no such table (the
    # archive is pgq_archived_message, partitioned by msg_id range already) and no pg_partman.
    "convert_archive_partitioned",
    # PGMQ's private helpers (leading underscore), called only by its own functions: the
    # extension lifecycle, pg_partman, and per-queue table creation, none of which exist here.
    "_belongs_to_pgmq",
    "_create_fifo_index_if_not_exists",
    "_ensure_pg_partman_installed",
    "_extension_exists",
    "_get_partition_col",
    "_get_pg_partman_major_version",
    "_get_pg_partman_schema",
    "_send_batch",
}
# Our private helpers: named "_pgq_…", so no client of PGMQ can mean one of them.
OURS_PREFIX = "_pgq_"

FUNCTIONS = r"""
SELECT p.proname::text AS name,
       pg_get_function_identity_arguments(p.oid) AS identity,
       pg_get_function_arguments(p.oid) AS arguments,
       pg_get_function_result(p.oid) AS result,
       p.prokind::text AS kind,
       p.proretset AS returns_set
FROM pg_proc p
WHERE p.pronamespace = 'pgmq'::regnamespace
ORDER BY 1, 2
"""

RECORD_TYPES = """
SELECT t.typname::text AS type, a.attnum AS position, a.attname::text AS field,
       format_type(a.atttypid, a.atttypmod) AS field_type
FROM pg_type t
JOIN pg_class c ON c.oid = t.typrelid AND c.relkind = 'c'
JOIN pg_attribute a ON a.attrelid = t.typrelid AND a.attnum > 0 AND NOT a.attisdropped
WHERE t.typnamespace = 'pgmq'::regnamespace
ORDER BY 1, 2
"""

META_COLUMNS = """
SELECT a.attname::text, format_type(a.atttypid, a.atttypmod)
FROM pg_attribute a
WHERE a.attrelid = 'pgmq.meta'::regclass AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum
"""


def _rows(dsn: str, query: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(query).fetchall()


def test_every_public_function_has_pgmqs_signature_and_no_extra_overload(
    pgmq_sql: str, reference_dsn: str
) -> None:
    theirs = [r for r in _rows(reference_dsn, FUNCTIONS) if r[0] not in NOT_PROVIDED]
    ours = [r for r in _rows(pgmq_sql, FUNCTIONS) if not r[0].startswith(OURS_PREFIX)]
    assert len(theirs) > 60  # the comparison is of PGMQ's whole surface
    assert ours == theirs
    # Every exclusion is a function PGMQ really has (the list does not hide a typo).
    names = {r[0] for r in _rows(reference_dsn, FUNCTIONS)}
    assert names >= NOT_PROVIDED


def test_the_record_types_match_field_for_field(pgmq_sql: str, reference_dsn: str) -> None:
    assert _rows(pgmq_sql, RECORD_TYPES) == _rows(reference_dsn, RECORD_TYPES)
    assert {r[0] for r in _rows(pgmq_sql, RECORD_TYPES)} == {
        "message_record",
        "queue_record",
        "metrics_result",
    }


def test_pgmq_meta_has_pgmqs_columns(pgmq_sql: str, reference_dsn: str) -> None:
    assert _rows(pgmq_sql, META_COLUMNS) == _rows(reference_dsn, META_COLUMNS)
