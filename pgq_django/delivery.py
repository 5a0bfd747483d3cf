"""Delivery guarantees beyond lease and ack: dedup, cancellation, results, redrive, rescue.

Like :mod:`pgq_django.managers`, every statement here is a named module constant with a
one-line description, run in one round trip and parameterised. The functional API
(:mod:`pgq_django.api.delivery`) validates arguments and calls the small runner functions
at the bottom; the worker calls :func:`dead_letter_expired_leases` and :func:`prune` through
its maintenance duties.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from .conf import settings
from .managers import _COLS, _M_COLS, HAS_ROOM, MESSAGE_COLUMNS, execute_statement

# How long a dedup_id suppresses duplicates after the first send (SQS: five minutes).
DEDUP_WINDOW_SECONDS = 300

# -- send_deduplicated -- Send one message unless its dedup_id was used in the last 5 minutes.
# The claim on (queue, dedup_id) is an upsert that only replaces an expired claim, so two
# concurrent sends serialise on the unique key: the second waits for the first to commit and
# then sees its claim. The winner is whoever's freshly drawn msg_id is in the claim row.
SEND_DEDUPLICATED = f"""
WITH q AS (
    SELECT id, name, delivery_delay, retention, max_length FROM pgq_queue
    WHERE name = %(queue)s AND max_message_size >= %(size)s
), room AS (
    SELECT q.* FROM q WHERE {HAS_ROOM.format(q="q", n="1")}
), new AS MATERIALIZED (
    SELECT nextval('pgq_message_msg_id_seq') AS msg_id FROM room
), claim AS (
    INSERT INTO pgq_dedup (queue_id, dedup_id, msg_id, expires_at)
    SELECT q.id, %(dedup_id)s, new.msg_id,
           clock_timestamp() + make_interval(secs => %(window)s)
    FROM room q, new
    ON CONFLICT (queue_id, dedup_id) DO UPDATE
        SET msg_id = CASE WHEN pgq_dedup.expires_at <= clock_timestamp()
                          THEN EXCLUDED.msg_id ELSE pgq_dedup.msg_id END,
            expires_at = CASE WHEN pgq_dedup.expires_at <= clock_timestamp()
                              THEN EXCLUDED.expires_at ELSE pgq_dedup.expires_at END
    RETURNING msg_id
), ins AS (
    INSERT INTO pgq_message (msg_id, queue_id, message, headers, attributes, label, priority,
                             read_ct, enqueued_at, vt, expires_at, group_id, dedup_id,
                             max_retries, retry_delay, cancel_requested)
    SELECT new.msg_id, q.id, %(body)s::jsonb, %(headers)s::jsonb, %(attributes)s::jsonb,
           %(label)s, %(priority)s, 0, clock_timestamp(),
           clock_timestamp() + make_interval(secs => coalesce(%(delay)s, q.delivery_delay)),
           clock_timestamp() + make_interval(secs => least(q.retention,
                                                           coalesce(%(expires_in)s, q.retention))),
           %(group)s, %(dedup_id)s, %(max_retries)s, %(retry_delay)s, false
    FROM room q, new, claim WHERE claim.msg_id = new.msg_id
    RETURNING msg_id
), counted AS (
    INSERT INTO pgq_queue_counter (queue_id, kind, n, at)
    SELECT q.id, 'sent', 1, clock_timestamp() FROM q WHERE EXISTS (SELECT 1 FROM ins)
)
SELECT (SELECT id FROM q),
       (SELECT msg_id FROM claim),
       EXISTS (SELECT 1 FROM ins),
       (SELECT pg_notify(%(channel)s, q.name) FROM q
        WHERE EXISTS (SELECT 1 FROM ins) AND coalesce(%(delay)s, q.delivery_delay) <= 0),
       EXISTS (SELECT 1 FROM q) AND NOT EXISTS (SELECT 1 FROM room)
"""

# -- cancel -- Cancel one message: archive it as 'cancelled' unless a consumer holds its
# lease right now, in which case flag it (cancel_requested) for the handler to see.
CANCEL = f"""
WITH q AS (SELECT id FROM pgq_queue WHERE name = %(queue)s),
t AS (
    SELECT m.msg_id, (m.read_ct > 0 AND m.vt > clock_timestamp()) AS leased
    FROM pgq_message m
    WHERE m.queue_id = (SELECT id FROM q) AND m.msg_id = %(msg_id)s
    FOR UPDATE OF m
), flagged AS (
    UPDATE pgq_message m SET cancel_requested = true
    FROM t WHERE m.msg_id = t.msg_id AND t.leased
    RETURNING m.msg_id
), d AS (
    DELETE FROM pgq_message m USING t WHERE m.msg_id = t.msg_id AND NOT t.leased
    RETURNING {_M_COLS}
), a AS (
    INSERT INTO pgq_archived_message ({_COLS}, archived_at, outcome)
    SELECT {_COLS}, clock_timestamp(), 'cancelled' FROM d
), counted AS (
    INSERT INTO pgq_queue_counter (queue_id, kind, n, at)
    SELECT q.id, 'cancelled', 1, clock_timestamp() FROM q WHERE EXISTS (SELECT 1 FROM d)
)
SELECT (SELECT id FROM q),
       CASE WHEN EXISTS (SELECT 1 FROM d) THEN 'cancelled'
            WHEN EXISTS (SELECT 1 FROM flagged) THEN 'cancel_requested' END
"""

# -- cancel_requested -- Whether someone asked to cancel a message (handlers poll this).
CANCEL_REQUESTED = "SELECT cancel_requested FROM pgq_message WHERE msg_id = %(msg_id)s"

# -- result -- Where a message is now: live (pending or leased) or archived with its outcome.
RESULT = f"""
SELECT 'archive', q.name, a.outcome, a.result, a.error, a.archived_at, {
    ", ".join("a." + c for c in MESSAGE_COLUMNS)
}
FROM pgq_archived_message a JOIN pgq_queue q ON q.id = a.queue_id
WHERE a.msg_id = %(msg_id)s
UNION ALL
SELECT 'live', q.name,
       CASE WHEN m.read_ct > 0 AND m.vt > clock_timestamp() THEN 'leased' ELSE 'pending' END,
       NULL::jsonb, NULL::text, NULL::timestamptz, {_M_COLS}
FROM pgq_message m JOIN pgq_queue q ON q.id = m.queue_id
WHERE m.msg_id = %(msg_id)s
LIMIT 1
"""

# -- release_leases -- Give leased messages back unstarted (a stopping worker's prefetched
# batch): visible at once, and the delivery that never ran is not counted as an attempt.
RELEASE_LEASES = """
WITH q AS (SELECT id, name FROM pgq_queue WHERE name = %(queue)s),
u AS (
    UPDATE pgq_message m SET vt = clock_timestamp(), read_ct = greatest(m.read_ct - 1, 0)
    FROM unnest(%(ids)s::bigint[], %(cts)s::int[]) AS r(id, ct)
    WHERE m.queue_id = (SELECT id FROM q) AND m.msg_id = r.id AND m.read_ct = r.ct
    RETURNING m.msg_id
)
SELECT (SELECT id FROM q), ARRAY(SELECT msg_id FROM u ORDER BY msg_id),
       (SELECT pg_notify(%(channel)s, q.name) FROM q WHERE EXISTS (SELECT 1 FROM u))
"""

# -- redrive -- Move dead-lettered messages (oldest first) back to the queue they failed on, or
# to `to`: read_ct and visibility reset, expiry renewed, the dead-letter history kept as
# headers["pgq_redriven"]. The origin is the server-side dead_letter_origin_id, never a
# header; `origins` (queue names) limits the move to messages that failed on one of them.
# Messages someone is reading from the DLQ right now are skipped.
REDRIVE = """
WITH dlq AS (SELECT id FROM pgq_queue WHERE name = %(dlq)s),
t AS (
    SELECT m.msg_id, dest.id AS dest_id, dest.name AS dest_name, dest.retention
    FROM pgq_message m
    JOIN pgq_queue dest
      ON dest.id = coalesce((SELECT id FROM pgq_queue WHERE name = %(to)s::text),
                            m.dead_letter_origin_id)
    WHERE m.queue_id = (SELECT id FROM dlq)
      AND (%(origins)s::text[] IS NULL OR m.dead_letter_origin_id IN (
            SELECT id FROM pgq_queue WHERE name = ANY(%(origins)s::text[])))
      AND (m.read_ct = 0 OR m.vt <= clock_timestamp())
      AND dest.id <> m.queue_id
    ORDER BY m.msg_id
    LIMIT %(limit)s
    FOR UPDATE OF m SKIP LOCKED
), moved AS (
    UPDATE pgq_message m
    SET queue_id = t.dest_id, dead_letter_origin_id = NULL, read_ct = 0, vt = clock_timestamp(),
        cancel_requested = false,
        expires_at = clock_timestamp() + make_interval(secs => t.retention),
        headers = (m.headers - 'pgq_dead_letter') || jsonb_build_object('pgq_redriven',
            coalesce(m.headers -> 'pgq_redriven', '[]'::jsonb)
            || jsonb_build_array(coalesce(m.headers -> 'pgq_dead_letter', '{}'::jsonb)
                                 || jsonb_build_object('redriven_at', clock_timestamp())))
    FROM t WHERE m.msg_id = t.msg_id
    RETURNING m.msg_id, t.dest_id, t.dest_name
), counted AS (
    INSERT INTO pgq_queue_counter (queue_id, kind, n, at)
    SELECT dest_id, 'redriven', count(*), clock_timestamp() FROM moved GROUP BY dest_id
    UNION ALL
    SELECT (SELECT id FROM dlq), 'redriven_out', count(*), clock_timestamp() FROM moved
    HAVING count(*) > 0
)
SELECT (SELECT id FROM dlq),
       (SELECT count(*) FROM moved),
       (SELECT count(pg_notify(%(channel)s, n.dest_name))
        FROM (SELECT DISTINCT dest_name FROM moved) n)
"""

# -- dead_letter_origins -- How many messages of a dead-letter queue failed on each queue that
# still exists: where a redrive would send them.
DEAD_LETTER_ORIGINS = """
SELECT origin.name, count(*)
FROM pgq_message m JOIN pgq_queue origin ON origin.id = m.dead_letter_origin_id
WHERE m.queue_id = (SELECT id FROM pgq_queue WHERE name = %(dlq)s)
GROUP BY origin.name
ORDER BY origin.name
"""

# -- dead_letter_expired_leases -- Messages whose last lease ran out after their final allowed
# attempt (the consumer crashed or hung every time) are dead: to the DLQ with their history,
# or to the archive as 'dead'. Without this a message that kills its worker would be leased
# forever.
DEAD_LETTER_EXPIRED_LEASES = f"""
WITH t AS (
    SELECT m.msg_id, m.read_ct, q.id AS queue_id, q.name AS queue_name,
           dlq.id AS dlq_id, dlq.name AS dlq_name, dlq.retention AS dlq_retention
    FROM pgq_message m
    JOIN pgq_queue q ON q.id = m.queue_id
    LEFT JOIN pgq_queue dlq ON dlq.id = q.dead_letter_queue_id
    WHERE m.vt <= clock_timestamp()
      AND m.read_ct > coalesce(m.max_retries, q.max_retries)
    ORDER BY m.msg_id
    LIMIT %(limit)s
    FOR UPDATE OF m SKIP LOCKED
), moved AS (
    UPDATE pgq_message m
    SET queue_id = t.dlq_id, dead_letter_origin_id = t.queue_id, vt = clock_timestamp(),
        read_ct = 0,
        expires_at = clock_timestamp() + make_interval(secs => t.dlq_retention),
        headers = m.headers || jsonb_build_object('pgq_dead_letter', jsonb_build_object(
            'attempts', m.read_ct, 'last_error', %(error)s::text,
            'original_queue', t.queue_name, 'dead_lettered_at', clock_timestamp()))
    FROM t WHERE m.msg_id = t.msg_id AND t.dlq_id IS NOT NULL
    RETURNING m.msg_id, t.queue_id, t.dlq_id, t.dlq_name
), gone AS (
    DELETE FROM pgq_message m USING t
    WHERE m.msg_id = t.msg_id AND t.dlq_id IS NULL
    RETURNING {_M_COLS}
), archived AS (
    INSERT INTO pgq_archived_message ({_COLS}, archived_at, outcome, error)
    SELECT {_COLS}, clock_timestamp(), 'dead', %(error)s FROM gone
), counted AS (
    INSERT INTO pgq_queue_counter (queue_id, kind, n, at)
    SELECT x.queue_id, 'dead', count(*), clock_timestamp()
    FROM (SELECT queue_id FROM moved UNION ALL SELECT queue_id FROM gone) x
    GROUP BY x.queue_id
    UNION ALL
    SELECT dlq_id, 'dead_arrived', count(*), clock_timestamp() FROM moved GROUP BY dlq_id
)
SELECT (SELECT count(*) FROM moved) + (SELECT count(*) FROM gone),
       (SELECT count(pg_notify(%(channel)s, n.dlq_name))
        FROM (SELECT DISTINCT dlq_name FROM moved) n)
"""

# -- lock_dead_letter_graph -- Take turns changing queues' dead-letter queues (until commit),
# so two concurrent changes cannot each pass the cycle check and together close a cycle.
LOCK_DEAD_LETTER_GRAPH = "SELECT pg_advisory_xact_lock(hashtext('pgq_django.dead_letter_graph'))"

# -- prune_archive -- Delete archived messages older than their queue's retention (and
# archived before %(before)s: where exports must cover what goes, the end of their coverage).
PRUNE_ARCHIVE = """
WITH d AS (
    DELETE FROM pgq_archived_message a USING pgq_queue q
    WHERE a.queue_id = q.id
      AND a.archived_at < clock_timestamp() - make_interval(secs => q.retention)
      AND a.archived_at < %(before)s::timestamptz
    RETURNING 1
)
SELECT count(*) FROM d
"""

# -- prune_dedup -- Forget dedup claims whose five-minute window has passed.
PRUNE_DEDUP = """
WITH d AS (DELETE FROM pgq_dedup WHERE expires_at <= clock_timestamp() RETURNING 1)
SELECT count(*) FROM d
"""


def run(sql: str, params: Any) -> tuple[Any, ...] | None:
    """Run one named statement on the queue database and return its single row."""
    with execute_statement(sql, params) as cursor:
        row: tuple[Any, ...] | None = cursor.fetchone()
    return row


def run_all(sql: str, params: Any) -> list[tuple[Any, ...]]:
    with execute_statement(sql, params) as cursor:
        rows: list[tuple[Any, ...]] = cursor.fetchall()
    return rows


def dead_letter_expired_leases(*, limit: int = 1000) -> int:
    """Dead-letter messages that used up their attempts by crashing or hanging consumers."""
    row = run(
        DEAD_LETTER_EXPIRED_LEASES,
        {
            "limit": limit,
            "error": "lease expired after the last allowed attempt",
            "channel": settings.NOTIFY_CHANNEL,
        },
    )
    return int(row[0]) if row else 0


def prune() -> dict[str, int]:
    """Retention for what is no longer live: old archive rows and spent dedup claims.

    With ``PGQ["ARCHIVE_DROP_REQUIRES_EXPORT"]`` only archive rows that recorded Spark
    exports cover are deleted (see :func:`pgq_django.partitions.export_covered_until`).
    """
    before = datetime.max.replace(tzinfo=UTC)
    if settings.ARCHIVE_DROP_REQUIRES_EXPORT:
        from .partitions import export_covered_until

        before = export_covered_until() or datetime.min.replace(tzinfo=UTC)
    archived = run(PRUNE_ARCHIVE, {"before": before})
    dedup = run(PRUNE_DEDUP, {})
    return {
        "archive_pruned": int(archived[0]) if archived else 0,
        "dedup_pruned": int(dedup[0]) if dedup else 0,
    }
