"""Partition upkeep for the message and archive tables.

Both tables are ``PARTITION BY RANGE (msg_id)`` with a DEFAULT partition. Upkeep keeps
``PGQ["PARTITION_PREMAKE"]`` ranges of ``PGQ["PARTITION_SIZE"]`` ids ready ahead of the
msg_id sequence, so new messages never land in the default partition, and drops a range once
every id in it has been handed out and no row is left in it: a drained range costs one
``DROP TABLE`` instead of millions of dead rows for VACUUM. Archive ranges go the same way
once retention has emptied them and their live range is gone.

Dropping a partition needs a short exclusive lock on the parent, so each drop runs in its own
transaction with a short ``lock_timeout`` (senders and readers queue behind a waiting lock):
under load it is skipped and tried at the next run rather than stalling them. The worker
leader runs :func:`run_maintenance`; ``manage.py pgq_partitions`` runs it on demand.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from django.db import OperationalError, transaction
from psycopg.sql import Identifier, Literal

from . import db
from .conf import settings
from .sql import partitions as sql

MESSAGE_TABLE = "pgq_message"
ARCHIVE_TABLE = "pgq_archived_message"
TABLES = (MESSAGE_TABLE, ARCHIVE_TABLE)
_BOUND = re.compile(r"FROM \('?(-?\d+)'?\) TO \('?(-?\d+)'?\)")


@dataclass(frozen=True)
class Partition:
    table: str
    name: str
    lower: int
    upper: int  # exclusive


def list_partitions(table: str) -> list[Partition]:
    rows = db.run_all(sql.LIST_PARTITIONS, [table], prepare=False)
    found = []
    for row in rows:
        match = _BOUND.search(row.bound or "")
        if match:  # the DEFAULT partition has no range
            found.append(Partition(table, row.name, int(match.group(1)), int(match.group(2))))
    return sorted(found, key=lambda p: p.lower)


def sequence_position() -> int:
    return int(db.run_one(sql.SEQUENCE_POSITION).position)


def _default_max_id(table: str) -> int:
    """The highest id sitting in the default partition (ranges must start above it)."""
    statement = sql.DEFAULT_MAX_ID.format(partition=Identifier(f"{table}_default"))
    return int(db.run_one(statement).max_id)


# Live partitions leave room on each page for HOT lease updates (see migration 0001).
FILLFACTOR = {MESSAGE_TABLE: 85, ARCHIVE_TABLE: 100}


def _create(table: str, lower: int, upper: int) -> str:
    name = f"{table}_r{lower}"
    statement = sql.CREATE_PARTITION.format(
        partition=Identifier(name),
        table=Identifier(table),
        lower=Literal(lower),
        upper=Literal(upper),
        fillfactor=Literal(FILLFACTOR[table]),
    )
    db.run_rowcount(statement)
    return name


# Most partitions premade ahead of the sequence in one run (per table). Each is a table and
# its indexes; a typo such as --premake 1000000 would otherwise create them for hours.
MAX_PREMAKE = 100


def premake_partitions(premake: int | None = None, *, dry_run: bool = False) -> list[str]:
    """Make sure ranges reach ``premake`` partition widths past the sequence; returns actions.

    ``premake`` is at most :data:`MAX_PREMAKE` (InvalidArgument otherwise, nothing made).
    """
    from .api.validation import integer

    size = int(settings.PARTITION_SIZE)
    ahead = settings.PARTITION_PREMAKE if premake is None else premake
    ahead = integer(ahead, "premake", minimum=0, maximum=MAX_PREMAKE)
    target = sequence_position() + ahead * size
    actions = []
    for table in TABLES:
        existing = list_partitions(table)
        lower = max([p.upper for p in existing] + [_default_max_id(table) + 1, 1])
        while lower <= target:
            upper = lower + size
            name = f"{table}_r{lower}"
            if not dry_run:
                with transaction.atomic(using=settings.DATABASE):
                    name = _create(table, lower, upper)
            actions.append(f"create {name} [{lower}, {upper})")
            lower = upper
    return actions


def _drop_if_empty(part: Partition, lock_timeout_ms: int) -> bool:
    """Lock the partition, and drop it if it holds no row; False when busy or not empty."""
    try:
        with transaction.atomic(using=settings.DATABASE):
            db.run_rowcount(sql.SET_LOCK_TIMEOUT.format(timeout=Literal(f"{lock_timeout_ms}ms")))
            # Holding the lock first means no insert into the range is still in flight.
            db.run_rowcount(sql.LOCK_PARENT.format(table=Identifier(part.table)))
            if _has_rows(part):
                return False
            db.run_rowcount(sql.DROP_PARTITION.format(partition=Identifier(part.name)))
            return True
    except OperationalError:  # lock_timeout: the queue is busy; try at the next run
        return False


def _has_rows(part: Partition) -> bool:
    statement = sql.PARTITION_HAS_ROWS.format(partition=Identifier(part.name))
    return bool(db.run_one(statement).has_rows)


def drop_drained_partitions(*, dry_run: bool = False, lock_timeout_ms: int = 100) -> list[str]:
    """Drop ranges whose ids are all handed out and that hold no rows; returns actions.

    A live range goes first; its archive range follows once retention has emptied it too.
    The range the sequence is in (and any ahead of it) is always kept.
    """
    position = sequence_position()
    live_lowers = {p.lower for p in list_partitions(MESSAGE_TABLE)}
    actions = []
    for table in TABLES:
        for part in list_partitions(table):
            if part.upper - 1 > position:
                continue
            if table == ARCHIVE_TABLE and part.lower in live_lowers:
                continue
            dropped = not _has_rows(part) if dry_run else _drop_if_empty(part, lock_timeout_ms)
            if dropped:
                actions.append(f"drop {part.name} [{part.lower}, {part.upper})")
                if table == MESSAGE_TABLE:
                    live_lowers.discard(part.lower)
    return actions


def run_maintenance(premake: int | None = None, *, dry_run: bool = False) -> list[str]:
    """Premake ranges ahead of the sequence, then drop drained ones; returns what it did."""
    return premake_partitions(premake, dry_run=dry_run) + drop_drained_partitions(dry_run=dry_run)
