"""Partition upkeep for the message and archive tables.

Both tables are ``PARTITION BY RANGE (msg_id)`` with a DEFAULT partition. One upkeep run
(:func:`run_maintenance`; the worker leader runs it every maintenance interval and
``manage.py pgq_partitions`` on demand) does, in this order:

1. **repair**: rows that landed in a DEFAULT partition (the sequence outran the premade
   ranges) move into a proper range partition made for them (:func:`repair_default`);
2. **premake**: ``PGQ["PARTITION_PREMAKE"]`` ranges of ``PGQ["PARTITION_SIZE"]`` ids stay
   ready ahead of the msg_id sequence, so new messages never land in the default partition;
   live partitions get the autovacuum settings of ``PGQ["LIVE_PARTITION_STORAGE"]``;
3. **drop**: a live range whose ids have all been handed out and that holds no row goes with
   one ``DROP TABLE`` instead of millions of dead rows for VACUUM; its archive range follows
   once it is empty, or once every row in it is past its queue's retention (and, with
   ``PGQ["ARCHIVE_DROP_REQUIRES_EXPORT"]``, covered by a recorded Spark export);
4. **reclaim**: a live range the sequence has not passed yet (or the live default partition)
   that holds no row but still takes more than :data:`RECLAIM_MIN_BYTES` of dead rows and
   index entries is emptied with ``TRUNCATE`` under its own ACCESS EXCLUSIVE lock: a queue
   that drained gives its disk back at once instead of when traffic fills the range.

Two id spaces. Durable queues draw msg_ids from ``pgq_message_msg_id_seq`` (1 up to just
below ``TRANSIENT_FIRST_ID``, 4 * 10**15); non-durable queues (``durable=False``) from
``pgq_message_transient_id_seq`` (from there up to 2**53 - 1, still exact in JSON). The live
ranges of the second space are UNLOGGED partitions of the same parent, the archive's are
logged. Every step above works on each space against its own sequence (:data:`SPACES`): a
range of the second space is never "ahead" of the durable sequence, nor passed by it. The
second space has ranges only while a non-durable queue exists: ``create_queue(durable=False)``
makes the first ones (:func:`ensure_transient_ranges`), premake keeps ``PARTITION_PREMAKE``
ahead of its sequence while such a queue exists, and the drop step removes its empty live
ranges once none does. So a project that never makes one has no UNLOGGED table, and a hot
standby (where PostgreSQL refuses to open one) can still scan ``pgq_message``.

Safety. Only one run changes anything at a time: each holds an advisory lock and a second
run that finds it taken does nothing (two leaders for a moment, or the command run beside a
worker). The lock is transaction-scoped, held in a transaction of a connection of its own
that stays open for the run, so it also holds behind a transaction-mode pooler (a session
lock taken through PgBouncer would stay on a server connection that moves on to other
clients). Each change is its own short transaction that takes the parent's ACCESS
EXCLUSIVE lock under a short ``lock_timeout`` and re-checks its condition under that lock, so
no insert into the range can be in flight; under load it is skipped and tried at the next
run rather than stalling senders and readers (who queue behind a waiting lock).
``DETACH PARTITION … CONCURRENTLY`` would avoid that lock, but PostgreSQL refuses it on a
table that has a DEFAULT partition, and the default partition is what keeps a send from
ever failing for want of a range: see docs/operations.md.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from django.db import IntegrityError, OperationalError, transaction
from psycopg import sql

from ..conf import settings
from ..exceptions import InvalidArgument
from ..models import Queue, SparkExport
from ..validation import integer
from . import db
from .notify import connection_params
from .sql import partitions as statements
from .sql.fragments import (
    LAST_MSG_ID,
    MSG_ID_SEQUENCE,
    TRANSIENT_FIRST_ID,
    TRANSIENT_MSG_ID_SEQUENCE,
)

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


@dataclass(frozen=True)
class IdSpace:
    """The msg_ids one sequence hands out: ``[first, end)``, in ranges of one persistence."""

    name: str
    first: int
    end: int  # exclusive
    sequence: str
    unlogged: bool  # its live ranges are UNLOGGED (the archive's are always logged)


DURABLE = IdSpace("durable", 1, TRANSIENT_FIRST_ID, MSG_ID_SEQUENCE, unlogged=False)
TRANSIENT = IdSpace(
    "transient", TRANSIENT_FIRST_ID, LAST_MSG_ID + 1, TRANSIENT_MSG_ID_SEQUENCE, unlogged=True
)
SPACES = (DURABLE, TRANSIENT)


def space_of(msg_id: int) -> IdSpace:
    """The id space ``msg_id`` (or a range starting there) belongs to."""
    return TRANSIENT if msg_id >= TRANSIENT_FIRST_ID else DURABLE


# The statements run through the one runner (pgq_django.store.db) on the queue database, never
# prepared: their texts vary with the identifiers filled in, and upkeep runs rarely.


def _one(statement: str | sql.Composable, params: Any = None) -> Any:
    """The statement's first row (named fields)."""
    return db.run_one(statement, params, prepare=False)


def _all(statement: str | sql.Composable, params: Any = None) -> list[Any]:
    """Every row of the statement (named fields)."""
    return db.run_all(statement, params, prepare=False)


def _run(statement: str | sql.Composable, params: Any = None) -> int:
    """Run a statement for its effect (DDL, locks, moves); returns the rows it touched."""
    return db.run_rowcount(statement, params, prepare=False)


def list_partitions(table: str, space: IdSpace | None = None) -> list[Partition]:
    """The range partitions of ``table``, lowest first; only those of ``space`` if given."""
    rows = _all(statements.LIST_PARTITIONS, [table])
    found = []
    for name, bound in rows:
        match = _BOUND.search(bound or "")
        if match:  # the DEFAULT partition has no range
            part = Partition(table, name, int(match.group(1)), int(match.group(2)))
            if space is None or space_of(part.lower) is space:
                found.append(part)
    return sorted(found, key=lambda p: p.lower)


def sequence_position(space: IdSpace = DURABLE) -> int:
    """The highest msg_id of ``space`` handed out so far (one below its first before any)."""
    statement = statements.SEQUENCE_POSITION.format(sequence=sql.Identifier(space.sequence))
    return int(_one(statement)[0])


def _default(table: str) -> sql.Identifier:
    return sql.Identifier(f"{table}_default")


def _default_max_id(table: str, space: IdSpace) -> int:
    """The highest id of ``space`` in the default partition (its ranges must start above)."""
    statement = statements.DEFAULT_MAX_ID.format(partition=_default(table))
    found = _one(statement, [space.first, space.end])[0]
    return space.first - 1 if found is None else int(found)


def _transient_queues_exist() -> bool:
    return Queue.objects.using(settings.DATABASE).filter(durable=False).exists()


def _lock_timeout(lock_timeout_ms: int) -> None:
    """In the current transaction: wait at most this long for any lock."""
    _set_lock_timeout(f"{lock_timeout_ms}ms")


def _set_lock_timeout(value: str) -> None:
    _run(statements.SET_LOCK_TIMEOUT.format(timeout=sql.Literal(value)))


class Busy(OperationalError):
    """A table upkeep would lock is held by a long transaction: left for the next run."""


def _wait_for_lock(table: str, lock_timeout_ms: int) -> None:
    """Set the transaction's lock timeout, or raise :class:`Busy` at once when a long
    transaction holds a lock on ``table`` (or on a partition of it): an exclusive lock queued
    behind it would hold up every send and read for the whole timeout and then fail anyway.
    """
    if _one(statements.LONG_LOCK_HOLDER, [table])[0]:
        raise Busy(f"a long transaction holds a lock on {table}")
    _lock_timeout(lock_timeout_ms)


def _exclusive(table: str, lock_timeout_ms: int) -> None:
    """In the current transaction: lock ``table`` exclusively, waiting at most the timeout."""
    _wait_for_lock(table, lock_timeout_ms)
    _run(statements.LOCK_PARENT.format(table=sql.Identifier(table)))


# -- storage ---------------------------------------------------------------------------------

# Live partitions leave half of each page free, so that a lease, even one of every row on a
# page (read qty=100), is a HOT update that writes no index entry (see migration 0009).
FILLFACTOR = {MESSAGE_TABLE: 50, ARCHIVE_TABLE: 100}

# How many queues the planner assumes a live range's rows belong to (migration 0010). A
# read picks a queue's oldest visible rows through the (queue_id, priority, msg_id) index,
# but the queue's id is known only when the statement runs, so the planner estimates its
# rows as the partition's rows / n_distinct(queue_id). ANALYZE measures that on projects
# with a few queues as 1 to 5: "every row is this queue's", and a read of a partition of a
# few thousand messages was planned as a scan of the whole partition and a sort, many times
# slower than the index walk. Any value this large keeps reads on the index at every size.
QUEUE_ID_DISTINCT = 1000
_OPTION_NAME = re.compile(r"^[a-z_]{1,63}$")


def storage_options(table: str) -> dict[str, Any]:
    """The storage parameters a new partition of ``table`` is created with."""
    options: dict[str, Any] = {"fillfactor": FILLFACTOR[table]}
    if table == MESSAGE_TABLE:
        options.update(settings.LIVE_PARTITION_STORAGE or {})
    for name, value in options.items():
        if not _OPTION_NAME.match(name) or not isinstance(value, int | float | bool):
            raise InvalidArgument(
                f"LIVE_PARTITION_STORAGE: {name!r} = {value!r} is not a storage parameter "
                "name with a number or boolean value.",
                field="LIVE_PARTITION_STORAGE",
            )
    return options


def _storage_sql(options: dict[str, Any]) -> sql.Composable:
    # Names are checked against _OPTION_NAME (storage parameter names cannot be parameters).
    return sql.SQL(", ").join(
        sql.SQL("{} = {}").format(sql.SQL(name), sql.Literal(value))
        for name, value in options.items()
    )


def _current_storage(name: str) -> dict[str, str]:
    row = _one(statements.PARTITION_STORAGE, [name])
    return dict(option.split("=", 1) for option in (row[0] if row else []))


def _storage_differs(name: str, wanted: dict[str, Any]) -> bool:
    current = _current_storage(name)
    return any(current.get(k) != sql.Literal(v).as_string(None) for k, v in wanted.items())


def tune_live_partitions(*, dry_run: bool = False) -> list[str]:
    """Give existing live partitions (and the default) the storage a new one would get,
    and the ranges the planner's queue count (:data:`QUEUE_ID_DISTINCT`, used from their
    next ANALYZE).

    ``ALTER TABLE … SET (…)`` and ``ALTER COLUMN … SET (…)`` take a SHARE UPDATE EXCLUSIVE
    lock, which does not block sends, reads or acks.
    """
    wanted = storage_options(MESSAGE_TABLE)
    default = f"{MESSAGE_TABLE}_default"
    names = [p.name for p in list_partitions(MESSAGE_TABLE)] + [default]
    actions = []
    for name in names:
        if _storage_differs(name, wanted):
            if not dry_run:
                statement = statements.SET_STORAGE.format(
                    partition=sql.Identifier(name), storage=_storage_sql(wanted)
                )
                _run(statement)
            actions.append(f"tune {name} ({', '.join(f'{k}={v}' for k, v in wanted.items())})")
        if name == default:
            continue  # empty unless ids outran the ranges; its plans stay measured
        row = _one(statements.QUEUE_ID_DISTINCT, [name])
        if row is not None and row[0] != str(QUEUE_ID_DISTINCT):
            if not dry_run:
                _plan_queues(name)
            actions.append(f"tune {name} (queue_id n_distinct={QUEUE_ID_DISTINCT})")
    return actions


def _unlogged(table: str, lower: int) -> bool:
    """Whether a range of ``table`` starting at ``lower`` is UNLOGGED (live, second space)."""
    return table == MESSAGE_TABLE and space_of(lower).unlogged


def _create(table: str, lower: int, upper: int) -> str:
    name = f"{table}_r{lower}"
    create = (
        statements.CREATE_UNLOGGED_PARTITION
        if _unlogged(table, lower)
        else statements.CREATE_PARTITION
    )
    statement = create.format(
        partition=sql.Identifier(name),
        table=sql.Identifier(table),
        lower=sql.Literal(lower),
        upper=sql.Literal(upper),
        storage=_storage_sql(storage_options(table)),
    )
    _run(statement)
    if table == MESSAGE_TABLE:
        _plan_queues(name)
    return name


def _plan_queues(partition: str) -> None:
    _run(
        statements.SET_QUEUE_ID_DISTINCT.format(
            partition=sql.Identifier(partition), n=sql.Literal(QUEUE_ID_DISTINCT)
        )
    )


# -- premake ---------------------------------------------------------------------------------

# Most partitions premade ahead of the sequence in one run (per table). Each is a table and
# its indexes; a typo such as --premake 1000000 would otherwise create them for hours.
MAX_PREMAKE = 100

# How long making a range may wait for the parent's and the default partition's locks.
# A reader in a long transaction that scanned ``pgq_message`` holds a lock that conflicts;
# sends and reads queue behind a waiting lock, so the wait is kept short and retried at the
# next run, while the ranges premade ahead take the sends meanwhile.
PREMAKE_LOCK_TIMEOUT_MS = 100


def premake_partitions(premake: int | None = None, *, dry_run: bool = False) -> list[str]:
    """Make sure ranges reach ``premake`` partition widths past the sequence; returns actions.

    Each id space against its own sequence; the non-durable one only while a non-durable
    queue exists. ``premake`` is at most
    :data:`MAX_PREMAKE` (InvalidArgument otherwise, nothing made).
    """
    return list(_premake(premake, dry_run=dry_run))


def _premake(premake: int | None, *, dry_run: bool) -> Iterator[str]:
    size = int(settings.PARTITION_SIZE)
    ahead = settings.PARTITION_PREMAKE if premake is None else premake
    ahead = integer(ahead, "premake", minimum=0, maximum=MAX_PREMAKE)
    for space in SPACES:
        if space is TRANSIENT and not _transient_queues_exist():
            continue
        yield from _premake_space(space, sequence_position(space), ahead, size, dry_run)


def ensure_transient_ranges(lock_timeout_ms: int = 1000) -> list[str]:
    """Make the ranges of the non-durable id space that its next ids need, if missing.

    Called by ``create_queue(durable=False)`` in its transaction, so that the queue's first
    messages land in an UNLOGGED range rather than in the (logged) default partition. Cheap
    when the ranges exist (a sequence read and a catalog query). Creating a partition locks
    ``pgq_message`` exclusively; when that waits longer than ``lock_timeout_ms`` nothing is
    made (the savepoint rolls back, with the timeout setting) and the next upkeep run makes
    them and moves any message that landed in the default meanwhile into them.
    """
    size = int(settings.PARTITION_SIZE)
    position = sequence_position(TRANSIENT)
    if any(p.lower <= position + 1 < p.upper for p in list_partitions(MESSAGE_TABLE, TRANSIENT)):
        return []
    try:
        with transaction.atomic(using=settings.DATABASE):
            previous = _one(statements.SHOW_LOCK_TIMEOUT)[0]
            _lock_timeout(lock_timeout_ms)
            actions = list(_premake_space(TRANSIENT, position, 1, size, False, lock_timeout_ms))
            _set_lock_timeout(previous)
            return actions
    except OperationalError:  # lock_timeout: pgq_message is busy; upkeep makes them later
        return []


def _premake_space(
    space: IdSpace,
    position: int,
    ahead: int,
    size: int,
    dry_run: bool,
    lock_timeout_ms: int = PREMAKE_LOCK_TIMEOUT_MS,
) -> Iterator[str]:
    """Ranges of ``space`` in each table, from the last one up to the one holding
    ``position + ahead * size``. In the non-durable space, whose ranges may all have been
    dropped while its sequence stood still, they start no lower than the grid slot of the
    next id: the ids below are handed out already."""
    target = position + ahead * size
    floor = space.first
    if space is TRANSIENT:
        floor += (position + 1 - space.first) // size * size
    for table in TABLES:
        existing = list_partitions(table, space)
        lower = max([p.upper for p in existing] + [_default_max_id(table, space) + 1, floor])
        while lower <= target and lower < space.end:
            upper = min(lower + size, space.end)
            name = f"{table}_r{lower}"
            kind = " unlogged" if _unlogged(table, lower) else ""
            if not dry_run:
                try:
                    with transaction.atomic(using=settings.DATABASE):
                        # Attaching a range locks the parent and the default partition:
                        # waiting behind a long reader's lock would queue every send and
                        # read behind this statement, so it gives up and the next run retries.
                        _wait_for_lock(table, lock_timeout_ms)
                        name = _create(table, lower, upper)
                except OperationalError:
                    yield f"busy: create {name} [{lower}, {upper}) left for the next run (locked)"
                    break
                except IntegrityError:
                    # Sends outran the premade ranges since this run looked: rows of this
                    # range arrived in the default partition, so PostgreSQL refuses the range.
                    # The next run's repair gives them a range; premaking goes on from there.
                    yield f"skip create {name} [{lower}, {upper}): rows arrived in the default"
                    break
            yield f"create {name} [{lower}, {upper}){kind}"
            lower = upper


# -- repair ----------------------------------------------------------------------------------


def repair_slot(
    msg_id: int,
    ranges: list[tuple[int, int]],
    size: int,
    *,
    first: int = 1,
    end: int | None = None,
) -> tuple[int, int]:
    """The range a new partition for ``msg_id`` should cover, between the existing ones.

    It sits on the grid of ``size``-wide steps that continues from the nearest range below
    (or, with none below, back from the nearest above; with neither, from ``first``),
    clipped to the gap it is in and to the id space ``[first, end)``. Pure arithmetic on the
    ranges given, so it is tested on its own (tests/unit).
    """
    below = max((u for _, u in ranges if u <= msg_id), default=None)
    above = min((lo for lo, _ in ranges if lo > msg_id), default=None)
    if below is not None:
        lower = below + (msg_id - below) // size * size
        upper = lower + size
    elif above is not None:
        upper = above - (above - 1 - msg_id) // size * size
        lower = upper - size
    else:
        lower = first + (msg_id - first) // size * size
        upper = lower + size
    if above is not None:
        upper = min(upper, above)
    if below is not None:
        lower = max(lower, below)
    lower = max(lower, first)
    if end is not None:
        upper = min(upper, end)
    return lower, upper


def plan_repair(table: str) -> list[tuple[int, int, int]]:
    """The ranges (lower, upper, rows) that would take the default partition's rows."""
    size = int(settings.PARTITION_SIZE)
    ranges = [(p.lower, p.upper) for p in list_partitions(table)]
    planned: list[tuple[int, int, int]] = []
    start = -(2**63)
    default = _default(table)
    while True:
        found = _one(statements.DEFAULT_NEXT_ID.format(partition=default), [start])[0]
        if found is None:
            return planned
        space = space_of(int(found))
        same = [r for r in ranges if space_of(r[0]) is space]
        lower, upper = repair_slot(int(found), same, size, first=space.first, end=space.end)
        rows = int(_one(statements.COUNT_RANGE.format(partition=default), [lower, upper])[0])
        planned.append((lower, upper, rows))
        ranges.append((lower, upper))
        start = upper


def _columns(table: str) -> sql.Composable:
    names = [row[0] for row in _all(statements.TABLE_COLUMNS, [table])]
    return sql.SQL(", ").join(sql.Identifier(n) for n in names)


def _move_out_of_default(table: str, lower: int, upper: int, lock_timeout_ms: int) -> int:
    """Give the default partition's rows in [lower, upper) a range partition of their own.

    PostgreSQL refuses to create a range partition while the default partition holds rows
    of that range, so in one transaction, under the parent's exclusive lock: the rows move
    to a temporary stash, the partition is created, and the rows go back through the parent
    (now routed to the new partition). Readers wait for the length of the move; nothing is
    visible half-done. Returns the rows moved.
    """
    stash = sql.Identifier("pgq_default_stash")
    with transaction.atomic(using=settings.DATABASE):
        _exclusive(table, lock_timeout_ms)
        columns = _columns(table)
        parent = sql.Identifier(table)
        _run(statements.CREATE_STASH.format(stash=stash, table=parent))
        moved = _run(
            statements.STASH_DEFAULT_ROWS.format(
                partition=_default(table), columns=columns, stash=stash
            ),
            [lower, upper],
        )
        _create(table, lower, upper)
        _run(statements.RESTORE_STASH.format(table=parent, columns=columns, stash=stash))
        _run(statements.DROP_STASH.format(stash=stash))
    return int(moved)


def repair_default(*, dry_run: bool = False, lock_timeout_ms: int = 1000) -> list[str]:
    """Move rows that landed in a DEFAULT partition into proper range partitions."""
    return list(_repair(dry_run=dry_run, lock_timeout_ms=lock_timeout_ms))


def _repair(*, dry_run: bool, lock_timeout_ms: int) -> Iterator[str]:
    for table in TABLES:
        for lower, upper, rows in plan_repair(table):
            name = f"{table}_r{lower}"
            if not dry_run:
                try:
                    rows = _move_out_of_default(table, lower, upper, lock_timeout_ms)
                except OperationalError:  # lock_timeout: busy; the next run tries again
                    yield f"skip repair of {table}_default [{lower}, {upper}): table busy"
                    continue
            yield f"repair {table}_default: {rows} rows into {name} [{lower}, {upper})"


# -- drop ------------------------------------------------------------------------------------


def export_covered_until() -> datetime | None:
    """How far recorded Spark exports cover the archive without a gap from its beginning.

    Every archived row with ``archived_at`` before the answer exists in an export; None when
    no export started at the beginning. With
    ``PGQ["ARCHIVE_DROP_REQUIRES_EXPORT"]`` neither upkeep nor retention removes a row past
    this point. Exports are ``pgq_spark export`` runs, recorded as ``SparkExport`` rows of
    archived_at windows ``[since, until)``.
    """
    windows = list(SparkExport.objects.using(settings.DATABASE).values_list("since", "until"))
    from_start = [until for since, until in windows if since is None]
    if not from_start:
        return None
    reached: datetime = max(from_start)
    for since, until in sorted((s, u) for s, u in windows if s is not None):
        if since > reached:
            break
        reached = max(reached, until)
    return reached


def exports_cover(last: datetime) -> bool:
    """Whether recorded exports hold every archived row up to ``last`` (inclusive)."""
    covered = export_covered_until()
    return covered is not None and last < covered


def _archive_droppable(part: Partition) -> tuple[bool, str]:
    """Whether an archive range may go now: (yes, why not). Cheap: index probes only."""
    ident = sql.Identifier(part.name)
    if not _has_rows(part.name):
        return True, ""
    if _one(statements.ARCHIVE_RANGE_RETAINED.format(partition=ident))[0]:
        return False, "rows within retention"
    last = _one(statements.ARCHIVE_RANGE_LAST.format(partition=ident))[0]
    if settings.ARCHIVE_DROP_REQUIRES_EXPORT and not exports_cover(last):
        return False, "not exported yet"
    return True, ""


def _droppable(part: Partition) -> tuple[bool, str]:
    if part.table == ARCHIVE_TABLE:
        return _archive_droppable(part)
    return (False, "holds messages") if _has_rows(part.name) else (True, "")


def _may_go(part: Partition, position: int) -> bool:
    """Whether ``part`` may be dropped once it holds nothing: its id space's sequence (at
    ``position``) has handed out its last id, or it is an UNLOGGED live range with no
    non-durable queue left to fill it (no UNLOGGED table stays behind the last one)."""
    if part.upper - 1 <= position:
        return True
    return _unlogged(part.table, part.lower) and not _transient_queues_exist()


def _has_rows(name: str) -> bool:
    return bool(_one(statements.PARTITION_HAS_ROWS.format(partition=sql.Identifier(name)))[0])


def _rows(part: Partition) -> int:
    return int(_one(statements.COUNT_ROWS.format(partition=sql.Identifier(part.name)))[0])


def _drop(part: Partition, lock_timeout_ms: int) -> bool:
    """Lock the parent, re-check under the lock, drop; False when busy or not droppable."""
    try:
        with transaction.atomic(using=settings.DATABASE):
            # Holding the lock first means no insert into the range is still in flight.
            _exclusive(part.table, lock_timeout_ms)
            if not _droppable(part)[0]:
                return False
            if not _may_go(part, sequence_position(space_of(part.lower))):
                return False
            _run(statements.DROP_PARTITION.format(partition=sql.Identifier(part.name)))
            return True
    except OperationalError:  # lock_timeout: the queue is busy; try at the next run
        return False


def drop_drained_partitions(*, dry_run: bool = False, lock_timeout_ms: int = 100) -> list[str]:
    """Drop ranges whose ids are all handed out and that hold no rows; returns actions.

    A live range goes first; its archive range follows once it is empty or wholly past
    retention. The range the sequence is in (and any ahead of it) is kept, except the empty
    UNLOGGED ranges of the non-durable space once no non-durable queue exists.
    """
    return list(_drops(dry_run=dry_run, lock_timeout_ms=lock_timeout_ms))


def _positions() -> dict[IdSpace, int]:
    return {space: sequence_position(space) for space in SPACES}


def _drops(*, dry_run: bool, lock_timeout_ms: int) -> Iterator[str]:
    positions = _positions()
    live_lowers = {p.lower for p in list_partitions(MESSAGE_TABLE)}
    for table in TABLES:
        for part in list_partitions(table):
            if not _may_go(part, positions[space_of(part.lower)]):
                continue
            if table == ARCHIVE_TABLE and part.lower in live_lowers:
                continue
            if not _droppable(part)[0]:
                continue
            # An archive range past retention is counted before the lock (the count scans
            # it; nothing adds rows to a range whose live range is gone).
            rows = _rows(part) if table == ARCHIVE_TABLE else 0
            if dry_run or _drop(part, lock_timeout_ms):
                past = f" ({rows} rows past retention)" if rows else ""
                yield f"drop {part.name} [{part.lower}, {part.upper}){past}"
                if table == MESSAGE_TABLE:
                    live_lowers.discard(part.lower)


# -- reclaim ---------------------------------------------------------------------------------

# A drained live partition is truncated only when it takes more disk than this. An empty one
# (premade ahead, or truncated already) takes a few index metapages, tens of KiB, so an idle
# queue's partitions are not locked and truncated again at every run.
RECLAIM_MIN_BYTES = 1024 * 1024


def _bytes(name: str) -> int:
    return int(_one(statements.PARTITION_BYTES, [name])[0])


def _holds_a_message(name: str) -> bool:
    newest = statements.PARTITION_NEWEST_ID.format(partition=sql.Identifier(name))
    return _one(newest)[0] is not None


def _truncate(name: str, lock_timeout_ms: int) -> bool:
    """Lock one partition, re-check it holds no row, truncate; False when busy or not empty.

    Once the ACCESS EXCLUSIVE lock is held, every transaction that had read or written the
    partition has ended (a send into it, a lease, an ack in flight), and none can start
    before commit; so what the re-check sees is all there is, and the rows TRUNCATE removes
    are deleted rows whose deletion committed. Only the partition is locked, not the parent:
    sends into other ranges go on.
    """
    partition = sql.Identifier(name)
    try:
        with transaction.atomic(using=settings.DATABASE):
            _wait_for_lock(name, lock_timeout_ms)
            _run(statements.LOCK_PARTITION.format(partition=partition))
            if _holds_a_message(name):
                return False
            _run(statements.TRUNCATE_PARTITION.format(partition=partition))
            return True
    except OperationalError:  # lock_timeout: a reader, writer or pg_dump holds it; next run
        return False


def reclaim_drained_partitions(*, dry_run: bool = False, lock_timeout_ms: int = 100) -> list[str]:
    """Truncate live partitions the sequence has not passed that hold no row; returns actions.

    A drained queue otherwise keeps the dead rows (and index entries) of the range it is
    filling until the sequence moves past that range and the drop step takes it. Ranges past
    the sequence are the drop step's; the archive's rows are kept by retention, never here.
    """
    return list(_reclaims(dry_run=dry_run, lock_timeout_ms=lock_timeout_ms))


def _reclaims(*, dry_run: bool, lock_timeout_ms: int) -> Iterator[str]:
    positions = _positions()
    candidates = [
        (p.name, f" [{p.lower}, {p.upper})")
        for p in list_partitions(MESSAGE_TABLE)
        if p.upper - 1 > positions[space_of(p.lower)]
    ]
    candidates.append((f"{MESSAGE_TABLE}_default", ""))
    for name, bounds in candidates:
        size = _bytes(name)
        if size <= RECLAIM_MIN_BYTES or _holds_a_message(name):
            continue
        if dry_run or _truncate(name, lock_timeout_ms):
            yield f"truncate {name}{bounds} (drained, {size / 2**20:.1f} MiB)"


# -- one run ---------------------------------------------------------------------------------


def upkeep(
    premake: int | None = None,
    *,
    dry_run: bool = False,
    stop: Callable[[], bool] = lambda: False,
) -> Iterator[str]:
    """Run every upkeep step, yielding each action as it is done (or, dry, would be).

    ``stop`` is asked between actions: a command that caught SIGINT/SIGTERM ends the run
    there, with every change made so far committed and nothing half-done. A run that finds
    another holding the upkeep lock yields one ``busy`` line and changes nothing.
    """
    with contextlib.ExitStack() as held:
        if not dry_run and not held.enter_context(_upkeep_lock()):
            yield "busy: another upkeep run holds the lock; nothing done"
            return
        yield from _steps(premake, dry_run=dry_run, stop=stop)


@contextlib.contextmanager
def _upkeep_lock() -> Iterator[bool]:
    """Try the upkeep lock in a transaction of a connection of its own; True when taken.

    The transaction stays open (idle, holding no snapshot) for the ``with`` block, and ends
    with it, which releases the lock. The steps run on Django's connection meanwhile, each
    in transactions of their own.
    """
    with psycopg.connect(**connection_params(), prepare_threshold=None) as conn:
        try:
            taken = db.run_dedicated(conn, statements.TRY_UPKEEP_LOCK).fetchone()
            yield bool(taken and taken[0])
        finally:
            conn.rollback()


def _steps(premake: int | None, *, dry_run: bool, stop: Callable[[], bool]) -> Iterator[str]:
    """Repair, premake, tune, drop, then reclaim, asking ``stop`` after every action."""
    steps = (
        _repair(dry_run=dry_run, lock_timeout_ms=1000),
        _premake(premake, dry_run=dry_run),
        iter(tune_live_partitions(dry_run=dry_run)),
        _drops(dry_run=dry_run, lock_timeout_ms=100),
        _reclaims(dry_run=dry_run, lock_timeout_ms=100),
    )
    for step in steps:
        for action in step:
            yield action
            if stop():
                return


def run_maintenance(premake: int | None = None, *, dry_run: bool = False) -> list[str]:
    """Repair, premake, tune, drop drained ranges, then truncate drained live ones."""
    return list(upkeep(premake, dry_run=dry_run))
