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
values and runs the same SQL through ``Manager.raw``, which builds the Queue as the ORM
would. No SQL is written here, and the rule stays the one in :mod:`pgq_django.access`; a user
model whose primary key has no stand-in (neither integer, UUID nor text) is served by the
ORM query every time.
"""

from __future__ import annotations

import uuid
from dataclasses import replace
from typing import Any, NamedTuple

from django.contrib.auth import get_user_model
from django.db import connections
from django.db.models import Field, QuerySet

from .. import access
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
    shape = _shape(right, bool(user.is_superuser), check_key)
    if shape is None:
        return next(iter(_queryset(user, right, name, caller.key_pk, check_key)), None)
    values = (
        shape.prepare_name(name),
        shape.prepare_user(user.pk),
        shape.prepare_key(caller.key_pk),
    )
    params = list(shape.params)
    for position, which in shape.slots:
        params[position] = values[which]
    found = Queue.objects.db_manager(shape.db).raw(shape.sql, params)
    return next(iter(found), None)


def _queryset(user: Any, right: str, name: str, key_pk: Any, check_key: bool) -> QuerySet[Queue]:
    found = access.queues_for(user, right).filter(name=name)
    if check_key:
        found = found.filter(auth.still_valid(key_pk, user))
    return found


class _Shape(NamedTuple):
    """One compiled form of :func:`_queryset`: its SQL, its parameters (constants where the
    request's values go) and where each of the request's values goes."""

    db: str
    sql: str
    params: tuple[Any, ...]
    slots: tuple[tuple[int, int], ...]  # (parameter position, 0 name | 1 user pk | 2 key pk)
    prepare_name: Any
    prepare_user: Any
    prepare_key: Any


_shapes: dict[tuple[str, bool, bool], _Shape | None] = {}


def _stand_in(field: Field[Any, Any], seed: int) -> Any:
    """A value of ``field``'s type that no real row and no constant of the query has."""
    kind = field.get_internal_type()
    if kind in _INTEGER_TYPES:
        return -(10**15) - seed
    if kind == "UUIDField":
        return uuid.uuid4()
    if kind in _TEXT_TYPES:
        return f"\x00pgq-stand-in-{seed}-{uuid.uuid4().hex}"
    return None


def _preparer(field: Field[Any, Any], db: str) -> Any:
    connection = connections[db]
    return lambda value: field.get_db_prep_value(value, connection, prepared=False)


def _shape(right: str, superuser: bool, check_key: bool) -> _Shape | None:
    key = (right, superuser, check_key)
    if key in _shapes:
        return _shapes[key]
    _shapes[key] = shape = _compile(right, superuser, check_key)
    return shape


def _compile(right: str, superuser: bool, check_key: bool) -> _Shape | None:
    user_model = get_user_model()
    user_pk_field = user_model._meta.pk
    key_pk_field = AccessKey._meta.pk
    name_field = Queue._meta.get_field("name")
    if user_pk_field is None or key_pk_field is None:
        return None
    stand_ins = (
        _stand_in(name_field, 1),
        _stand_in(user_pk_field, 2),
        _stand_in(key_pk_field, 3),
    )
    if any(value is None for value in stand_ins):
        return None
    stand_in_user = user_model(pk=stand_ins[1], is_active=True, is_superuser=superuser)
    found = _queryset(stand_in_user, right, stand_ins[0], stand_ins[2], check_key)
    sql, params = found.query.sql_with_params()
    slots = []
    for position, value in enumerate(params):
        for which, stand_in in enumerate(stand_ins):
            if type(value) is type(stand_in) and value == stand_in:
                slots.append((position, which))
    if not any(which == 0 for _, which in slots):
        return None  # the name is not a parameter we can see: do not guess
    db = found.db
    return _Shape(
        db=db,
        sql=sql,
        params=tuple(params),
        slots=tuple(slots),
        prepare_name=_preparer(name_field, db),
        prepare_user=_preparer(user_pk_field, db),
        prepare_key=_preparer(key_pk_field, db),
    )
