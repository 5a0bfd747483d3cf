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

# -- send -- Insert messages into a queue, in input order, and wake listeners.
SEND = """
WITH q AS (
    SELECT id, name, delivery_delay, retention FROM pgq_queue
    WHERE name = %(queue)s AND max_message_size >= %(size)s
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
    FROM q, unnest(%(bodies)s::jsonb[]) WITH ORDINALITY AS b(body, ord)
    ORDER BY b.ord
    RETURNING msg_id
), counted AS (
    INSERT INTO pgq_queue_counter (queue_id, kind, n, at)
    SELECT q.id, 'sent', (SELECT count(*) FROM ins), clock_timestamp() FROM q
)
SELECT (SELECT id FROM q),
       ARRAY(SELECT msg_id FROM ins ORDER BY msg_id),
       (SELECT pg_notify(%(channel)s, q.name) FROM q
        WHERE coalesce(%(delay)s, q.delivery_delay) <= 0)
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
    LIMIT %(qty)s
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


# -- read -- Lease up to qty visible messages: vt = now + vt, read_ct + 1.
READ = _shapes(f"""
WITH q AS (
    SELECT id, visibility_timeout FROM pgq_queue
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
    SELECT id, archive_on_ack FROM pgq_queue
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

# -- queue_state -- Why a statement found nothing: the queue's existence, pause, size limit
# and shape (FIFO or not, archives on ack or not).
QUEUE_STATE = (
    "SELECT id, paused, max_message_size, fifo, archive_on_ack FROM pgq_queue WHERE name = %s"
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
# headers["pgq_dead_letter"]) or, with none configured, to the archive as 'dead'.
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
    SET queue_id = dlq.id, vt = clock_timestamp(), read_ct = 0,
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
d AS (DELETE FROM pgq_message m WHERE m.queue_id = (SELECT id FROM q) RETURNING 1)
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

# -- metrics -- PGMQ's queue metrics plus in-flight, dead-letter and delayed counts, per queue.
METRICS = """
SELECT q.name,
       coalesce(s.queue_length, 0), s.newest, s.oldest,
       coalesce((SELECT sum(n) FROM pgq_queue_counter c
                 WHERE c.queue_id = q.id AND c.kind = 'sent'), 0),
       coalesce(s.in_flight, 0),
       coalesce((SELECT sum(n) FROM pgq_queue_counter c
                 WHERE c.queue_id = q.id AND c.kind = 'dead'), 0),
       clock_timestamp(),
       coalesce(s.delayed, 0)
FROM pgq_queue q
LEFT JOIN LATERAL (
    SELECT count(*) AS queue_length,
           extract(epoch FROM clock_timestamp() - max(m.enqueued_at))::float8 AS newest,
           extract(epoch FROM clock_timestamp() - min(m.enqueued_at))::float8 AS oldest,
           count(*) FILTER (WHERE m.read_ct > 0 AND m.vt > clock_timestamp()) AS in_flight,
           count(*) FILTER (WHERE m.read_ct = 0 AND m.vt > clock_timestamp()) AS delayed
    FROM pgq_message m WHERE m.queue_id = q.id
) s ON true
WHERE (%(queue)s::text IS NULL OR q.name = %(queue)s::text)
ORDER BY q.name
"""


def _refs_params(refs: Sequence[MessageRef]) -> dict[str, list[Any]]:
    return {"ids": [r[0] for r in refs], "cts": [r[1] for r in refs]}


class MessageQuerySet(models.QuerySet):
    """ORM-side filters for browsing messages (admin, REST lists); leasing is on the manager."""

    def for_queue(self, name: str) -> MessageQuerySet:
        return self.filter(queue__name=name)

    def visible(self) -> MessageQuerySet:
        return self.filter(vt__lte=Now())

    def in_flight(self) -> MessageQuerySet:
        return self.filter(vt__gt=Now(), read_ct__gt=0)


# A prepare threshold no statement reaches by repetition: only explicit prepares happen.
_PREPARE_ONLY_WHEN_ASKED = 2**31 - 1
# Raw connections already set up for our statements (see _SqlManager._execute).
_CONFIGURED: weakref.WeakSet[Any] = weakref.WeakSet()


class _PreparingCursor(psycopg.Cursor):  # type: ignore[type-arg]
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


def execute_statement(sql: str, params: Any, alias: str | None = None) -> Any:
    """Run a named statement through :class:`_PreparingCursor` on Django's connection.

    Every named statement of the package (here, in :mod:`pgq_django.delivery` and in
    :mod:`pgq_django.routing`) runs through this one path. The cursor is still Django's
    wrapper, so query logging, ``execute_wrapper`` hooks, error translation and the
    connection's transaction state all apply as usual. With
    ``PGQ["PREPARED_STATEMENTS"] = False`` (for poolers that cannot keep prepared
    statements) the statements are bound on the server but never prepared.
    """
    from .conf import settings

    db = connections[alias or settings.DATABASE]
    db.close_if_health_check_failed()
    db.ensure_connection()
    db.validate_thread_sharing()
    raw = db.connection
    if raw not in _CONFIGURED:
        if raw.prepare_threshold is None:
            # Django turns preparing off per connection; allow it for the statements
            # that ask (ours) without making Django's own queries start preparing.
            raw.prepare_threshold = _PREPARE_ONLY_WHEN_ASKED
        # Django maps jsonb to a text loader; our binary results need psycopg's binary
        # jsonb loader. Django's own queries use the text format and are unaffected.
        raw.adapters.register_loader("jsonb", JsonbBinaryLoader)
        _CONFIGURED.add(raw)
    with db.wrap_database_errors:
        inner: Any = _PreparingCursor(raw, prepare=bool(settings.PREPARED_STATEMENTS))
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
        rows always carry every concrete column, so nothing is deferred; the one difference
        is that no pre_init/post_init signal is sent. A model whose fields differ from
        MESSAGE_COLUMNS goes through ``from_db`` as usual.
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
    """Whether the model's concrete fields are exactly MESSAGE_COLUMNS, in order."""
    if model not in _PLAIN:
        attnames = tuple(f.attname for f in model._meta.concrete_fields)
        _PLAIN[model] = attnames == MESSAGE_COLUMNS
    return _PLAIN[model]


# Queue name -> its shape as last seen by this process: FIFO (see _leasing), archives on
# ack (see ack). A stale entry costs one extra query, never a wrong result.
_FIFO_QUEUES: dict[str, bool] = {}
_ARCHIVES_ON_ACK: dict[str, bool] = {}

_MessageManagerBase = _SqlManager.from_queryset(MessageQuerySet)


class MessageManager(_MessageManagerBase):
    """``Message.objects``: the lease/ack operations as single statements."""

    def send_bodies(self, queue: str, bodies: Sequence[str], *, size: int, **options: Any) -> Any:
        """Insert JSON-encoded bodies; returns (queue_id or None, [msg_id, …])."""
        from .conf import settings

        params = {
            "queue": queue,
            "bodies": list(bodies),
            "size": size,
            "channel": settings.NOTIFY_CHANNEL,
            **options,
        }
        return self._execute(SEND, params).fetchone()[:2]

    def lease(
        self, queue: str, *, qty: int, vt: float | None, filters: dict[str, Any] | None = None
    ) -> tuple[list[Any], Any]:
        """Lease up to ``qty`` messages (``SELECT … FOR UPDATE SKIP LOCKED`` + UPDATE).

        Returns (messages, queue state): the state (see :meth:`queue_state`) is looked up
        only when nothing was leased, so the caller can tell an empty queue from a missing
        or paused one without a query of its own.
        """
        clause, params = _filter_clause(filters or {})
        params.update(queue=queue, qty=qty, vt=vt)
        return self._leasing(READ, queue, clause, params)

    def pop(self, queue: str, *, qty: int) -> tuple[list[Any], Any]:
        """Like :meth:`lease`, but the messages leave the queue (archived with archive_on_ack)."""
        return self._leasing(POP, queue, "", {"queue": queue, "qty": qty})

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

    def queue_state(self, queue: str) -> tuple[int, bool, int, bool, bool] | None:
        return self._execute(QUEUE_STATE, [queue]).fetchone()

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
        return self._execute(PURGE, {"queue": queue}).fetchone()

    def expire(self, queue_id: int | None = None) -> int:
        return self._execute(EXPIRE, {"queue_id": queue_id}).fetchone()[0]

    def compact_counters(self) -> tuple[int, int]:
        """Returns (rows removed, rows written); run by worker maintenance."""
        return self._execute(COMPACT_COUNTERS, {}).fetchone()

    def metrics_rows(self, queue: str | None) -> list[tuple[Any, ...]]:
        return self._execute(METRICS, {"queue": queue}).fetchall()


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
