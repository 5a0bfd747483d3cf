"""Exchange routing: which bound queues receive a published message, decided in SQL.

Rules, by exchange type (every type also honours a binding's ``filters``):

- fanout: every bound queue; routing keys are ignored.
- direct: bindings whose routing key equals the published key (no key means ``""``).
- topic: AMQP patterns over dot-separated words: ``*`` is exactly one word, ``#`` zero or
  more words, anything else must equal the word. ``#`` alone matches every key, the empty
  key included; the empty pattern matches only the empty key.
- headers: every bound queue whose filters match (a binding without filters matches all).

Filters are psqlqueue ``message_filters``: ``{"attr": ["v1", "v2"]}`` matches when, for every
key, the message's headers (or, when the key is not a header, its attributes) hold that key
with one of the listed values, compared as JSON values.

A queue bound several ways that match gets the message once. Topic patterns are compiled to a
PostgreSQL regular expression when the binding is made (:func:`topic_regex`): the key is
matched as ``"." + key`` so that each word carries its leading dot and ``#`` can stand for
zero words without special cases around the separators.
"""

from __future__ import annotations

import math
from typing import Any

from .api.validation import is_utf8
from .exceptions import InvalidArgument
from .managers import HAS_ROOM

MAX_ROUTING_KEY = 255
_FILTER_SCALARS = (str, int, float, bool)


def _literal(word: str) -> str:
    """A word as a regex literal: every character but letters, digits and '_' escaped.

    Backslash before a non-alphanumeric character is a literal in both PostgreSQL's ARE and
    Python's re, while backslash before a letter would start an escape; hence this escaper.
    """
    return "".join(c if c.isalnum() or c == "_" else "\\" + c for c in word)


def topic_regex(pattern: str) -> str:
    """An AMQP topic pattern as an anchored regex over ``"." + routing_key``."""
    parts = []
    for word in pattern.split("."):
        if word == "#":
            parts.append(r"(\.[^.]*)*")
        elif word == "*":
            parts.append(r"\.[^.]*")
        else:
            parts.append(r"\." + _literal(word))
    return "^" + "".join(parts) + "$"


def topic_subject(routing_key: str | None) -> str:
    """The string a topic pattern is matched against (see :func:`topic_regex`)."""
    return "." + (routing_key or "")


def routing_key(value: Any) -> str:
    """A routing key or binding pattern: a string of at most 255 characters, None as ``""``."""
    if value is None:
        return ""
    if (
        not isinstance(value, str)
        or len(value) > MAX_ROUTING_KEY
        or "\x00" in value
        or not is_utf8(value)
    ):
        raise InvalidArgument(
            f"routing_key must be a string of at most {MAX_ROUTING_KEY} characters, without NUL "
            f"or lone surrogates, not {value!r}.",
            field="routing_key",
        )
    return value


def _storable(value: Any) -> bool:
    """Whether a filter key or value survives as jsonb: finite numbers, clean strings."""
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, str):
        return "\x00" not in value and is_utf8(value)
    return isinstance(value, int | bool)


def binding_filters(value: Any) -> dict[str, list[Any]]:
    """``{"attr": ["v1", "v2"]}`` with string keys and non-empty lists of scalar values.

    A single scalar is accepted for a one-value list (``{"attr": "v1"}``).
    """
    if value is None:
        return {}
    problem = "filters must be a dict mapping names to a list of allowed values"
    if not isinstance(value, dict):
        raise InvalidArgument(f"{problem}, not {value!r}.", field="filters")
    out: dict[str, list[Any]] = {}
    for key, allowed in value.items():
        if isinstance(allowed, _FILTER_SCALARS):
            allowed = [allowed]
        if (
            not isinstance(key, str)
            or not key
            or not _storable(key)
            or not isinstance(allowed, list | tuple)
            or not allowed
            or not all(isinstance(a, _FILTER_SCALARS) and _storable(a) for a in allowed)
        ):
            raise InvalidArgument(
                f"{problem} (strings without NUL or lone surrogates, finite numbers or "
                f"booleans); {key!r}: {allowed!r} is not.",
                field="filters",
            )
        out[key] = list(allowed)
    return out


# The queues a published message routes to (``matched``), the first of them too small for
# the body (``too_large``) and the first without room under its max_length (``full``). Either
# of the last two stops the whole publish: every copy is sent, or none. Shared by both shapes
# of publish below.
_ROUTE = """
    x AS (
    SELECT id, type FROM pgq_exchange WHERE name = %(exchange)s
), matched AS (
    SELECT DISTINCT q.id, q.name, q.delivery_delay, q.retention, q.max_message_size,
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
    SELECT name FROM matched m WHERE NOT {has_room} ORDER BY name LIMIT 1
), go AS (
    SELECT m.* FROM matched m
    WHERE NOT EXISTS (SELECT 1 FROM too_large) AND NOT EXISTS (SELECT 1 FROM full_queue)
)"""

# Insert one copy per row of ``target`` (queue columns as in ``matched``), in queue-name
# order; msg_id from the column default, or from target's own msg_id column when drawn early.
_INSERT_COPIES = """
    INSERT INTO pgq_message ({id_col}queue_id, message, headers, attributes, label, priority,
                             read_ct, enqueued_at, vt, expires_at, group_id, dedup_id,
                             max_retries, retry_delay, cancel_requested)
    SELECT {id_val}t.id, %(body)s::jsonb, %(headers)s::jsonb, %(attributes)s::jsonb,
           %(label)s, %(priority)s, 0, clock_timestamp(),
           clock_timestamp() + make_interval(secs => coalesce(%(delay)s, t.delivery_delay)),
           clock_timestamp() + make_interval(secs => least(t.retention,
                                                           coalesce(%(expires_in)s, t.retention))),
           %(group)s, %(dedup_id)s, %(max_retries)s, %(retry_delay)s, false
    FROM {target} t
    ORDER BY t.name
    RETURNING msg_id, queue_id
"""

_PUBLISHED = """
, counted AS (
    INSERT INTO pgq_queue_counter (queue_id, kind, n, at)
    SELECT queue_id, 'sent', count(*), clock_timestamp() FROM ins GROUP BY queue_id
)
SELECT (SELECT id FROM x),
       ARRAY(SELECT msg_id FROM {ids} ORDER BY msg_id),
       (SELECT name FROM too_large),
       (SELECT count(pg_notify(%(channel)s, m.name)) FROM matched m
        WHERE coalesce(%(delay)s, m.delivery_delay) <= 0
          AND m.id IN (SELECT queue_id FROM ins)),
       (SELECT name FROM full_queue)
"""

_ROUTE_WITH_ROOM = _ROUTE.format(has_room=HAS_ROOM.format(q="m", n="1"))
_COPIES_DEFAULT_IDS = _INSERT_COPIES.format(target="go", id_col="", id_val="")
_COPIES_DRAWN_IDS = _INSERT_COPIES.format(target="target", id_col="msg_id, ", id_val="t.msg_id, ")

# -- publish -- Route one message through an exchange: one copy per matched queue, one trip.
# Returns the exchange id (NULL: no such exchange), the new ids, the name of a matched queue
# too small for the body and the name of a matched queue that is full (then nothing is
# inserted).
_PUBLISHED_NEW = _PUBLISHED.format(ids="ins")
PUBLISH = f"""WITH {_ROUTE_WITH_ROOM}, ins AS ({_COPIES_DEFAULT_IDS}){_PUBLISHED_NEW}"""

# -- publish_deduplicated -- Publish under a dedup_id: each routed queue keeps its own claim
# (as a send would), so a repeat within the window inserts no copy in a queue that already
# has one and answers that copy's msg_id. Queues that gained a binding since get theirs.
PUBLISH_DEDUPLICATED = f"""WITH {_ROUTE_WITH_ROOM}, new AS MATERIALIZED (
    SELECT go.*, nextval('pgq_message_msg_id_seq') AS msg_id FROM go
), claim AS (
    INSERT INTO pgq_dedup (queue_id, dedup_id, msg_id, expires_at)
    SELECT new.id, %(dedup_id)s, new.msg_id,
           clock_timestamp() + make_interval(secs => %(window)s)
    FROM new
    ON CONFLICT (queue_id, dedup_id) DO UPDATE
        SET msg_id = CASE WHEN pgq_dedup.expires_at <= clock_timestamp()
                          THEN EXCLUDED.msg_id ELSE pgq_dedup.msg_id END,
            expires_at = CASE WHEN pgq_dedup.expires_at <= clock_timestamp()
                              THEN EXCLUDED.expires_at ELSE pgq_dedup.expires_at END
    RETURNING queue_id, msg_id
), target AS (
    SELECT new.* FROM new JOIN claim ON claim.queue_id = new.id AND claim.msg_id = new.msg_id
), ins AS ({_COPIES_DRAWN_IDS}){_PUBLISHED.format(ids="claim")}"""  # noqa: S608 (constants)
