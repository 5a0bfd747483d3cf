"""The message managers: every statement that leases, acknowledges or moves messages.

Each public method is one SQL round trip. The statements are named module constants beside
the method that runs them, so the whole database contract of the live queue can be read in
one place (procrastinate keeps its queries the same way). They are hand-written rather than
composed with the ORM because each one combines a queue lookup, a ``FOR UPDATE SKIP LOCKED``
selection and an ``UPDATE/DELETE … RETURNING`` in a single statement, which the ORM cannot
express, and because they are the hot path: see docs/design.md.

Every statement looks the queue up by name in a ``q`` CTE and reports the queue id it found,
so "unknown queue" costs no extra round trip on the success path. Callers (the functional API)
validate arguments before they get here; values always travel as query parameters.
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Sequence
from typing import Any

import psycopg
from django.db import connections, models
from django.db.models.functions import Now
from psycopg.types.json import JsonbBinaryLoader

# Columns shared by the live and the archive tables, in table order.
MESSAGE_COLUMNS = (
    "msg_id",
    "queue_id",
    "message",
    "headers",
    "attributes",
    "label",
    "priority",
    "read_ct",
    "enqueued_at",
    "vt",
    "expires_at",
    "group_id",
    "dedup_id",
    "max_retries",
    "retry_delay",
    "cancel_requested",
)
_COLS = ", ".join(MESSAGE_COLUMNS)
_M_COLS = ", ".join(f"m.{c}" for c in MESSAGE_COLUMNS)

# A reference to one message: (msg_id, read_ct or None). read_ct fences stale receipts.
MessageRef = tuple[int, int | None]

# Whether queue ``q`` has room for {n} more messages under its max_length (NULL: unbounded).
# The count stops at max_length rows of the ready index, so it costs nothing for unbounded
# queues (OR evaluates left to right and stops) and at most max_length entries otherwise.
# It sees committed messages only: concurrent senders can overshoot by their own batches.
HAS_ROOM = """({q}.max_length IS NULL OR {q}.max_length >= {n} + (
    SELECT count(*) FROM (SELECT 1 FROM pgq_message r WHERE r.queue_id = {q}.id
                          LIMIT {q}.max_length) r))"""

# -- send -- Insert messages into a queue, in input order, and wake listeners. Inserts
# nothing, and answers full = true, when the queue's max_length leaves no room for them all.
SEND = f"""
WITH q AS (
    SELECT id, name, delivery_delay, retention, max_length FROM pgq_queue
    WHERE name = %(queue)s AND max_message_size >= %(size)s
), room AS (
    SELECT q.* FROM q WHERE {HAS_ROOM.format(q="q", n="cardinality(%(bodies)s::jsonb[])")}
), ins AS (
    INSERT INTO pgq_message (queue_id, message, headers, attributes, label, priority, read_ct,
                             enqueued_at, vt, expires_at, group_id, dedup_id, max_retries,
                             retry_delay, cancel_requested)
    SELECT q.id, b.body, %(headers)s::jsonb, %(attributes)s::jsonb, %(label)s, %(priority)s, 0,
           clock_timestamp(),
           clock_timestamp() + make_interval(secs => coalesce(%(delay)s, q.delivery_delay)),
           clock_timestamp() + make_interval(secs => least(q.retention,
                                                           coalesce(%(expires_in)s, q.retention))),
           %(group)s, %(dedup_id)s, %(max_retries)s, %(retry_delay)s, false
    FROM room q, unnest(%(bodies)s::jsonb[]) WITH ORDINALITY AS b(body, ord)
    ORDER BY b.ord
    RETURNING msg_id
), counted AS (
    INSERT INTO pgq_queue_counter (queue_id, kind, n, at)
    SELECT q.id, 'sent', (SELECT count(*) FROM ins), clock_timestamp() FROM room q
)
SELECT (SELECT id FROM q),
       ARRAY(SELECT msg_id FROM ins ORDER BY msg_id),
       (SELECT pg_notify(%(channel)s, q.name) FROM room q
        WHERE coalesce(%(delay)s, q.delivery_delay) <= 0),
       EXISTS (SELECT 1 FROM q) AND NOT EXISTS (SELECT 1 FROM room)
"""

# The candidate rows of a read: visible, unexpired, best first. Two shapes: a FIFO queue also
# requires each row to be the head of its message group. Each statement's ``q`` CTE only
# matches a queue of its own shape, so a wrong guess finds no queue instead of delivering out
# of order (see MessageManager._leasing, which picks the shape and corrects a wrong guess).
# The group check costs a sixth of a plain read even when it never runs, hence two shapes.
_CANDIDATES = """
    SELECT m.msg_id FROM pgq_message m
    WHERE m.queue_id = (SELECT id FROM q)
      AND m.vt <= clock_timestamp()
      AND (m.expires_at IS NULL OR m.expires_at > clock_timestamp())
      {group_head}
      {{filters}}
    ORDER BY m.priority, m.msg_id
    LIMIT (SELECT least(%(qty)s::int, greatest(1, %(max_bytes)s::bigint / q.max_message_size))
           FROM q)
    FOR UPDATE OF m SKIP LOCKED
"""
_GROUP_HEAD = """AND (m.group_id IS NULL OR NOT EXISTS (
            SELECT 1 FROM pgq_message e
            WHERE e.queue_id = m.queue_id AND e.group_id = m.group_id AND e.msg_id < m.msg_id))"""


def _shapes(template: str) -> dict[bool, str]:
    """The template for plain (False) and FIFO (True) queues."""
    return {
        fifo: template.format(
            fifo="fifo" if fifo else "NOT fifo",
            candidates=_CANDIDATES.format(group_head=_GROUP_HEAD if fifo else ""),
        )
        for fifo in (False, True)
    }


# -- read -- Lease up to qty visible messages: vt = now + vt, read_ct + 1. Fewer when the
# queue's largest possible bodies would pass the byte budget (max_bytes / max_message_size).
READ = _shapes(f"""
WITH q AS (
    SELECT id, visibility_timeout, max_message_size FROM pgq_queue
    WHERE name = %(queue)s AND NOT paused AND {{fifo}}
), c AS ({{candidates}})
UPDATE pgq_message m
SET vt = clock_timestamp() + make_interval(secs => coalesce(%(vt)s, q.visibility_timeout)),
    read_ct = m.read_ct + 1
FROM c, q
WHERE m.msg_id = c.msg_id
RETURNING {_M_COLS}
""")

# -- pop -- Take up to qty visible messages out of the queue at once (archive if asked to).
POP = _shapes(f"""
WITH q AS (
    SELECT id, archive_on_ack, max_message_size FROM pgq_queue
    WHERE name = %(queue)s AND NOT paused AND {{fifo}}
), c AS ({{candidates}}), d AS (
    DELETE FROM pgq_message m USING c WHERE m.msg_id = c.msg_id RETURNING {_M_COLS}
), a AS (
    INSERT INTO pgq_archived_message ({_COLS}, archived_at, outcome)
    SELECT {_COLS}, clock_timestamp(), 'acked' FROM d WHERE (SELECT archive_on_ack FROM q)
), counted AS (
    INSERT INTO pgq_queue_counter (queue_id, kind, n, at)
    SELECT q.id, 'acked', n.n, clock_timestamp() FROM q, (SELECT count(*) AS n FROM d) n
    WHERE n.n > 0
)
SELECT {_COLS} FROM d
""")

# -- queue_state -- Why a statement found nothing: the queue's existence, pause, size limit,
# shape (FIFO or not, archives on ack or not) and length limit.
QUEUE_STATE = (
    "SELECT id, paused, max_message_size, fifo, archive_on_ack, max_length "
    "FROM pgq_queue WHERE name = %s"
)

# -- read_by_id -- One message by id, without leasing it.
READ_BY_ID = f"""
WITH q AS (SELECT id FROM pgq_queue WHERE name = %(queue)s)
SELECT q.id, {_M_COLS} FROM q
LEFT JOIN pgq_message m ON m.queue_id = q.id AND m.msg_id = %(msg_id)s
"""

# Which rows a delete or archive acts on: the listed ids, each fenced by its read_ct when the
# caller gave a receipt (a NULL in cts means "any delivery"). ``= ANY`` with a positional
# look-up plans as plain index probes, where joining ``unnest(ids, cts)`` cost a third more.
_FENCED_IDS = """
    m.msg_id = ANY(%(ids)s::bigint[])
    AND coalesce((%(cts)s::int[])[array_position(%(ids)s::bigint[], m.msg_id)], m.read_ct)
        = m.read_ct
    AND m.queue_id = (SELECT id FROM q)
"""

# -- delete -- Acknowledge messages: remove them (or archive them as acked with archive_on_ack).
# The receipt fence sits in the DELETE itself, which locks and re-checks each row. Two shapes,
# like the reads: a queue that archives on ack needs whole rows back for the archive; one that
# does not (the common case) returns only ids. Each shape's ``q`` matches only its own kind.
DELETE = {
    False: f"""
WITH q AS (SELECT id FROM pgq_queue WHERE name = %(queue)s AND NOT archive_on_ack),
d AS (
    DELETE FROM pgq_message m WHERE {_FENCED_IDS}
    RETURNING m.msg_id
), counted AS (
    INSERT INTO pgq_queue_counter (queue_id, kind, n, at)
    SELECT q.id, 'acked', n.n, clock_timestamp() FROM q, (SELECT count(*) AS n FROM d) n
    WHERE n.n > 0
)
SELECT (SELECT id FROM q), ARRAY(SELECT msg_id FROM d ORDER BY msg_id)
""",
    True: f"""
WITH q AS (SELECT id FROM pgq_queue WHERE name = %(queue)s AND archive_on_ack),
d AS (
    DELETE FROM pgq_message m WHERE {_FENCED_IDS}
    RETURNING {_M_COLS}
), a AS (
    INSERT INTO pgq_archived_message ({_COLS}, archived_at, outcome, result)
    SELECT {_COLS}, clock_timestamp(), 'acked', %(result)s::jsonb FROM d
), counted AS (
    INSERT INTO pgq_queue_counter (queue_id, kind, n, at)
    SELECT q.id, 'acked', n.n, clock_timestamp() FROM q, (SELECT count(*) AS n FROM d) n
    WHERE n.n > 0
)
SELECT (SELECT id FROM q), ARRAY(SELECT msg_id FROM d ORDER BY msg_id)
""",
}

# -- archive -- Move messages to the archive with an outcome (PGMQ archive).
ARCHIVE = f"""
WITH q AS (SELECT id FROM pgq_queue WHERE name = %(queue)s),
d AS (
    DELETE FROM pgq_message m WHERE {_FENCED_IDS}
    RETURNING {_M_COLS}
), a AS (
    INSERT INTO pgq_archived_message ({_COLS}, archived_at, outcome, result, error)
    SELECT {_COLS}, clock_timestamp(), %(outcome)s, %(result)s::jsonb, %(error)s FROM d
), counted AS (
    INSERT INTO pgq_queue_counter (queue_id, kind, n, at)
    SELECT q.id, %(outcome)s, n.n, clock_timestamp() FROM q, (SELECT count(*) AS n FROM d) n
    WHERE n.n > 0
)
SELECT (SELECT id FROM q), ARRAY(SELECT msg_id FROM d ORDER BY msg_id)
"""

# -- set_vt -- Move one message's visibility to now + vt (extend or end a lease).
SET_VT = f"""
WITH q AS (SELECT id FROM pgq_queue WHERE name = %(queue)s),
u AS (
    UPDATE pgq_message m SET vt = clock_timestamp() + make_interval(secs => %(vt)s)
    WHERE m.queue_id = (SELECT id FROM q) AND m.msg_id = %(msg_id)s
      AND (%(ct)s::int IS NULL OR m.read_ct = %(ct)s::int)
    RETURNING {_M_COLS}
)
SELECT (SELECT id FROM q), u.* FROM (SELECT 1) AS one LEFT JOIN u ON true
"""

# The delay before a failed message is seen again: the explicit delay, or the retry delay
# grown by the queue's backoff, capped, with "equal jitter" (half fixed, half random).
_RETRY_DELAY = """
    coalesce(%(delay)s::float8, (
        SELECT CASE WHEN q.backoff_jitter THEN d.capped * (0.5 + random() * 0.5)
                    ELSE d.capped END
        FROM (SELECT least(q.backoff_cap, CASE q.backoff
                WHEN 'none' THEN coalesce(t.retry_delay, q.retry_delay)
                WHEN 'linear' THEN coalesce(t.retry_delay, q.retry_delay) * greatest(t.read_ct, 1)
                ELSE coalesce(t.retry_delay, q.retry_delay)
                     * power(2, least(greatest(t.read_ct - 1, 0), 60))
              END) AS capped) d))
"""

# -- nack -- A failed delivery: retry after a delay, or dead-letter once retries are spent.
# A dead message moves to the dead-letter queue (same msg_id, read_ct reset, history in
# headers["pgq_dead_letter"], the origin server-side in dead_letter_origin_id for redrive) or,
# with none configured, to the archive as 'dead'.
NACK = f"""
WITH q AS (
    SELECT id, name, max_retries, retry_delay, backoff, backoff_cap, backoff_jitter,
           dead_letter_queue_id
    FROM pgq_queue WHERE name = %(queue)s
), dlq AS (
    SELECT id, name, retention FROM pgq_queue WHERE id = (SELECT dead_letter_queue_id FROM q)
), t AS (
    SELECT m.msg_id, m.read_ct, m.retry_delay,
           m.read_ct > coalesce(m.max_retries, q.max_retries) AS spent
    FROM pgq_message m, q
    WHERE m.queue_id = q.id AND m.msg_id = %(msg_id)s
      AND (%(ct)s::int IS NULL OR m.read_ct = %(ct)s::int)
    FOR UPDATE OF m
), retried AS (
    UPDATE pgq_message m SET vt = clock_timestamp() + make_interval(secs => {_RETRY_DELAY})
    FROM t, q WHERE m.msg_id = t.msg_id AND NOT t.spent
    RETURNING m.msg_id
), moved AS (
    UPDATE pgq_message m
    SET queue_id = dlq.id, dead_letter_origin_id = q.id, vt = clock_timestamp(), read_ct = 0,
        expires_at = clock_timestamp() + make_interval(secs => dlq.retention),
        headers = m.headers || jsonb_build_object('pgq_dead_letter', jsonb_build_object(
            'attempts', m.read_ct, 'last_error', %(error)s::text, 'original_queue', q.name,
            'dead_lettered_at', clock_timestamp()))
    FROM t, q, dlq WHERE m.msg_id = t.msg_id AND t.spent
    RETURNING m.msg_id, dlq.name AS dlq_name
), gone AS (
    DELETE FROM pgq_message m USING t
    WHERE m.msg_id = t.msg_id AND t.spent AND NOT EXISTS (SELECT 1 FROM dlq)
    RETURNING {_M_COLS}
), archived AS (
    INSERT INTO pgq_archived_message ({_COLS}, archived_at, outcome, error)
    SELECT {_COLS}, clock_timestamp(), 'dead', %(error)s FROM gone
), counted AS (
    INSERT INTO pgq_queue_counter (queue_id, kind, n, at)
    SELECT q.id, 'dead', 1, clock_timestamp() FROM q
    WHERE EXISTS (SELECT 1 FROM moved) OR EXISTS (SELECT 1 FROM gone)
    UNION ALL
    SELECT dlq.id, 'dead_arrived', 1, clock_timestamp() FROM dlq
    WHERE EXISTS (SELECT 1 FROM moved)
)
SELECT (SELECT id FROM q),
       CASE WHEN EXISTS (SELECT 1 FROM retried) THEN 'retry'
            WHEN EXISTS (SELECT 1 FROM moved) THEN 'dead_lettered'
            WHEN EXISTS (SELECT 1 FROM gone) THEN 'dead' END,
       (SELECT pg_notify(%(channel)s, dlq_name) FROM moved)
"""

# -- purge -- Delete every message of a queue, leased or not.
PURGE = """
WITH q AS (SELECT id FROM pgq_queue WHERE name = %(queue)s),
d AS (DELETE FROM pgq_message m WHERE m.queue_id = (SELECT id FROM q) RETURNING 1),
counted AS (
    INSERT INTO pgq_queue_counter (queue_id, kind, n, at)
    SELECT q.id, 'purged', n.n, clock_timestamp() FROM q, (SELECT count(*) AS n FROM d) n
    WHERE n.n > 0
)
SELECT (SELECT id FROM q), (SELECT count(*) FROM d)
"""

# -- expire -- Archive messages past their expiry as 'expired' (all queues, or one).
EXPIRE = f"""
WITH d AS (
    DELETE FROM pgq_message m
    WHERE m.expires_at <= clock_timestamp()
      AND (%(queue_id)s::bigint IS NULL OR m.queue_id = %(queue_id)s::bigint)
    RETURNING {_M_COLS}
), a AS (
    INSERT INTO pgq_archived_message ({_COLS}, archived_at, outcome)
    SELECT {_COLS}, clock_timestamp(), 'expired' FROM d
), counted AS (
    INSERT INTO pgq_queue_counter (queue_id, kind, n, at)
    SELECT queue_id, 'expired', count(*), clock_timestamp() FROM d GROUP BY queue_id
)
SELECT count(*) FROM d
"""

# -- compact_counters -- Fold finished minutes of counter rows into one row per queue, kind
# and minute, so counting stays cheap while per-minute history remains for charts.
COMPACT_COUNTERS = """
WITH old AS (
    DELETE FROM pgq_queue_counter
    WHERE at < date_trunc('minute', clock_timestamp())
      AND id NOT IN (
          SELECT min(id) FROM pgq_queue_counter
          WHERE at < date_trunc('minute', clock_timestamp())
          GROUP BY queue_id, kind, date_trunc('minute', at) HAVING count(*) = 1)
    RETURNING queue_id, kind, n, at
), folded AS (
    INSERT INTO pgq_queue_counter (queue_id, kind, n, at)
    SELECT queue_id, kind, sum(n), date_trunc('minute', at) FROM old
    GROUP BY queue_id, kind, date_trunc('minute', at)
    RETURNING 1
)
SELECT (SELECT count(*) FROM old), (SELECT count(*) FROM folded)
"""

# -- metrics -- PGMQ's queue metrics plus in-flight, dead-letter and delayed counts, per
# queue, at a
# cost that does not grow with the backlog: every part reads a bounded stretch of the ready
# index (queue_id, priority, msg_id) or the planner's statistics, never the whole queue.
# - queue_length: counted exactly up to %(exact)s messages (an index-only count); a longer
#   queue reports the planner's estimate (partition row counts times the share of rows
#   ANALYZE saw for the queue), never less than the exact bound.
# - in_flight: leased messages among the first %(exact)s in delivery order. Leases are taken
#   from the head of a queue, so this is exact unless more than that many messages are
#   leased, delayed or waiting to retry ahead of the rest. delayed (never read, not yet
#   visible) is counted over the same stretch.
# - oldest/newest: the lowest and highest msg_id of each of the queue's first 64 priority
#   levels (a skip scan of the index), and their enqueue times.
METRICS = """
SELECT q.name,
       CASE WHEN c.n < %(exact)s THEN c.n
            ELSE greatest(c.n, coalesce(est.n, 0)::bigint) END,
       extract(epoch FROM clock_timestamp() - newest.enqueued_at)::float8,
       extract(epoch FROM clock_timestamp() - oldest.enqueued_at)::float8,
       coalesce((SELECT sum(n) FROM pgq_queue_counter c
                 WHERE c.queue_id = q.id AND c.kind = 'sent'), 0),
       f.in_flight,
       coalesce((SELECT sum(n) FROM pgq_queue_counter c
                 WHERE c.queue_id = q.id AND c.kind = 'dead'), 0),
       clock_timestamp(),
       f.delayed
FROM pgq_queue q
CROSS JOIN LATERAL (
    SELECT count(*) AS n
    FROM (SELECT 1 FROM pgq_message m WHERE m.queue_id = q.id LIMIT %(exact)s) b
) c
LEFT JOIN LATERAL (
    SELECT sum(p.reltuples * coalesce(
               s.most_common_freqs[array_position(s.most_common_vals::text::bigint[], q.id)],
               greatest(0, 1 - coalesce((SELECT sum(x) FROM unnest(s.most_common_freqs) x), 0))
               / greatest(1, CASE WHEN s.n_distinct < 0 THEN -s.n_distinct * p.reltuples
                                  ELSE s.n_distinct END
                             - coalesce(cardinality(s.most_common_freqs), 0)))) AS n
    FROM pg_inherits i
    JOIN pg_class p ON p.oid = i.inhrelid
    JOIN pg_stats s ON s.schemaname = (SELECT nspname FROM pg_namespace
                                       WHERE oid = p.relnamespace)
                   AND s.tablename = p.relname AND s.attname = 'queue_id'
    WHERE i.inhparent = 'pgq_message'::regclass AND p.reltuples > 0 AND c.n >= %(exact)s
) est ON true
CROSS JOIN LATERAL (
    SELECT count(*) FILTER (WHERE h.read_ct > 0 AND h.vt > clock_timestamp()) AS in_flight,
           count(*) FILTER (WHERE h.read_ct = 0 AND h.vt > clock_timestamp()) AS delayed
    FROM (SELECT m.read_ct, m.vt FROM pgq_message m WHERE m.queue_id = q.id
          ORDER BY m.priority, m.msg_id LIMIT %(exact)s) h
) f
LEFT JOIN LATERAL (
    WITH RECURSIVE levels(p, n) AS (
        SELECT (SELECT m.priority FROM pgq_message m WHERE m.queue_id = q.id
                ORDER BY m.priority LIMIT 1), 1
        UNION ALL
        SELECT (SELECT m.priority FROM pgq_message m
                WHERE m.queue_id = q.id AND m.priority > levels.p
                ORDER BY m.priority LIMIT 1), levels.n + 1
        FROM levels WHERE levels.p IS NOT NULL AND levels.n < 64
    )
    SELECT min(x.lo) AS lo, max(x.hi) AS hi
    FROM levels, LATERAL (
        SELECT (SELECT m.msg_id FROM pgq_message m WHERE m.queue_id = q.id AND m.priority = levels.p
                ORDER BY m.msg_id LIMIT 1) AS lo,
               (SELECT m.msg_id FROM pgq_message m WHERE m.queue_id = q.id AND m.priority = levels.p
                ORDER BY m.msg_id DESC LIMIT 1) AS hi) x
    WHERE levels.p IS NOT NULL
) ids ON true
LEFT JOIN pgq_message oldest ON oldest.msg_id = ids.lo
LEFT JOIN pgq_message newest ON newest.msg_id = ids.hi
WHERE (%(queue)s::text IS NULL OR q.name = %(queue)s::text)
ORDER BY q.name
"""


def _refs_params(refs: Sequence[MessageRef]) -> dict[str, list[Any]]:
    return {"ids": [r[0] for r in refs], "cts": [r[1] for r in refs]}


class _ClockTimestamp(models.Func):
    """``clock_timestamp()``: the time now, as the hand-written statements compare against
    (``Now()`` is the transaction's start, which a long transaction would hold back)."""

    template = "clock_timestamp()"
    output_field = models.DateTimeField()


# -- lease (composable) -- The ORM's candidate SELECT (any lookups, FOR UPDATE SKIP LOCKED)
# in a CTE, leased by one UPDATE like READ's: vt = now + vt, read_ct + 1.
LEASE_SELECTED = f"""
WITH c AS ({{candidates}})
UPDATE pgq_message m
SET vt = clock_timestamp() + make_interval(secs => %s), read_ct = m.read_ct + 1
FROM c
WHERE m.msg_id = c.msg_id
RETURNING {_M_COLS}
"""


class MessageQuerySet(models.QuerySet):
    """Querysets over live messages: browsing filters, and leasing with any Django lookup.

    ``Message.objects.for_queue("orders").filter(message__customer=7).lease(qty=10, vt=30)``
    leases like :func:`pgq_django.read` (same receipts, ``read_ct`` + 1, visibility timeout,
    priority then msg_id order, FIFO group heads only, paused queues refused) but selects
    with whatever the queryset says. ``read`` stays the hot path: one prepared statement
    with a fixed filter set; this one is compiled by the ORM on every call.
    """

    _pgq_queue: str | None = None

    def _clone(self) -> Any:
        clone = super()._clone()  # type: ignore[misc]
        clone._pgq_queue = self._pgq_queue
        return clone

    def for_queue(self, name: str) -> MessageQuerySet:
        """The messages of one queue (the queue :meth:`lease` leases from)."""
        clone = self.filter(queue__name=name)
        clone._pgq_queue = name
        return clone

    def visible(self) -> MessageQuerySet:
        return self.filter(vt__lte=Now())

    def in_flight(self) -> MessageQuerySet:
        return self.filter(vt__gt=Now(), read_ct__gt=0)

    def lease(self, qty: int = 1, vt: Any = None) -> list[Any]:
        """Lease up to ``qty`` visible messages this queryset selects, for ``vt`` seconds.

        Needs :meth:`for_queue`. Returns Message objects whose ``receipt`` acknowledges
        them with :func:`pgq_django.delete` (or archive, nack, set_vt), best priority first,
        then oldest. Raises QueueNotFound, QueuePaused, or InvalidArgument for a bad
        ``qty``/``vt`` or a sliced queryset. One UPDATE round trip (inside a transaction:
        the caller's, or one of its own).
        """
        from django.db import transaction

        from .api import validation as v
        from .conf import settings
        from .exceptions import InvalidArgument, QueueNotFound, QueuePaused
        from .models import Queue

        if self._pgq_queue is None:
            raise InvalidArgument(
                "lease() needs a queue: start from Message.objects.for_queue(name).",
                field="queue",
            )
        if self.query.is_sliced:
            raise InvalidArgument("lease() takes qty=, not a sliced queryset.", field="qty")
        name = v.name(self._pgq_queue)
        qty = v.quantity(qty)
        vt = v.seconds(vt, "vt", allow_none=True)
        alias = self._db or settings.DATABASE  # type: ignore[attr-defined]
        queue = (
            Queue.objects.using(alias)
            .filter(name=name)
            .values("id", "paused", "fifo", "visibility_timeout")
            .first()
        )
        if queue is None:
            raise QueueNotFound.for_name(name)
        if queue["paused"]:
            raise QueuePaused.for_name(name)
        now = _ClockTimestamp()
        candidates = self.using(alias).filter(
            models.Q(expires_at__isnull=True) | models.Q(expires_at__gt=now),
            queue_id=queue["id"],
            vt__lte=now,
        )
        if queue["fifo"]:
            # Only the oldest message of each group may be leased: strict order per group.
            earlier = self.model._default_manager.filter(
                queue_id=models.OuterRef("queue_id"),
                group_id=models.OuterRef("group_id"),
                msg_id__lt=models.OuterRef("msg_id"),
            )
            candidates = candidates.filter(
                models.Q(group_id__isnull=True) | ~models.Exists(earlier)
            )
        selected = (
            candidates.order_by("priority", "msg_id")
            .select_for_update(skip_locked=True, of=("self",))
            .values("msg_id")[:qty]
        )
        seconds = queue["visibility_timeout"] if vt is None else vt
        # Compiling a FOR UPDATE query needs a transaction; it is the UPDATE's own.
        with transaction.atomic(using=alias, savepoint=False):
            sql, params = selected.query.get_compiler(using=alias).as_sql()
            rows = execute_statement(
                LEASE_SELECTED.format(candidates=sql), (*params, seconds), alias, prepare=False
            ).fetchall()
        manager: Any = self.model._default_manager.db_manager(alias)
        messages = manager._instances(rows)
        for message in messages:
            message.queue_name = name
        return sorted(messages, key=lambda m: (m.priority, m.msg_id))


# A prepare threshold no statement reaches by repetition: only explicit prepares happen.
_PREPARE_ONLY_WHEN_ASKED = 2**31 - 1
# Raw connections already set up for our statements, with the pid of the process that set
# them up (see execute_statement): a forked child must not use its parent's connection.
_CONFIGURED: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
# Connections a forked child inherited and let go of. Kept referenced so they are never
# garbage-collected in the child: psycopg would not close them there (it checks the pid),
# but it would warn about an open connection being deleted.
_ABANDONED: list[Any] = []


def _abandon(db: Any) -> None:
    """Let go of a connection that belongs to the parent process, without closing it.

    Closing it would send PostgreSQL a Terminate message over the socket the parent still
    uses, ending the parent's session. Django opens a new connection on next use.
    """
    _ABANDONED.append(db.connection)
    db.connection = None


def _forget_inherited_connections() -> None:
    """After ``fork()``, in the child: abandon the connections of the forking thread.

    Any query the child made on them would share the parent's server session — interleaved
    protocol messages, and ``DuplicatePreparedStatement`` once both prepare statements under
    the same names. Other threads do not exist in the child.
    """
    try:
        for db in connections.all(initialized_only=True):
            if db.connection is not None:
                _abandon(db)
    except Exception:  # Django not configured in this process: nothing to forget
        pass


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_inherited_connections)


class _PreparingCursor(psycopg.Cursor[Any]):
    """A server-binding cursor that prepares each statement on first use.

    The named statements above run thousands of times per connection and are large CTEs:
    parsing and planning them is about half of what PostgreSQL spends on a send or a read
    (bench/core.py measured pgq_django at ~0.5 of the same SQL run by psycopg with its
    automatic prepares). Prepared once per connection, later calls only bind and execute.
    Django's own cursors bind on the client and never prepare, so this is opt-in here.

    Results come back in binary format: psycopg's C loaders then decode timestamps, where
    the text format goes through Django's Python timestamptz loader — three timestamps a row
    were a sixth of a 100-message read. Values are the same (aware UTC datetimes, since
    Django sets the connection's time zone to UTC; jsonb decoded to Python objects).
    """

    def __init__(self, connection: Any, *, prepare: bool = True) -> None:
        super().__init__(connection)
        self._pgq_prepare = prepare

    def execute(self, query: Any, params: Any = None, *, prepare: Any = None, **kw: Any) -> Any:
        kw.setdefault("binary", True)
        if prepare is None:
            prepare = self._pgq_prepare
        return super().execute(query, params, prepare=prepare, **kw)


def execute_statement(
    sql: str, params: Any, alias: str | None = None, *, prepare: bool = True
) -> Any:
    """Run a named statement through :class:`_PreparingCursor` on Django's connection.

    Every named statement of the package (here, in :mod:`pgq_django.delivery` and in
    :mod:`pgq_django.routing`) runs through this one path. The cursor is still Django's
    wrapper, so query logging, ``execute_wrapper`` hooks, error translation and the
    connection's transaction state all apply as usual. With
    ``PGQ["PREPARED_STATEMENTS"] = False`` (for poolers that cannot keep prepared
    statements) the statements are bound on the server but never prepared; ``prepare=False``
    does the same for one statement whose text varies from call to call.

    A connection set up in another process (this one was forked after using the database)
    is abandoned for a new one, so parent and child never share a session: see "Forked
    processes" in docs/design.md.
    """
    from .conf import settings

    db = connections[alias or settings.DATABASE]
    pid = os.getpid()
    if db.connection is not None and _CONFIGURED.get(db.connection, pid) != pid:
        _abandon(db)  # set up by the process we were forked from (see _abandon)
    db.close_if_health_check_failed()
    db.ensure_connection()
    db.validate_thread_sharing()
    raw = db.connection
    if _CONFIGURED.get(raw) != pid:
        if raw.prepare_threshold is None:
            # Django turns preparing off per connection; allow it for the statements
            # that ask (ours) without making Django's own queries start preparing.
            raw.prepare_threshold = _PREPARE_ONLY_WHEN_ASKED
        # Django maps jsonb to a text loader; our binary results need psycopg's binary
        # jsonb loader. Django's own queries use the text format and are unaffected.
        raw.adapters.register_loader("jsonb", JsonbBinaryLoader)
        _CONFIGURED[raw] = pid
    with db.wrap_database_errors:
        inner: Any = _PreparingCursor(raw, prepare=prepare and bool(settings.PREPARED_STATEMENTS))
    cursor = db.make_debug_cursor(inner) if db.queries_logged else db.make_cursor(inner)
    cursor.execute(sql, params)
    return cursor


class _SqlManager(models.Manager):
    """Runs the named statements on the configured database and builds model instances."""

    def _db_alias(self) -> str:
        from .conf import settings

        return self.db if self._db else settings.DATABASE

    def _execute(self, sql: str, params: Any) -> Any:
        return execute_statement(sql, params, self._db_alias())

    def _instances(self, rows: Sequence[Sequence[Any]], offset: int = 0) -> list[Any]:
        """Turn RETURNING rows into model instances (jsonb arrives decoded: binary results).

        The instances are what ``Model.from_db`` makes, built without ``Model.__init__``:
        its per-field work was a fifth of a 100-message read (bench/core.py, profiled). The
        rows carry every column of MESSAGE_COLUMNS (a field after them, such as
        ``Message.dead_letter_origin``, is deferred: it loads on first access); the one
        difference is that no pre_init/post_init signal is sent. A model whose fields do not
        start with MESSAGE_COLUMNS goes through ``from_db`` as usual.
        """
        from django.db.models.base import ModelState

        model = self.model
        db = self._db_alias()
        fast = _plain_columns(model)
        end = offset + len(MESSAGE_COLUMNS)
        objs = []
        for row in rows:
            if row[offset] is None:
                continue
            values = list(row[offset:end])
            if not fast:
                objs.append(model.from_db(db, MESSAGE_COLUMNS, values))
                continue
            obj = model.__new__(model)
            obj.__dict__.update(zip(MESSAGE_COLUMNS, values, strict=True))
            state = obj._state = ModelState()
            state.adding = False
            state.db = db
            objs.append(obj)
        return objs


_PLAIN: dict[type, bool] = {}


def _plain_columns(model: type[models.Model]) -> bool:
    """Whether the model's concrete fields start with MESSAGE_COLUMNS, in order.

    Columns after them (``Message.dead_letter_origin``) are left out of the statements'
    rows and load on first access, like a deferred field.
    """
    if model not in _PLAIN:
        attnames = tuple(f.attname for f in model._meta.concrete_fields)
        _PLAIN[model] = attnames[: len(MESSAGE_COLUMNS)] == MESSAGE_COLUMNS
    return _PLAIN[model]


# Queue name -> its shape as last seen by this process: FIFO (see _leasing), archives on
# ack (see ack). A stale entry costs one extra query, never a wrong result.
_FIFO_QUEUES: dict[str, bool] = {}
_ARCHIVES_ON_ACK: dict[str, bool] = {}

_MessageManagerBase = _SqlManager.from_queryset(MessageQuerySet)


class MessageManager(_MessageManagerBase):
    """``Message.objects``: the lease/ack operations as single statements."""

    def send_bodies(self, queue: str, bodies: Sequence[str], *, size: int, **options: Any) -> Any:
        """Insert JSON-encoded bodies; returns (queue_id or None, [msg_id, …], full)."""
        from .conf import settings

        params = {
            "queue": queue,
            "bodies": list(bodies),
            "size": size,
            "channel": settings.NOTIFY_CHANNEL,
            **options,
        }
        row = self._execute(SEND, params).fetchone()
        return row[0], row[1], row[3]

    def lease(
        self, queue: str, *, qty: int, vt: float | None, filters: dict[str, Any] | None = None
    ) -> tuple[list[Any], Any]:
        """Lease up to ``qty`` messages (``SELECT … FOR UPDATE SKIP LOCKED`` + UPDATE).

        Returns (messages, queue state): the state (see :meth:`queue_state`) is looked up
        only when nothing was leased, so the caller can tell an empty queue from a missing
        or paused one without a query of its own.
        """
        from .conf import settings

        clause, params = _filter_clause(filters or {})
        params.update(queue=queue, qty=qty, vt=vt, max_bytes=settings.READ_MAX_BYTES)
        return self._leasing(READ, queue, clause, params)

    def pop(self, queue: str, *, qty: int) -> tuple[list[Any], Any]:
        """Like :meth:`lease`, but the messages leave the queue (archived with archive_on_ack)."""
        from .conf import settings

        params = {"queue": queue, "qty": qty, "max_bytes": settings.READ_MAX_BYTES}
        return self._leasing(POP, queue, "", params)

    def _leasing(
        self, shapes: dict[bool, str], queue: str, clause: str, params: dict[str, Any]
    ) -> tuple[list[Any], Any]:
        """Run the statement of the queue's shape, remembered per process by queue name.

        A guess that no longer holds (a queue dropped and re-created as the other shape)
        matches no queue, so an empty result checks the shape once and runs the other one.
        """
        fifo = _FIFO_QUEUES.get(queue, False)
        rows = self._execute(shapes[fifo].format(filters=clause), params).fetchall()
        state = None
        if not rows:
            state = self.queue_state(queue)
            if state is not None and state[3] != fifo:
                fifo = _FIFO_QUEUES[queue] = state[3]
                rows = self._execute(shapes[fifo].format(filters=clause), params).fetchall()
        return sorted(self._instances(rows), key=lambda m: (m.priority, m.msg_id)), state

    def queue_state(self, queue: str) -> tuple[int, bool, int, bool, bool, int | None] | None:
        state: tuple[int, bool, int, bool, bool, int | None] | None
        state = self._execute(QUEUE_STATE, [queue]).fetchone()
        return state

    def read_by_id(self, queue: str, msg_id: int) -> tuple[int | None, Any]:
        row = self._execute(READ_BY_ID, {"queue": queue, "msg_id": msg_id}).fetchone()
        if row is None:
            return None, None
        found = self._instances([row], offset=1)
        return row[0], found[0] if found else None

    def ack(self, queue: str, refs: Sequence[MessageRef], *, result: str | None = None) -> Any:
        """Delete (or archive as acked); returns (queue_id or None, [deleted ids])."""
        params = {"queue": queue, "result": result, **_refs_params(refs)}
        archives = _ARCHIVES_ON_ACK.get(queue, False)
        row = self._execute(DELETE[archives], params).fetchone()
        if row[0] is None:
            state = self.queue_state(queue)
            if state is not None and state[4] != archives:
                archives = _ARCHIVES_ON_ACK[queue] = state[4]
                row = self._execute(DELETE[archives], params).fetchone()
        return row[:2]

    def archive(
        self,
        queue: str,
        refs: Sequence[MessageRef],
        *,
        outcome: str = "archived",
        result: str | None = None,
        error: str | None = None,
    ) -> Any:
        params = {
            "queue": queue,
            "outcome": outcome,
            "result": result,
            "error": error,
            **_refs_params(refs),
        }
        return self._execute(ARCHIVE, params).fetchone()

    def set_vt(self, queue: str, ref: MessageRef, vt: float) -> tuple[int | None, Any]:
        params = {"queue": queue, "msg_id": ref[0], "ct": ref[1], "vt": vt}
        row = self._execute(SET_VT, params).fetchone()
        found = self._instances([row], offset=1)
        return row[0], found[0] if found else None

    def nack(
        self, queue: str, ref: MessageRef, *, delay: float | None, error: str | None = None
    ) -> tuple[int | None, str | None]:
        """Returns (queue_id or None, 'retry' | 'dead_lettered' | 'dead' | None)."""
        from .conf import settings

        params = {
            "queue": queue,
            "msg_id": ref[0],
            "ct": ref[1],
            "delay": delay,
            "error": error,
            "channel": settings.NOTIFY_CHANNEL,
        }
        row = self._execute(NACK, params).fetchone()
        return row[0], row[1]

    def purge(self, queue: str) -> tuple[int | None, int]:
        queue_id, count = self._execute(PURGE, {"queue": queue}).fetchone()
        return queue_id, count

    def expire(self, queue_id: int | None = None) -> int:
        count: int = self._execute(EXPIRE, {"queue_id": queue_id}).fetchone()[0]
        return count

    def compact_counters(self) -> tuple[int, int]:
        """Returns (rows removed, rows written); run by worker maintenance."""
        removed, written = self._execute(COMPACT_COUNTERS, {}).fetchone()
        return removed, written

    def metrics_rows(self, queue: str | None) -> list[tuple[Any, ...]]:
        from .conf import settings

        params = {"queue": queue, "exact": settings.METRICS_EXACT_COUNT}
        rows: list[tuple[Any, ...]] = self._execute(METRICS, params).fetchall()
        return rows


def _filter_clause(filters: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """SQL for ``filters={"headers": {...}, "attributes": {...}, "label": "x"}``.

    Only fixed column names appear in the SQL; the values are parameters (jsonb containment
    for headers and attributes, equality for the label).
    """
    import json

    parts: list[str] = []
    params: dict[str, Any] = {}
    if filters.get("headers"):
        parts.append("AND m.headers @> %(f_headers)s::jsonb")
        params["f_headers"] = json.dumps(filters["headers"])
    if filters.get("attributes"):
        parts.append("AND m.attributes @> %(f_attributes)s::jsonb")
        params["f_attributes"] = json.dumps(filters["attributes"])
    if filters.get("label") is not None:
        parts.append("AND m.label = %(f_label)s")
        params["f_label"] = filters["label"]
    return " ".join(parts), params


class ArchivedMessageManager(models.Manager):
    """``ArchivedMessage.objects``: plain ORM access; rows arrive via the live manager."""

    def for_queue(self, name: str) -> models.QuerySet:
        return self.filter(queue__name=name)
