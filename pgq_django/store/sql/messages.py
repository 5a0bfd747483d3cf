"""The live queue: send, lease, acknowledge, archive, extend, fail and purge messages.

Every statement looks the queue up by name in a ``q`` CTE and reports the id it found as
``found_queue_id`` (NULL: no such queue, or not the shape the statement is for), so "unknown
queue" costs no extra round trip on the success path. Two are leaner: SEND_ONE and ACK_ONE,
the usual send and ack, join the queue instead and answer only when they acted; the manager
then runs the full statement to learn why they did not. Run by
:class:`pgq_django.store.managers.MessageManager`.
"""

from __future__ import annotations

from .fragments import (
    COLS,
    HAS_ROOM,
    M_COLS,
    OPTION_DEFAULTS,
    OPTION_PARAMETERS,
    TRANSIENT_FIRST_ID,
    UNLIMITED_QUEUE,
    archive_rows,
    count_one,
    count_rows,
    counted,
    dead_letter_set,
    insert_messages,
    notify_queue,
)

# A send that is its own transaction into a non-durable queue commits without waiting for
# the WAL flush. Its message row is UNLOGGED; the only WAL it may write is its sequence's (one
# send in 32), which alone would make the commit wait for an fsync: a crash loses nothing the
# crash does not take anyway (the message), and anything committed after it flushes its WAL
# too. Never inside the caller's transaction, whose own writes must stay durable;
# set_config(..., true) ends with the commit.
_RELAX_COMMIT = """,
       (SELECT set_config('synchronous_commit', 'off', true) FROM room q
        WHERE NOT q.durable) AS relaxed_commit"""


def _send(counted_here: bool, *, plain: bool = False) -> str:
    """SEND's text: with its 'sent' counter row, or (a send that is its own transaction)
    without it and with the relaxed commit of a non-durable queue (see SEND_UNCOUNTED).
    ``plain``: one body (``%(body)s``, not an array) and the send options' defaults as
    constants (see SEND_PLAIN)."""
    count = (
        f""", counted AS (
    {counted("SELECT q.id, 'sent', (SELECT count(*) FROM ins), clock_timestamp() FROM room q")}
)"""
        if counted_here
        else ""
    )
    relax = "" if counted_here else _RELAX_COMMIT
    # Whether the queue has max_length (the manager sends into one without it by SEND_ONE).
    bounded = ",\n       (SELECT max_length IS NOT NULL FROM q) AS bounded" if plain else ""
    options = OPTION_DEFAULTS if plain else OPTION_PARAMETERS
    if plain:
        n, rows = "1", "FROM room q"
        body = "%(body)s::jsonb"
    else:
        n = "cardinality(%(bodies)b::text[])"
        rows = """FROM room q, unnest(%(bodies)b::text[]::jsonb[]) WITH ORDINALITY AS b(body, ord)
    ORDER BY b.ord"""
        body = "b.body"
    return f"""
WITH q AS (
    SELECT id, name, durable, delivery_delay, retention, max_length FROM pgq_queue
    WHERE name = %(queue)s AND max_message_size >= %(size)s
), room AS (
    SELECT q.* FROM q WHERE {HAS_ROOM.format(q="q", n=n)}
), ins AS (
    {insert_messages("q", body, options=options)}
    {rows}
    RETURNING msg_id
){count}
SELECT (SELECT id FROM q) AS found_queue_id,
       ARRAY(SELECT msg_id FROM ins ORDER BY msg_id) AS msg_ids,
       (SELECT count({notify_queue("q.name")}) FROM room q
        WHERE %(notify)s AND coalesce({options["delay"]}, q.delivery_delay) <= 0) AS notified,
       EXISTS (SELECT 1 FROM q) AND NOT EXISTS (SELECT 1 FROM room) AS queue_full{bounded}{relax}
"""


# -- send -- Insert messages into a queue, in input order, count them, and wake listeners
# unless %(notify)s is false (a throttled send: pgq_django.store.wakeups owes it a wake-up after
# its commit); ``notified`` answers whether it did (1) or not (0). Inserts nothing, and
# answers queue_full = true, when max_length leaves no room for them all.
SEND = _send(True)

# -- send_uncounted -- SEND without the counter row, for a send that commits on its own
# (autocommit): pgq_django.store.tallies adds it to the process's sums once it has committed. Into
# a non-durable queue it also commits without waiting for the WAL flush (_RELAX_COMMIT).
SEND_UNCOUNTED = _send(False)

# -- send_plain -- SEND_UNCOUNTED of one body (%(body)s) without send options, the usual
# send into a queue with max_length, or after SEND_ONE could not send: the options' defaults
# are constants in the text, so the client binds five parameters instead of nineteen and no
# array (the same answer and wake-up as SEND, and whether the queue is ``bounded``).
SEND_PLAIN = _send(False, plain=True)

# -- send_plain_counted -- SEND_PLAIN inside the caller's transaction: with its 'sent'
# counter row (SEND's answer, and whether the queue is ``bounded``).
SEND_PLAIN_COUNTED = _send(True, plain=True)


def _send_one(counted_here: bool) -> str:
    """SEND_ONE's text, or (inside the caller's transaction) SEND_ONE_COUNTED's: the same
    INSERT with its 'sent' counter row in a CTE, and no relaxed commit."""
    insert = f"""{insert_messages("q", "%(body)s::jsonb", options=OPTION_DEFAULTS)}
    FROM pgq_queue q
    WHERE q.name = %(queue)s AND q.max_message_size >= %(size)s AND q.max_length IS NULL"""
    wake = f"""(CASE WHEN %(notify)s AND vt <= clock_timestamp() THEN {notify_queue("%(queue)s")} END)
        IS NOT NULL AS notified"""  # noqa: E501
    if counted_here:
        return f"""
WITH ins AS (
    {insert}
    RETURNING msg_id, queue_id, vt
), counted AS (
    {counted("SELECT queue_id, 'sent', 1, clock_timestamp() FROM ins")}
)
SELECT msg_id, queue_id,
    {wake}
FROM ins
"""
    return f"""
{insert}
RETURNING msg_id, queue_id,
    {wake},
    CASE WHEN msg_id >= {TRANSIENT_FIRST_ID} THEN set_config('synchronous_commit', 'off', true)
    END AS relaxed_commit
"""


# -- send_one -- The usual send (SEND_PLAIN's) into a queue without max_length, as a single
# INSERT that answers only when it sent: one row, its msg_id and queue_id; none when the
# queue is missing, bounded (max_length) or the body too large, and the manager then runs
# SEND_PLAIN, which checks for room and says why it could not send. Its RETURNING does what
# SEND_PLAIN's outer query does: notify when %(notify)s and the message is visible already
# (a queue's delivery_delay postpones it), and relax the commit of a non-durable queue's
# message, whose id is from the transient space. Without SEND_PLAIN's CTEs and its room
# check (a sub-plan over every partition, set up on each call even when max_length is
# NULL), PostgreSQL spends clearly less on it.
SEND_ONE = _send_one(False)

# -- send_one_counted -- SEND_ONE inside the caller's transaction: its 'sent' counter row is
# written in the statement, to commit or roll back with the caller's rows, and its commit is
# never relaxed. No row back runs SEND_PLAIN_COUNTED, as SEND_PLAIN follows SEND_ONE.
SEND_ONE_COUNTED = _send_one(True)

# -- wake -- Notify the listeners of several queues at once: the trailing wake-up of sends
# that left theirs out (pgq_django.store.wakeups), on a connection of its own, after they committed.
WAKE = f"SELECT count({notify_queue('q')}) AS woken FROM unnest(%(queues)s::text[]) AS q"

# The candidate rows of a read: visible, unexpired, best first. Two shapes: a FIFO queue also
# requires each row to be the head of its message group. Each statement's ``q`` CTE only
# matches a queue of its own shape, so a wrong guess finds no queue instead of delivering out
# of order (see MessageManager._leasing, which picks the shape and corrects a wrong guess).
# The group check slows every read, even on a queue where it never applies: two shapes.
# ``{filters}`` stays a placeholder: the header/attribute/label filters of a read.
_CANDIDATES = """
    SELECT {columns} FROM pgq_message m
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

# The filters a read may put in its candidates' ``{filters}``: headers and attributes by
# jsonb containment, the label by equality, each value a parameter of its own.
READ_FILTERS = {
    "headers": "AND m.headers @> %(f_headers)s::jsonb",
    "attributes": "AND m.attributes @> %(f_attributes)s::jsonb",
    "label": "AND m.label = %(f_label)s",
}


def _shapes(template: str) -> dict[bool, str]:
    """The template for plain (False) and FIFO (True) queues."""
    return {
        fifo: template.format(
            fifo="fifo" if fifo else "NOT fifo",
            candidates=_CANDIDATES.format(
                columns="m.msg_id", group_head=_GROUP_HEAD if fifo else ""
            ),
        )
        for fifo in (False, True)
    }


# A FIFO read leases each group's head (h: the candidates above, locked) and, behind it, the
# run of the group's next messages that are visible, unexpired and match the filters (f),
# stopping at the first that is not: a message still delayed or one a filter leaves out
# holds the rest of its group back. Only the head is locked: no other read leases a message
# that is not its group's head, so the messages behind a locked head are this read's.
# Heads are taken in delivery order, each with its followers, up to the read's budget.
_BUDGET = """(SELECT least(%(qty)s::int, greatest(1, %(max_bytes)s::bigint / q.max_message_size))
           FROM q)"""
_FIFO_TAKEN = f"""h AS ({{heads}}
), n AS (
    SELECT h.msg_id AS head_id, h.priority AS head_priority, next.msg_id, next.blocks,
           next.expired
    FROM h CROSS JOIN LATERAL (
        SELECT m.msg_id,
               m.vt > clock_timestamp() OR NOT (TRUE {{{{filters}}}}) AS blocks,
               m.expires_at IS NOT NULL AND m.expires_at <= clock_timestamp() AS expired
        FROM pgq_message m
        WHERE m.queue_id = (SELECT id FROM q) AND m.group_id = h.group_id
          AND m.msg_id > h.msg_id
        ORDER BY m.msg_id
        LIMIT {_BUDGET} - 1
    ) next
), f AS (
    SELECT n.head_id, n.head_priority, n.msg_id FROM n
    WHERE NOT n.blocks AND NOT n.expired AND NOT EXISTS (
        SELECT 1 FROM n b WHERE b.head_id = n.head_id AND b.msg_id < n.msg_id AND b.blocks)
), c AS (
    SELECT msg_id FROM (
        SELECT h.msg_id, h.priority AS head_priority, h.msg_id AS head_id FROM h
        UNION ALL
        SELECT f.msg_id, f.head_priority, f.head_id FROM f
    ) taken
    ORDER BY head_priority, head_id, msg_id
    LIMIT {_BUDGET}
)"""

# -- read -- Lease up to qty visible messages: vt = now + vt, read_ct + 1. Fewer when the
# queue's largest possible bodies would pass the byte budget (max_bytes / max_message_size).
# One text per queue shape (False: plain, True: FIFO), each with a {filters} placeholder.
# A FIFO read leases group heads and the visible messages right behind them in their group
# (as SQS's ReceiveMessage returns several messages of one group), so one read may take a
# run of a group in order; the group stays blocked while any of them is leased.
# Only a queue without limits: a limited one is leased by queues.READ_LIMITED.
READ = _shapes(f"""
WITH q AS (
    SELECT id, visibility_timeout, max_message_size FROM pgq_queue
    WHERE name = %(queue)s AND NOT paused AND {{fifo}} AND {UNLIMITED_QUEUE}
), c AS ({{candidates}})
UPDATE pgq_message m
SET vt = clock_timestamp() + make_interval(secs => coalesce(%(vt)s, q.visibility_timeout)),
    read_ct = m.read_ct + 1
FROM c, q
WHERE m.msg_id = c.msg_id
RETURNING {M_COLS}
""")
READ[True] = READ[True].replace(
    f"c AS ({_CANDIDATES.format(columns='m.msg_id', group_head=_GROUP_HEAD)})",
    _FIFO_TAKEN.format(
        heads=_CANDIDATES.format(columns="m.msg_id, m.group_id, m.priority", group_head=_GROUP_HEAD)
    ),
)

# -- pop -- Take up to qty visible messages out of the queue at once (archive if asked to).
# One text per queue shape, like read.
POP = _shapes(f"""
WITH q AS (
    SELECT id, archive_on_ack, max_message_size FROM pgq_queue
    WHERE name = %(queue)s AND NOT paused AND {{fifo}}
), c AS ({{candidates}}), d AS (
    DELETE FROM pgq_message m USING c WHERE m.msg_id = c.msg_id RETURNING {M_COLS}
), a AS (
    {archive_rows("d", "'acked'")} WHERE (SELECT archive_on_ack FROM q)
), counted AS (
    {count_rows("'acked'", "d")}
)
SELECT {COLS} FROM d
""")

# -- read_by_id -- One message by id, without leasing it (message columns NULL: not there).
READ_BY_ID = f"""
WITH q AS (SELECT id FROM pgq_queue WHERE name = %(queue)s)
SELECT q.id AS found_queue_id, {M_COLS} FROM q
LEFT JOIN pgq_message m ON m.queue_id = q.id AND m.msg_id = %(msg_id)s
"""

# Which rows a delete or archive acts on: the listed ids, each fenced by its read_ct when the
# caller gave a receipt (a NULL in cts means "any delivery"). ``= ANY`` plans as one scan of
# the primary key; the receipts are checked against two hashed sub-plans built once per
# statement (an id with its read_ct, an id without), where looking each row's receipt up
# with array_position cost a comparison per listed id per row (quadratic in the batch), and
# joining ``unnest(ids, cts)`` a partition probe per id.
#
# The ids reach the partition key through a sub-select, ``(SELECT %(ids)b)``, here and in
# every statement below that picks messages by id. A bare parameter lets PostgreSQL prune
# partitions while planning, which makes each call's own ("custom") plan look cheaper than
# the one plan it could keep once the table has a few ranges (the premade ones count), so it
# plans the statement again on every call. Through the sub-select both plans cover every
# range and the kept plan wins after the first few calls. For one id, the ranges without it
# are still skipped as the plan runs; an array of ids prunes nothing, so each live range's
# primary key is probed (docs/design.md, "Plans kept across calls").
_RECEIPTS = "unnest(%(ids)b::bigint[], %(cts)b::int[]) AS r(id, ct)"
_FENCED_IDS = f"""
    m.msg_id = ANY((SELECT %(ids)b::bigint[])::bigint[])
    AND ((m.msg_id, m.read_ct) IN (SELECT r.id, r.ct FROM {_RECEIPTS} WHERE r.ct IS NOT NULL)
         OR m.msg_id IN (SELECT r.id FROM {_RECEIPTS} WHERE r.ct IS NULL))
    AND m.queue_id = (SELECT id FROM q)
"""
# What a delete or archive answers: the queue it found and the ids it acted on.
_ACTED_ON = """
SELECT (SELECT id FROM q) AS found_queue_id, ARRAY(SELECT msg_id FROM d ORDER BY msg_id) AS msg_ids
"""


# One message, as most acks are: the same fence with scalar parameters, so neither the
# client nor the server builds arrays and hashed sub-plans for a single id.
# The receipt fence of one message alone (ACK_ONE joins its queue instead of the q CTE).
_RECEIPT_OF_ONE = """m.msg_id = (SELECT %(msg_id)s::bigint)
    AND (%(ct)s::int IS NULL OR m.read_ct = %(ct)s::int)"""
_FENCED_ID = f"""
    {_RECEIPT_OF_ONE}
    AND m.queue_id = (SELECT id FROM q)
"""


def _delete(archives: bool, counted_here: bool, fence: str = _FENCED_IDS) -> str:
    """DELETE's text for one queue shape, with or without its 'acked' counter row."""
    kind = "archive_on_ack" if archives else "NOT archive_on_ack"
    returning = M_COLS if archives else "m.msg_id"
    archive = (
        f""", a AS (
    {archive_rows("d", "'acked'", result="%(result)s::jsonb")}
)"""
        if archives
        else ""
    )
    count = (
        f""", counted AS (
    {count_rows("'acked'", "d")}
)"""
        if counted_here
        else ""
    )
    return f"""
WITH q AS (SELECT id FROM pgq_queue WHERE name = %(queue)s AND {kind}),
d AS (
    DELETE FROM pgq_message m WHERE {fence}
    RETURNING {returning}
){archive}{count}{_ACTED_ON}"""


# -- delete -- Acknowledge messages: remove them (or archive them as acked with archive_on_ack).
# The receipt fence sits in the DELETE itself, which locks and re-checks each row. Two shapes,
# like the reads: a queue that archives on ack needs whole rows back for the archive; one that
# does not (the common case) returns only ids. Each shape's ``q`` matches only its own kind.
DELETE = {archives: _delete(archives, True) for archives in (False, True)}

# -- delete_uncounted -- DELETE without the counter row, for an ack that commits on its own
# (autocommit): pgq_django.store.tallies adds it to the process's sums once it has committed.
DELETE_UNCOUNTED = {archives: _delete(archives, False) for archives in (False, True)}

# -- delete_one -- DELETE of one message (%(msg_id)s, fenced by %(ct)s unless it is NULL),
# the usual ack; same shapes and answer as DELETE.
DELETE_ONE = {archives: _delete(archives, True, _FENCED_ID) for archives in (False, True)}

# -- delete_one_uncounted -- DELETE_ONE without the counter row, as DELETE_UNCOUNTED.
DELETE_ONE_UNCOUNTED = {
    archives: _delete(archives, False, _FENCED_ID) for archives in (False, True)
}

# -- ack_one -- The usual ack (DELETE_ONE_UNCOUNTED's, for a queue that does not archive on
# ack) as a single DELETE that answers only when it deleted: one row, the msg_id and the
# queue_id; none when the queue is missing or archives on ack, or the message is gone or
# leased again (the receipt fence), and the manager then runs DELETE_ONE_UNCOUNTED, which
# says which. Without the CTEs and sub-queries PostgreSQL spends less on it.
ACK_ONE = f"""
DELETE FROM pgq_message m USING pgq_queue q
WHERE q.name = %(queue)s AND NOT q.archive_on_ack AND m.queue_id = q.id
    AND {_RECEIPT_OF_ONE}
RETURNING m.msg_id, q.id AS queue_id
"""

# -- archive -- Move messages to the archive with an outcome (PGMQ archive).
ARCHIVE = f"""
WITH q AS (SELECT id FROM pgq_queue WHERE name = %(queue)s),
d AS (
    DELETE FROM pgq_message m WHERE {_FENCED_IDS}
    RETURNING {M_COLS}
), a AS (
    {archive_rows("d", "%(outcome)s", result="%(result)s::jsonb", error="%(error)s")}
), counted AS (
    {count_rows("%(outcome)s", "d")}
){_ACTED_ON}"""

# -- set_vt -- Move one message's visibility to now + vt (extend or end a lease).
SET_VT = f"""
WITH q AS (SELECT id FROM pgq_queue WHERE name = %(queue)s),
u AS (
    UPDATE pgq_message m SET vt = clock_timestamp() + make_interval(secs => %(vt)s)
    WHERE m.queue_id = (SELECT id FROM q) AND m.msg_id = (SELECT %(msg_id)s::bigint)
      AND (%(ct)s::int IS NULL OR m.read_ct = %(ct)s::int)
    RETURNING {M_COLS}
)
SELECT (SELECT id FROM q) AS found_queue_id, u.* FROM (SELECT 1) AS one LEFT JOIN u ON true
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

# The dead-letter move of a nack (``q`` the queue it failed on), and its counters: 'dead' on
# that queue, 'dead_arrived' on the dead-letter queue when the message moved there.
_NACK_DEAD_LETTER = dead_letter_set(
    dlq_id="dlq.id", origin_id="q.id", origin_name="q.name", retention="dlq.retention"
)
_NACK_COUNTED = counted(
    count_one("'dead'", "EXISTS (SELECT 1 FROM moved) OR EXISTS (SELECT 1 FROM gone)"),
    count_one("'dead_arrived'", "EXISTS (SELECT 1 FROM moved)", queue="dlq"),
)

# -- nack -- A failed delivery: retry after a delay, or dead-letter once retries are spent.
# A dead message moves to the dead-letter queue (same msg_id, read_ct reset, history in
# headers["pgq_dead_letter"], the origin server-side in dead_letter_origin_id for redrive) or,
# with none configured, to the archive as 'dead'. Answers the outcome: retry,
# dead_lettered, dead, or NULL (no such message, or a stale receipt).
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
    WHERE m.queue_id = q.id AND m.msg_id = (SELECT %(msg_id)s::bigint)
      AND (%(ct)s::int IS NULL OR m.read_ct = %(ct)s::int)
    FOR UPDATE OF m
), retried AS (
    UPDATE pgq_message m SET vt = clock_timestamp() + make_interval(secs => {_RETRY_DELAY})
    FROM t, q WHERE m.msg_id = t.msg_id AND NOT t.spent
    RETURNING m.msg_id
), moved AS (
    UPDATE pgq_message m
    SET {_NACK_DEAD_LETTER}
    FROM t, q, dlq WHERE m.msg_id = t.msg_id AND t.spent
    RETURNING m.msg_id, dlq.name AS dlq_name
), gone AS (
    DELETE FROM pgq_message m USING t
    WHERE m.msg_id = t.msg_id AND t.spent AND NOT EXISTS (SELECT 1 FROM dlq)
    RETURNING {M_COLS}
), archived AS (
    {archive_rows("gone", "'dead'", error="%(error)s")}
), counted AS (
    {_NACK_COUNTED}
)
SELECT (SELECT id FROM q) AS found_queue_id,
       CASE WHEN EXISTS (SELECT 1 FROM retried) THEN 'retry'
            WHEN EXISTS (SELECT 1 FROM moved) THEN 'dead_lettered'
            WHEN EXISTS (SELECT 1 FROM gone) THEN 'dead' END AS outcome,
       (SELECT count({notify_queue("dlq_name")}) FROM moved) AS notified
"""

# -- purge -- Delete every message of a queue, leased or not; answers how many.
PURGE = f"""
WITH q AS (SELECT id FROM pgq_queue WHERE name = %(queue)s),
d AS (DELETE FROM pgq_message m WHERE m.queue_id = (SELECT id FROM q) RETURNING 1),
counted AS (
    {count_rows("'purged'", "d")}
)
SELECT (SELECT id FROM q) AS found_queue_id, (SELECT count(*) FROM d) AS purged
"""

# -- lease_selected -- Lease the rows an ORM queryset selected (any lookups, FOR UPDATE SKIP
# LOCKED) like read does: vt = now + vt, read_ct + 1. ``{candidates}`` is the compiled
# queryset, so the text varies with it and is never prepared.
LEASE_SELECTED = f"""
WITH c AS ({{candidates}})
UPDATE pgq_message m
SET vt = clock_timestamp() + make_interval(secs => %s), read_ct = m.read_ct + 1
FROM c
WHERE m.msg_id = c.msg_id
RETURNING {M_COLS}
"""
