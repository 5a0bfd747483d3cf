"""The counters behind metrics and charts, and the metrics read from them.

Every send, ack, archive, dead-letter, expiry, purge and redrive inserts a counter row (see
:func:`pgq_django.store.sql.fragments.counted`); maintenance folds finished minutes into one row per
queue, kind and minute. Run by :class:`pgq_django.store.managers.MessageManager`.
"""

from __future__ import annotations

from .fragments import counted, counter_total

# -- compact_counters -- Fold finished minutes of counter rows into one row per queue, kind
# and minute, so counting stays cheap while per-minute history remains for charts.
COMPACT_COUNTERS = f"""
WITH old AS (
    DELETE FROM pgq_queue_counter
    WHERE at < date_trunc('minute', clock_timestamp())
      AND id NOT IN (
          SELECT min(id) FROM pgq_queue_counter
          WHERE at < date_trunc('minute', clock_timestamp())
          GROUP BY queue_id, kind, date_trunc('minute', at) HAVING count(*) = 1)
    RETURNING queue_id, kind, n, at
), folded AS (
    {counted("SELECT queue_id, kind, sum(n), date_trunc('minute', at) FROM old")}
    GROUP BY queue_id, kind, date_trunc('minute', at)
    RETURNING 1
)
SELECT (SELECT count(*) FROM old) AS removed, (SELECT count(*) FROM folded) AS written
"""

# The summed counts a process writes, for the queues that still exist (``live``).
_SUMS = """SELECT u.queue_id, u.kind, u.n, u.at
    FROM unnest(%(queue_ids)s::bigint[], %(kinds)s::text[], %(ns)s::bigint[],
                %(ats)s::timestamptz[]) AS u(queue_id, kind, n, at)
    WHERE u.queue_id IN (SELECT id FROM live)"""

# -- add_counts -- Write a process's sums of autocommit sends and acks (tallies.write_counts):
# one counter row per queue, kind and minute; counts of a queue dropped since are left out.
# The queues are share-locked first, so a drop running at the same moment either waits for
# this insert or has already removed the queue (nothing is left for upkeep to sweep).
ADD_COUNTS = f"""WITH live AS (
    SELECT id FROM pgq_queue WHERE id = ANY(%(queue_ids)s::bigint[]) FOR KEY SHARE
)
{counted(_SUMS)}
RETURNING queue_id"""

# -- metrics -- PGMQ's queue metrics plus in-flight, dead-letter and delayed counts, per
# queue, at a cost that does not grow with the backlog: every part reads a bounded stretch of
# the ready index (queue_id, priority, msg_id) or the planner's statistics, never the whole
# queue.
# - queue_length: counted exactly up to %(exact)s messages (an index-only count); a longer
#   queue reports the planner's estimate (partition row counts times the share of rows
#   ANALYZE saw for the queue), never less than the exact bound.
# - in_flight: leased messages among the first %(exact)s in delivery order. Leases are taken
#   from the head of a queue, so this is exact unless more than that many messages are
#   leased, delayed or waiting to retry ahead of the rest. delayed (never read, not yet
#   visible) is counted over the same stretch.
# - oldest/newest: the lowest and highest msg_id of each of the queue's first 64 priority
#   levels (a skip scan of the index), and their enqueue times.
METRICS = f"""
SELECT q.name AS queue_name,
       CASE WHEN c.n < %(exact)s THEN c.n
            ELSE greatest(c.n, coalesce(est.n, 0)::bigint) END AS queue_length,
       extract(epoch FROM clock_timestamp() - newest.enqueued_at)::float8 AS newest_msg_age_sec,
       extract(epoch FROM clock_timestamp() - oldest.enqueued_at)::float8 AS oldest_msg_age_sec,
       {counter_total("'sent'", "q.id")} AS total_messages,
       f.in_flight,
       {counter_total("'dead'", "q.id")} AS dead_letters,
       clock_timestamp() AS scrape_time,
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
