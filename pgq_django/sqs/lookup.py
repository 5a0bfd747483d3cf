"""One query before a hot action: the QueueUrl's queue, if the caller may still use it.

Send, receive, delete and change-visibility requests need the queue's row (its FIFO flag,
size limit, redrive policy), the caller's right on it and, for a caller authenticated from a
remembered key (:mod:`.auth`), proof that the key is still live. :func:`prefetch` gets all
three in one query: :func:`pgq_django.access.queues_for` (THE rule), filtered by name and by
:func:`.auth.still_valid`.

That queryset, with its EXISTS subqueries over grants and groups, costs Django about a
millisecond of CPU to build and compile, more than the statement costs PostgreSQL; and its
SQL differs from request to request only in three values. So it is compiled once per shape
(right, superuser or not, key checked or not): built with stand-in values, compiled by the
ORM, and the stand-ins' places in the parameter list noted. A request fills in its own
values, runs the same SQL and builds the Queue from the row as the ORM would (the fields'
converters, then ``Model.from_db``). The row comes back in binary format when the only
converter is a JSONField's with the default decoder (the Queue's ``tags``): psycopg then
decodes the jsonb and the timestamps in C, where the text format parsed two timestamps
with a regular expression each and the JSON with the field's converter, a large share of
the lookup's time in the server. No SQL is written here, and the rule stays the one in
:mod:`pgq_django.access`; a user model whose primary key has no stand-in (neither integer,
UUID nor text) is served by the ORM query every time.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, replace
from typing import Any

from django.contrib.auth import get_user_model
from django.db import connections
from django.db.models import Field, JSONField, QuerySet

from .. import access, db
from ..models import AccessKey, Queue
from . import auth
from .errors import SqsError
from .params import Call

_INTEGER_TYPES = frozenset(
    {
        "AutoField",
        "BigAutoField",
        "SmallAutoField",
        "IntegerField",
        "BigIntegerField",
        "SmallIntegerField",
        "PositiveIntegerField",
        "PositiveBigIntegerField",
        "PositiveSmallIntegerField",
    }
)
_TEXT_TYPES = frozenset({"CharField", "TextField", "SlugField", "EmailField"})


def prefetch(call: Call, right: str | None) -> Call:
    """The call with its caller confirmed and, for an action on the QueueUrl's queue that
    needs ``right``, that queue looked up with the caller's right in the same query.

    When the query finds nothing (no such queue, no right, a key revoked since), the key is
    confirmed on its own, which refuses a dead key first, and the action's
    :func:`.queues.get_queue` says what is wrong, exactly as without the shortcut.
    """
    caller = call.caller
    if right is None:
        return replace(call, caller=auth.confirm(caller))
    try:
        name = call.queue_name()
    except SqsError:
        return replace(call, caller=auth.confirm(caller))  # the action reports the bad URL
    queue = queue_for(caller, right, name)
    if queue is None:
        return replace(call, caller=auth.confirm(caller))
    return replace(call, caller=auth.confirm(caller, checked=True), prefetched=(right, queue))


def queue_for(caller: auth.Caller, right: str, name: str) -> Queue | None:
    """Queue ``name`` if ``caller``'s user has ``right`` on it and, for an unconfirmed
    caller, the caller's key is still live; None otherwise. One query."""
    user = caller.user
    if not user.is_active:
        return None
    check_key = not caller.confirmed
    shape = compiled_shape(right, bool(user.is_superuser), check_key)
    if shape is None:
        return next(iter(rule_queryset(user, right, name, caller.key_pk, check_key)), None)
    return shape.run((name, user.pk, caller.key_pk))


def rule_queryset(
    user: Any, right: str, name: str, key_pk: Any, check_key: bool
) -> QuerySet[Queue]:
    """The lookup as the ORM states it (access.py's rule): what every compiled shape must
    return, and the fallback when no shape applies."""
    found = access.queues_for(user, right).filter(name=name)
    if check_key:
        found = found.filter(auth.still_valid(key_pk, user))
    return found


@dataclass(frozen=True)
class _Shape:
    """One compiled form of :func:`rule_queryset`: its SQL and parameters (constants where the
    request's values go), where each of the request's values goes, and how the ORM turns a
    row of it into a Queue (the selected fields and their converters)."""

    db: str
    sql: str
    params: tuple[Any, ...]
    slots: tuple[tuple[int, int], ...]  # (parameter position, 0 name | 1 user pk | 2 key pk)
    fields: tuple[Any, ...]  # the fields of name, user pk and key pk, to prepare the values
    attnames: tuple[str, ...]
    converters: tuple[tuple[int, tuple[Any, ...], Any], ...]
    binary: bool = False  # rows in binary format, with no converter left to run

    def run(self, values: tuple[Any, Any, Any]) -> Queue | None:
        connection = connections[self.db]
        prepared = [
            field.get_db_prep_value(value, connection)
            for field, value in zip(self.fields, values, strict=True)
        ]
        params = list(self.params)
        for position, which in self.slots:
            params[position] = prepared[which]
        # Prepared: PostgreSQL plans this statement (its EXISTS subqueries) once per
        # connection instead of on every request, where planning cost six times the
        # execution. Text results when the ORM's converters expect them.
        # The cursor is the connection's own, kept for the next statement (as db.run_one
        # leaves it): closing it made the runner set up a new one on every request.
        found = db.execute(self.sql, params, self.db, binary=self.binary).fetchone()
        if found is None:
            return None
        row = list(found)
        for position, functions, expression in self.converters:
            for convert in functions:
                row[position] = convert(row[position], expression, connection)
        return Queue.from_db(self.db, list(self.attnames), row[: len(self.attnames)])


_shapes: dict[tuple[str, bool, bool], _Shape | None] = {}


def _stand_in(field: Any, seed: int, *, ordinary: bool = False) -> Any:
    """A value of ``field``'s type that no real row and no constant of the query has (near
    the bottom of the column's range: an out-of-range one would compile its condition away);
    with ``ordinary``, an everyday value of that type instead."""
    kind = field.get_internal_type() if isinstance(field, Field) else None
    if kind in _INTEGER_TYPES:
        low, high = connections[Queue.objects.db].ops.integer_field_range(kind)
        if ordinary:
            return seed + 1
        return low + 7 + seed if low < 0 else high - 7 - seed
    if kind == "UUIDField":
        return uuid.uuid4()
    if kind in _TEXT_TYPES:
        return f"q{seed}" if ordinary else f"\x00pgq-stand-in-{seed}-{uuid.uuid4().hex}"
    return None


def compiled_shape(right: str, superuser: bool, check_key: bool) -> _Shape | None:
    """The compiled SQL for one kind of caller, made once per process; None when the ORM
    rule compiles to SQL this module does not recognise (then :func:`rule_queryset` runs)."""
    key = (right, superuser, check_key)
    if key not in _shapes:
        _shapes[key] = _compile(right, superuser, check_key)
    return _shapes[key]


def _stand_in_queryset(
    user_model: Any, values: tuple[Any, ...], right: str, superuser: bool, check_key: bool
) -> QuerySet[Queue]:
    user = user_model(pk=values[1], is_active=True, is_superuser=superuser)
    # As if loaded from the database, as a real caller is (an unsaved user's groups are not
    # looked up).
    user._state.adding = False
    user._state.db = Queue.objects.db
    return rule_queryset(user, right, values[0], values[2], check_key)


def _compile(right: str, superuser: bool, check_key: bool) -> _Shape | None:
    user_model = get_user_model()
    fields = (Queue._meta.get_field("name"), user_model._meta.pk, AccessKey._meta.pk)
    stand_ins = tuple(_stand_in(field, seed) for seed, field in enumerate(fields))
    ordinary = tuple(_stand_in(field, seed, ordinary=True) for seed, field in enumerate(fields))
    if any(value is None for value in stand_ins):
        return None
    found = _stand_in_queryset(user_model, stand_ins, right, superuser, check_key)
    compiler = found.query.get_compiler(found.db)
    sql, params = compiler.as_sql()
    everyday = _stand_in_queryset(user_model, ordinary, right, superuser, check_key)
    if everyday.query.get_compiler(everyday.db).as_sql()[0] != sql:
        return None  # the SQL depends on the values: compile it for each request
    slots = [
        (position, which)
        for position, value in enumerate(params)
        for which, stand_in in enumerate(stand_ins)
        if type(value) is type(stand_in) and value == stand_in
    ]
    columns = [column for column, _sql, _alias in compiler.select]
    if not any(which == 0 for _, which in slots) or any(
        getattr(column, "target", None) is None for column in columns
    ):
        return None  # not the plain "SELECT <queue fields> … name = %s" expected: no guess
    converters = tuple(
        (position, tuple(functions), expression)
        for position, (functions, expression) in compiler.get_converters(columns).items()
    )
    binary = all(
        _decoded_by_driver(functions, expression) for _, functions, expression in converters
    )
    return _Shape(
        db=found.db,
        sql=sql,
        params=tuple(params),
        slots=tuple(slots),
        fields=fields,
        attnames=tuple(column.target.attname for column in columns),
        converters=() if binary else converters,
        binary=binary,
    )


def _decoded_by_driver(functions: tuple[Any, ...], expression: Any) -> bool:
    """Whether a column's converters only decode JSON as psycopg's binary jsonb loader does
    (a JSONField with the default decoder): then the binary row needs no converter."""
    field = getattr(expression, "output_field", None)
    return (
        isinstance(field, JSONField)
        and field.decoder is None
        and all(getattr(f, "__func__", None) is JSONField.from_db_value for f in functions)
    )
