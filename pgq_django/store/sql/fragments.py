"""The pieces several statements share, composed into them rather than copied.

A fragment is a piece of SQL text, or a small function that returns one for the names a
statement gives its CTEs. Nothing here runs on its own; the named statements in the sibling
modules are built from these at import time, so the text PostgreSQL prepares is fixed.
"""

from __future__ import annotations

from ...validation import MAX_SECONDS

# The two msg_id spaces. Durable queues draw ids from the first sequence, which stops below
# TRANSIENT_FIRST_ID; non-durable queues (``durable=False``) draw them from the second, whose
# ranges are UNLOGGED partitions of the same table (see pgq_django.partitions). Both stay
# below 2**53, so every id is exact in JSON for REST clients.
MSG_ID_SEQUENCE = "pgq_message_msg_id_seq"
TRANSIENT_MSG_ID_SEQUENCE = "pgq_message_transient_id_seq"
TRANSIENT_FIRST_ID = 4 * 10**15
LAST_MSG_ID = 2**53 - 1


def _per_id_space(queue: str, sequence: str) -> str:
    """``sequence`` (a template of ``{}``, the sequence's name) for the id space of
    ``queue``'s messages (a row source with the queue's ``durable``): the one rule of which
    sequence a queue's ids come from."""
    durable, transient = (
        sequence.format(MSG_ID_SEQUENCE),
        sequence.format(TRANSIENT_MSG_ID_SEQUENCE),
    )
    return f"CASE WHEN {queue}.durable THEN {durable} ELSE {transient} END"


def next_msg_id(queue: str) -> str:
    """The expression that draws a new msg_id for a message of ``queue`` (a row source with
    the queue's ``durable``): from the sequence of the queue's id space. CASE evaluates
    only the branch it takes, so a send advances one sequence."""
    return _per_id_space(queue, "nextval('{}')")


def id_sequence(queue: str) -> str:
    """The sequence (a ``regclass``) :func:`next_msg_id` draws from for ``queue``: for a
    statement that draws many ids of one queue, choosing the sequence once."""
    return _per_id_space(queue, "'{}'::regclass")


def expiry(seconds: str, *, start: str = "clock_timestamp()") -> str:
    """The ``expires_at`` of a message sent at ``start`` that may wait ``seconds`` (SQL
    expressions).

    The longest retention the API accepts means "keep until taken": such a message gets no
    expiry at all rather than one a century away, so it costs no entry in the expiry index
    and the expire duty never looks at it (PGMQ's queues, made with that retention, have no
    expiry either)."""
    return f"{start} + make_interval(secs => nullif({seconds}, {MAX_SECONDS}))"


def notify_queue(name: str, *, channel: str = "%(channel)s") -> str:
    """The wake-up of the listeners of queue ``name`` (a SQL expression): a notification on
    ``channel`` (``PGQ["NOTIFY_CHANNEL"]``) whose payload is the queue's name, sent when a
    commit makes messages of it visible."""
    return f"pg_notify({channel}, {name})"


# A queue without a rate or concurrency limit: what READ's ``q`` requires, so that a read of
# a limited queue finds no queue and the manager runs the limited lease instead (as after a
# wrong FIFO guess). Two NULL checks on the queue's row: an unlimited queue pays no more.
UNLIMITED_QUEUE = "rate_limit IS NULL AND concurrency_limit IS NULL"

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
COLS = ", ".join(MESSAGE_COLUMNS)
M_COLS = ", ".join(f"m.{c}" for c in MESSAGE_COLUMNS)

# Whether queue ``q`` has room for {n} more messages under its max_length (NULL: unbounded).
# The count stops at max_length rows of the ready index, so it costs nothing for unbounded
# queues (OR evaluates left to right and stops) and at most max_length entries otherwise.
# It sees committed messages only: concurrent senders can overshoot by their own batches.
HAS_ROOM = """({q}.max_length IS NULL OR {q}.max_length >= {n} + (
    SELECT count(*) FROM (SELECT 1 FROM pgq_message r WHERE r.queue_id = {q}.id
                          LIMIT {q}.max_length) r))"""


# The send options a new message takes (headers, attributes, label, priority, delay,
# expires_in, group, dedup_id, max_retries, retry_delay), each as the value of a send that
# gives none: what pgq_django.validation.send_options() answers without arguments (a
# test keeps the two equal). The manager compares a send's options with these to pick the
# statement that has them as constants (SEND_PLAIN) instead of parameters.
SEND_OPTION_DEFAULTS: dict[str, str | int | None] = {
    "headers": "{}",
    "attributes": "{}",
    "label": None,
    "priority": 0,
    "delay": None,
    "expires_in": None,
    "group": None,
    "dedup_id": None,
    "max_retries": None,
    "retry_delay": None,
}


def _constant(value: str | int | None) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, int):
        return str(value)
    return "'" + value.replace("'", "''") + "'"


# The send options in a statement: the named parameters every send takes, or (a send that
# gives none) their defaults written in as constants, so nothing is bound for them.
OPTION_PARAMETERS = {name: f"%({name})s" for name in SEND_OPTION_DEFAULTS}
OPTION_DEFAULTS = {name: _constant(value) for name, value in SEND_OPTION_DEFAULTS.items()}


def insert_messages(
    queue: str, body: str, *, msg_id: str | None = None, options: dict[str, str] | None = None
) -> str:
    """``INSERT INTO pgq_message … SELECT`` of a new message into each row of ``queue``.

    ``queue`` names a row source with the queue's ``id``, ``durable``, ``delivery_delay``
    and ``retention``; ``body`` is the jsonb body expression; ``options`` spells the send
    options (:data:`OPTION_PARAMETERS`, the default: the named parameters every send takes;
    :data:`OPTION_DEFAULTS`: a send without options). ``msg_id`` is an id drawn beforehand
    (see :func:`next_msg_id`); without it one is drawn here from the queue's id space (never
    the column default, which knows only the durable space). The caller adds the ``FROM``,
    ordering and ``RETURNING``.
    """
    o = OPTION_PARAMETERS if options is None else options
    kept = f"least({queue}.retention, coalesce({o['expires_in']}, {queue}.retention))"
    return f"""INSERT INTO pgq_message ({COLS})
    SELECT {msg_id or next_msg_id(queue)}, {queue}.id, {body}, {o["headers"]}::jsonb, {o["attributes"]}::jsonb, {o["label"]},
           {o["priority"]}, 0, clock_timestamp(),
           clock_timestamp() + make_interval(secs => coalesce({o["delay"]}, {queue}.delivery_delay)),
           {expiry(kept)},
           {o["group"]}, {o["dedup_id"]}, {o["max_retries"]}, {o["retry_delay"]}, false"""  # noqa: E501


def archive_rows(
    rows: str,
    outcome: str,
    *,
    result: str | None = None,
    error: str | None = None,
    kept: tuple[str, ...] = (),
) -> str:
    """``INSERT INTO pgq_archived_message`` of the message rows in CTE ``rows``.

    ``rows`` is what a ``DELETE … RETURNING`` of :data:`M_COLS` produced (the archive move:
    a message leaves the live table and its archived copy appears in one statement).
    ``outcome``, ``result`` and ``error`` are SQL expressions; the archive time is now.
    ``kept``: more columns of both tables that ``rows`` returns and the archive keeps.
    """
    columns = "".join(f", {column}" for column in kept)
    values = columns
    if result is not None:
        columns, values = columns + ", result", values + f", {result}"
    if error is not None:
        columns, values = columns + ", error", values + f", {error}"
    return f"""INSERT INTO pgq_archived_message ({COLS}, archived_at, outcome{columns})
    SELECT {COLS}, clock_timestamp(), {outcome}{values} FROM {rows}"""


# The counters behind metrics and charts: one row per event batch, folded per minute later.
COUNTER_INSERT = "INSERT INTO pgq_queue_counter (queue_id, kind, n, at)"


def counter_total(kind: str, queue_id: str) -> str:
    """How many events of ``kind`` queue ``queue_id`` has counted (SQL expressions): the sum
    of its counter rows, folded or not; 0 before the first."""
    return (
        f"coalesce((SELECT sum(n) FROM pgq_queue_counter c\n"
        f"                 WHERE c.queue_id = {queue_id} AND c.kind = {kind}), 0)"
    )


def counted(*selects: str) -> str:
    """:data:`COUNTER_INSERT` of the counter rows the ``selects`` produce (UNION ALL)."""
    return COUNTER_INSERT + "\n    " + "\n    UNION ALL\n    ".join(selects)


def count_rows(kind: str, rows: str, *, queue: str = "q") -> str:
    """One counter row of ``kind`` for ``queue`` counting the rows of CTE ``rows``, if any."""
    return counted(
        f"""SELECT {queue}.id, {kind}, n.n, clock_timestamp() FROM {queue}, (SELECT count(*) AS n FROM {rows}) n
    WHERE n.n > 0"""  # noqa: E501
    )


def count_per_queue(kind: str, rows: str, *, queue_id: str = "queue_id") -> str:
    """A counter row of ``kind`` per queue among the rows of CTE ``rows`` (a SELECT)."""
    return f"SELECT {queue_id}, {kind}, count(*), clock_timestamp() FROM {rows} GROUP BY {queue_id}"


def count_one(kind: str, when: str, *, queue: str = "q") -> str:
    """A counter row of ``kind`` and n = 1 for ``queue`` when ``when`` holds (a SELECT)."""
    return f"SELECT {queue}.id, {kind}, 1, clock_timestamp() FROM {queue} WHERE {when}"


def dead_letter_set(*, dlq_id: str, origin_id: str, origin_name: str, retention: str) -> str:
    """The SET list of the dead-letter move of message ``m`` (an UPDATE, same msg_id).

    The message changes queue, remembers server-side where it failed (for redrive), starts
    over (visible now, read_ct 0, expiry from the dead-letter queue's retention) and carries
    its history in ``headers["pgq_dead_letter"]``; ``%(error)s`` is the last error.
    """
    return f"""queue_id = {dlq_id}, dead_letter_origin_id = {origin_id}, vt = clock_timestamp(),
        read_ct = 0,
        expires_at = {expiry(retention)},
        headers = m.headers || jsonb_build_object('pgq_dead_letter', jsonb_build_object(
            'attempts', m.read_ct, 'last_error', %(error)s::text,
            'original_queue', {origin_name}, 'dead_lettered_at', clock_timestamp()))"""


def claim_dedup(*, queue_id: str, rows: str, returning: str) -> str:
    """The upsert of a dedup claim on (queue, ``%(dedup_id)s``) for ``new.msg_id``.

    It replaces only an expired claim, so two concurrent sends serialise on the unique key:
    the second waits for the first to commit and then sees its claim. The winner is whoever's
    freshly drawn msg_id is in the returned claim row. The window is ``%(window)s`` seconds.
    """
    return f"""INSERT INTO pgq_dedup (queue_id, dedup_id, msg_id, expires_at)
    SELECT {queue_id}, %(dedup_id)s, new.msg_id,
           clock_timestamp() + make_interval(secs => %(window)s)
    FROM {rows}
    ON CONFLICT (queue_id, dedup_id) DO UPDATE
        SET msg_id = CASE WHEN pgq_dedup.expires_at <= clock_timestamp()
                          THEN EXCLUDED.msg_id ELSE pgq_dedup.msg_id END,
            expires_at = CASE WHEN pgq_dedup.expires_at <= clock_timestamp()
                              THEN EXCLUDED.expires_at ELSE pgq_dedup.expires_at END
    RETURNING {returning}"""
