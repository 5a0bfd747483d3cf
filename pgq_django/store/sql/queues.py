"""Queue-level statements: a queue's state by name, the lock on the dead-letter graph, and
the lease of a queue with a rate or concurrency limit.

Run by :class:`pgq_django.store.managers.MessageManager` (the state, to explain why a message
statement found no queue; the limited lease) and
:class:`pgq_django.store.managers.QueueManager` (the lock).
"""

from __future__ import annotations

from . import messages
from .fragments import COLS, UNLIMITED_QUEUE

# The bounds of a queue's rate_limit (messages per second): at least one message every
# 1,000 seconds (about 17 minutes), at most far above what one queue delivers, low enough
# that the token bucket's size (rate_limit / 4) stays a small number. The API refuses a
# setting outside them; the limited lease reads a stored value outside them (set with raw
# SQL or by an older release: a subnormal number would underflow the bucket's arithmetic
# and fail every read) as the nearest bound, so a setting never turns a read into an error.
MIN_RATE = 0.001
MAX_RATE = 1_000_000.0


def _rate(column: str) -> str:
    """A stored rate_limit, NULL (no limit) or within the bounds."""
    return (
        f"CASE WHEN {column} IS NOT NULL "
        f"THEN least(greatest({column}, {MIN_RATE}), {MAX_RATE:.1f}) END"
    )


# -- queue_state -- Why a statement found nothing: the queue's existence, pause, size limit,
# shape (FIFO or not, archives on ack or not) and length limit.
QUEUE_STATE = (
    "SELECT id, paused, max_message_size, fifo, archive_on_ack, max_length, "
    f"NOT ({UNLIMITED_QUEUE}) AS limited "
    "FROM pgq_queue WHERE name = %s"
)

# -- lock_limit -- Take the limit row of a rate- or concurrency-limited queue until the
# transaction ends, so that its leases take turns; READ_LIMITED follows in the same
# transaction. No row back: the queue has no limit row yet (ADD_LIMIT makes it), or no
# such queue. With %(relax)s (a transaction of the lease's own, never the caller's) the
# commit does not wait for the WAL flush, so the row's lock is not held through it: a crash
# that loses the lease loses nothing else (the message is delivered again, as after any
# expired lease) and the bucket's bookkeeping.
LOCK_LIMIT = """
SELECT l.queue_id,
       CASE WHEN %(relax)s THEN set_config('synchronous_commit', 'off', true) END
           AS relaxed_commit
FROM pgq_queue_limit l
WHERE l.queue_id = (SELECT id FROM pgq_queue WHERE name = %(queue)s)
FOR UPDATE OF l
"""

# -- add_limit -- The limit row of a limited queue, made before its first limited lease: a
# full token bucket, and as held the leases the queue has now (taken before the limit was
# set), found by one pass over the queue's messages.
ADD_LIMIT = f"""
INSERT INTO pgq_queue_limit (queue_id, tokens, refreshed_at, held_ids, held_cts)
SELECT q.id, greatest(1, coalesce({_rate("q.rate_limit")}, 0) / 4), clock_timestamp(),
       coalesce(array_agg(m.msg_id ORDER BY m.msg_id) FILTER (WHERE m.msg_id IS NOT NULL),
                '{{}}'),
       coalesce(array_agg(m.read_ct ORDER BY m.msg_id) FILTER (WHERE m.msg_id IS NOT NULL),
                '{{}}')
FROM pgq_queue q
LEFT JOIN pgq_message m
       ON m.queue_id = q.id AND m.read_ct > 0 AND m.vt > clock_timestamp()
WHERE q.name = %(queue)s AND NOT ({UNLIMITED_QUEUE})
GROUP BY q.id
ON CONFLICT (queue_id) DO NOTHING
"""

# -- reset_limit -- Forget a queue's limit row when its limits change: the next limited read
# makes it again (ADD_LIMIT), with a full bucket at the new rate and the leases the queue
# holds then, taken with or without limits since.
RESET_LIMIT = "DELETE FROM pgq_queue_limit WHERE queue_id = %(queue_id)s"

# The token bucket of a rate-limited queue ``lq`` whose limit row is ``l``: its tokens now,
# refilled at rate_limit per second since refreshed_at, never above the bucket's size,
# rate_limit / 4 tokens (at least one). A small bucket keeps the rate near the
# limit over any stretch of time and still covers the moment between a worker finding it
# empty and its next try.
_TOKENS_NOW = """least(greatest(1, lq.rate_limit / 4),
              l.tokens + lq.rate_limit * extract(epoch FROM clock_timestamp() - l.refreshed_at))"""


def _limited(read: str) -> str:
    """READ_LIMITED's text for one READ text: that lease, for a limited queue, of at most
    the budget's messages, between the budget and the bookkeeping."""
    if read.count(UNLIMITED_QUEUE) != 1 or "%(qty)s::int" not in read:
        raise AssertionError("READ must find its queue with UNLIMITED_QUEUE and take %(qty)s")
    # The queue READ finds is a limited one with room in its budget (without room it finds
    # none, so nothing is leased or locked), and the budget is the quantity it leases.
    lease = read.replace(
        UNLIMITED_QUEUE, f"NOT ({UNLIMITED_QUEUE}) AND (SELECT n FROM budget) > 0"
    ).replace("%(qty)s::int", "(SELECT n FROM budget)")
    return f"""
WITH lq AS (
    SELECT id, {_rate("rate_limit")} AS rate_limit, concurrency_limit
    FROM pgq_queue
    WHERE name = %(queue)s AND NOT ({UNLIMITED_QUEUE})
), l AS (
    SELECT l.* FROM pgq_queue_limit l WHERE l.queue_id = (SELECT id FROM lq)
), held AS (
    SELECT h.id, h.ct FROM lq, l, unnest(l.held_ids, l.held_cts) AS h(id, ct)
    WHERE lq.concurrency_limit IS NOT NULL AND EXISTS (
        SELECT 1 FROM pgq_message m
        WHERE m.msg_id = h.id AND m.read_ct = h.ct AND m.vt > clock_timestamp())
), budget AS (
    SELECT greatest(0, least(
               %(qty)s::int,
               CASE WHEN lq.rate_limit IS NULL THEN %(qty)s::int
                    ELSE floor({_TOKENS_NOW})::int END,
               CASE WHEN lq.concurrency_limit IS NULL THEN %(qty)s::int
                    ELSE lq.concurrency_limit - (SELECT count(*) FROM held)::int END)) AS n,
           CASE WHEN lq.rate_limit IS NULL THEN 0 ELSE {_TOKENS_NOW} END AS tokens,
           clock_timestamp() AS at
    FROM lq, l
), leased AS ({lease}), spent AS (
    UPDATE pgq_queue_limit l
    SET tokens = b.tokens - (SELECT count(*) FROM leased),
        refreshed_at = b.at,
        held_ids = ARRAY(SELECT id FROM held ORDER BY id)
                   || ARRAY(SELECT msg_id FROM leased ORDER BY msg_id),
        held_cts = ARRAY(SELECT ct FROM held ORDER BY id)
                   || ARRAY(SELECT read_ct FROM leased ORDER BY msg_id)
    FROM lq, budget b
    WHERE l.queue_id = lq.id
)
SELECT {COLS} FROM leased
"""


# -- read_limited -- READ for a queue with a rate_limit (messages per second) or a
# concurrency_limit (messages leased at once), run right after LOCK_LIMIT in the same
# transaction: the lock makes the queue's leases take turns, and this statement's snapshot,
# taken after it, sees every lease committed before. It leases at most the whole tokens in
# the bucket and the concurrency limit less the leases still held (a lease it recorded whose
# message still has that read_ct and is still invisible: acks, releases and expired leases
# drop out), then spends a token per message leased and records the leases. Over a limit
# the answer is fewer messages or none, never an error. One text per queue shape, like
# READ, whose lease it runs.
READ_LIMITED = {fifo: _limited(text) for fifo, text in messages.READ.items()}

# -- lock_dead_letter_graph -- Take turns changing queues' dead-letter queues (until commit),
# so two concurrent changes cannot each pass the cycle check and together close a cycle.
LOCK_DEAD_LETTER_GRAPH = "SELECT pg_advisory_xact_lock(hashtext('pgq_django.dead_letter_graph'))"
