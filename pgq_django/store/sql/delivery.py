"""Delivery guarantees beyond lease and ack: dedup, cancellation, results, leases given back,
redrive, dead-lettering of crashed deliveries, expiry and pruning.

Run by the delivery methods of :class:`pgq_django.store.managers.MessageManager` and by
:class:`pgq_django.store.managers.ArchivedMessageManager` (pruning the archive).
"""

from __future__ import annotations

from .fragments import (
    HAS_ROOM,
    M_COLS,
    MESSAGE_COLUMNS,
    archive_rows,
    claim_dedup,
    count_one,
    count_per_queue,
    counted,
    dead_letter_set,
    expiry,
    insert_messages,
    next_msg_id,
)

# How long a dedup_id suppresses duplicates after the first send (SQS: five minutes).
DEDUP_WINDOW_SECONDS = 300

# How long a dropped queue's id is kept for sweeping rows that a send or archival racing the
# drop committed after it (see pgq_django.models.DroppedQueue). Such a statement found the
# queue before the drop committed, so only a transaction that stays open this long after
# sending could leave a row that outlives it.
DROPPED_QUEUE_MEMORY_SECONDS = 24 * 3600

# -- send_deduplicated -- Send one message unless its dedup_id was used in the last window
# (five minutes, SQS). The claim on (queue, dedup_id) is an upsert (see claim_dedup): the
# message is inserted only when this send's freshly drawn msg_id won the claim; otherwise
# msg_id answers the first send's id.
SEND_DEDUPLICATED = f"""
WITH q AS (
    SELECT id, name, durable, delivery_delay, retention, max_length FROM pgq_queue
    WHERE name = %(queue)s AND max_message_size >= %(size)s
), room AS (
    SELECT q.* FROM q WHERE {HAS_ROOM.format(q="q", n="1")}
), new AS MATERIALIZED (
    SELECT {next_msg_id("room")} AS msg_id FROM room
), claim AS (
    {claim_dedup(queue_id="q.id", rows="room q, new", returning="msg_id")}
), ins AS (
    {insert_messages("q", "%(body)s::jsonb", msg_id="new.msg_id")}
    FROM room q, new, claim WHERE claim.msg_id = new.msg_id
    RETURNING msg_id
), counted AS (
    {counted(count_one("'sent'", "EXISTS (SELECT 1 FROM ins)"))}
)
SELECT (SELECT id FROM q) AS found_queue_id,
       (SELECT msg_id FROM claim) AS msg_id,
       EXISTS (SELECT 1 FROM ins) AS inserted,
       (SELECT count(pg_notify(%(channel)s, q.name)) FROM q
        WHERE EXISTS (SELECT 1 FROM ins) AND coalesce(%(delay)s, q.delivery_delay) <= 0)
           AS notified,
       EXISTS (SELECT 1 FROM q) AND NOT EXISTS (SELECT 1 FROM room) AS queue_full
"""

# -- cancel -- Cancel one message: archive it as 'cancelled' unless a consumer holds its
# lease right now, in which case flag it (cancel_requested) for the handler to see. Answers
# the outcome: cancelled, cancel_requested, or NULL (no such message).
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
    RETURNING {M_COLS}
), a AS (
    {archive_rows("d", "'cancelled'")}
), counted AS (
    {counted(count_one("'cancelled'", "EXISTS (SELECT 1 FROM d)"))}
)
SELECT (SELECT id FROM q) AS found_queue_id,
       CASE WHEN EXISTS (SELECT 1 FROM d) THEN 'cancelled'
            WHEN EXISTS (SELECT 1 FROM flagged) THEN 'cancel_requested' END AS outcome
"""

# -- cancel_requested -- Whether someone asked to cancel a message (handlers poll this).
CANCEL_REQUESTED = "SELECT cancel_requested FROM pgq_message WHERE msg_id = %(msg_id)s"

# -- result -- Where a message is now: live (pending or leased) or archived with its outcome,
# result, error and archive time (finished_at), followed by its message columns.
RESULT = f"""
SELECT 'archive' AS location, q.name AS queue_name, a.outcome, a.result, a.error,
       a.archived_at AS finished_at, {", ".join("a." + c for c in MESSAGE_COLUMNS)}
FROM pgq_archived_message a JOIN pgq_queue q ON q.id = a.queue_id
WHERE a.msg_id = %(msg_id)s
UNION ALL
SELECT 'live', q.name,
       CASE WHEN m.read_ct > 0 AND m.vt > clock_timestamp() THEN 'leased' ELSE 'pending' END,
       NULL::jsonb, NULL::text, NULL::timestamptz, {M_COLS}
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
SELECT (SELECT id FROM q) AS found_queue_id,
       ARRAY(SELECT msg_id FROM u ORDER BY msg_id) AS msg_ids,
       (SELECT count(pg_notify(%(channel)s, q.name)) FROM q WHERE EXISTS (SELECT 1 FROM u))
           AS notified
"""

# A redrive's counters: 'redriven' per destination queue, and 'redriven_out' on the
# dead-letter queue for all the messages that left it, if any.
_REDRIVE_COUNTED = counted(
    count_per_queue("'redriven'", "moved", queue_id="dest_id"),
    "SELECT (SELECT id FROM dlq), 'redriven_out', count(*), clock_timestamp() FROM moved\n"
    "    HAVING count(*) > 0",
)

# -- redrive -- Move dead-lettered messages (oldest first) back to the queue they failed on, or
# to `to`: read_ct and visibility reset, expiry renewed, the dead-letter history kept as
# headers["pgq_redriven"]. The origin is the server-side dead_letter_origin_id, never a
# header; `origins` (queue names) limits the move to messages that failed on one of them.
# Messages someone is reading from the DLQ right now are skipped.
REDRIVE = f"""
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
        expires_at = {expiry("t.retention")},
        headers = (m.headers - 'pgq_dead_letter') || jsonb_build_object('pgq_redriven',
            coalesce(m.headers -> 'pgq_redriven', '[]'::jsonb)
            || jsonb_build_array(coalesce(m.headers -> 'pgq_dead_letter', '{{}}'::jsonb)
                                 || jsonb_build_object('redriven_at', clock_timestamp())))
    FROM t WHERE m.msg_id = t.msg_id
    RETURNING m.msg_id, t.dest_id, t.dest_name
), counted AS (
    {_REDRIVE_COUNTED}
)
SELECT (SELECT id FROM dlq) AS found_queue_id,
       (SELECT count(*) FROM moved) AS moved,
       (SELECT count(pg_notify(%(channel)s, n.dest_name))
        FROM (SELECT DISTINCT dest_name FROM moved) n) AS notified
"""

# -- dead_letter_origins -- How many messages of a dead-letter queue failed on each queue that
# still exists: where a redrive would send them.
DEAD_LETTER_ORIGINS = """
SELECT origin.name AS queue_name, count(*) AS messages
FROM pgq_message m JOIN pgq_queue origin ON origin.id = m.dead_letter_origin_id
WHERE m.queue_id = (SELECT id FROM pgq_queue WHERE name = %(dlq)s)
GROUP BY origin.name
ORDER BY origin.name
"""

# The dead-letter move of a message whose last lease ran out (``t`` holds its queue and
# dead-letter queue), and the counters: 'dead' per queue it failed on (moved or archived),
# 'dead_arrived' per dead-letter queue it moved to.
_EXPIRED_LEASE_DEAD_LETTER = dead_letter_set(
    dlq_id="t.dlq_id",
    origin_id="t.queue_id",
    origin_name="t.queue_name",
    retention="t.dlq_retention",
)
_EXPIRED_LEASE_COUNTED = counted(
    count_per_queue(
        "'dead'",
        "(SELECT queue_id FROM moved UNION ALL SELECT queue_id FROM gone) x",
        queue_id="x.queue_id",
    ),
    count_per_queue("'dead_arrived'", "moved", queue_id="dlq_id"),
)

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
    SET {_EXPIRED_LEASE_DEAD_LETTER}
    FROM t WHERE m.msg_id = t.msg_id AND t.dlq_id IS NOT NULL
    RETURNING m.msg_id, t.queue_id, t.dlq_id, t.dlq_name
), gone AS (
    DELETE FROM pgq_message m USING t
    WHERE m.msg_id = t.msg_id AND t.dlq_id IS NULL
    RETURNING {M_COLS}
), archived AS (
    {archive_rows("gone", "'dead'", error="%(error)s")}
), counted AS (
    {_EXPIRED_LEASE_COUNTED}
)
SELECT (SELECT count(*) FROM moved) + (SELECT count(*) FROM gone) AS dead,
       (SELECT count(pg_notify(%(channel)s, n.dlq_name))
        FROM (SELECT DISTINCT dlq_name FROM moved) n) AS notified
"""

# -- expire -- Archive messages past their expiry as 'expired' (all queues, or one).
EXPIRE = f"""
WITH d AS (
    DELETE FROM pgq_message m
    WHERE m.expires_at <= clock_timestamp()
      AND (%(queue_id)s::bigint IS NULL OR m.queue_id = %(queue_id)s::bigint)
    RETURNING {M_COLS}
), a AS (
    {archive_rows("d", "'expired'")}
), counted AS (
    {counted(count_per_queue("'expired'", "d"))}
)
SELECT count(*) AS expired FROM d
"""

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
SELECT count(*) AS pruned FROM d
"""

# -- prune_dedup -- Forget dedup claims whose window has passed.
PRUNE_DEDUP = """
WITH d AS (DELETE FROM pgq_dedup WHERE expires_at <= clock_timestamp() RETURNING 1)
SELECT count(*) AS pruned FROM d
"""

# -- sweep_dropped_queues -- Delete the rows of the dropped queues %(ids)s (messages, archive
# rows, counter rows) that statements racing the drop committed after it (migration 0011).
# Run unprepared, so each partition is planned for these ids: a search of its queue index.
SWEEP_DROPPED_QUEUES = """
WITH m AS (
    DELETE FROM pgq_message WHERE queue_id = ANY(%(ids)s::bigint[]) RETURNING 1
), a AS (
    DELETE FROM pgq_archived_message WHERE queue_id = ANY(%(ids)s::bigint[]) RETURNING 1
), c AS (
    DELETE FROM pgq_queue_counter WHERE queue_id = ANY(%(ids)s::bigint[])
)
SELECT (SELECT count(*) FROM m) AS messages, (SELECT count(*) FROM a) AS archived
"""
