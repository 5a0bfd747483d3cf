"""Publishing through an exchange: route one message to every matching bound queue.

The routing rules (fanout, direct, topic, headers, binding filters) are described in
:mod:`pgq_django.routing`, which also compiles topic patterns. Run by
:class:`pgq_django.store.managers.ExchangeManager`.
"""

from __future__ import annotations

from .fragments import (
    HAS_ROOM,
    claim_dedup,
    count_per_queue,
    counted,
    insert_messages,
    next_msg_id,
)

# The queues a published message routes to (``matched``), the first of them too small for
# the body (``too_large``) and the first without room under its max_length (``full_queue``).
# Either of the last two stops the whole publish: every copy is sent, or none. Shared by both
# shapes of publish below.
_ROUTE = f"""
    x AS (
    SELECT id, type FROM pgq_exchange WHERE name = %(exchange)s
), matched AS (
    SELECT DISTINCT q.id, q.name, q.durable, q.delivery_delay, q.retention, q.max_message_size,
                    q.max_length
    FROM x
    JOIN pgq_binding b ON b.exchange_id = x.id
    JOIN pgq_queue q ON q.id = b.queue_id
    WHERE CASE x.type
            WHEN 'direct' THEN b.routing_key = %(routing_key)s
            WHEN 'topic' THEN %(topic_subject)s ~ b.key_pattern
            ELSE true
          END
      AND NOT EXISTS (
            SELECT 1 FROM jsonb_each(b.filters) f(name, allowed)
            WHERE NOT f.allowed @> jsonb_build_array(coalesce(
                %(headers)s::jsonb -> f.name, %(attributes)s::jsonb -> f.name, 'null'::jsonb)))
), too_large AS (
    SELECT name FROM matched WHERE max_message_size < %(size)s ORDER BY name LIMIT 1
), full_queue AS (
    SELECT name FROM matched m WHERE NOT {HAS_ROOM.format(q="m", n="1")} ORDER BY name LIMIT 1
), go AS (
    SELECT m.* FROM matched m
    WHERE NOT EXISTS (SELECT 1 FROM too_large) AND NOT EXISTS (SELECT 1 FROM full_queue)
)"""


def _copies(target: str, msg_id: str | None) -> str:
    """Insert one copy per row of ``target`` (queue columns as in ``matched``), in queue-name
    order; msg_id drawn from each queue's id space, or ``msg_id`` when drawn early."""
    return f"""
    {insert_messages("t", "%(body)s::jsonb", msg_id=msg_id)}
    FROM {target} t
    ORDER BY t.name
    RETURNING msg_id, queue_id
"""


def _published(ids: str) -> str:
    """Count the copies and answer: exchange found, new ids (from CTE ``ids``), the queue
    too small and the queue full (either: nothing inserted); listeners woken."""
    return f"""
, counted AS (
    {counted(count_per_queue("'sent'", "ins"))}
)
SELECT (SELECT id FROM x) AS exchange_id,
       ARRAY(SELECT msg_id FROM {ids} ORDER BY msg_id) AS msg_ids,
       (SELECT name FROM too_large) AS too_large,
       (SELECT count(pg_notify(%(channel)s, m.name)) FROM matched m
        WHERE coalesce(%(delay)s, m.delivery_delay) <= 0
          AND m.id IN (SELECT queue_id FROM ins)) AS notified,
       (SELECT name FROM full_queue) AS queue_full
"""


# -- publish -- Route one message through an exchange: one copy per matched queue, one trip.
# Answers the exchange id (NULL: no such exchange), the new ids, the name of a matched queue
# too small for the body and the name of a matched queue that is full (then nothing is
# inserted).
PUBLISH = f"""WITH {_ROUTE}, ins AS ({_copies("go", None)}){_published("ins")}"""

# -- publish_deduplicated -- Publish under a dedup_id: each routed queue keeps its own claim
# (as a send would), so a repeat within the window inserts no copy in a queue that already
# has one and answers that copy's msg_id. Queues that gained a binding since get theirs.
PUBLISH_DEDUPLICATED = f"""WITH {_ROUTE}, new AS MATERIALIZED (
    SELECT go.*, {next_msg_id("go")} AS msg_id FROM go
), claim AS (
    {claim_dedup(queue_id="new.id", rows="new", returning="queue_id, msg_id")}
), target AS (
    SELECT new.* FROM new JOIN claim ON claim.queue_id = new.id AND claim.msg_id = new.msg_id
), ins AS ({_copies("target", "t.msg_id")}){_published("claim")}"""
