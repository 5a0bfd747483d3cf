"""One query before a hot action: the QueueUrl's queue, if the caller may still use it.

Send, receive, delete and change-visibility requests need the queue's row (its FIFO flag,
size limit, redrive policy), the caller's right on it and, for a caller authenticated from a
remembered key (:mod:`.auth`), proof that the key is still live. :func:`prefetch` gets all
three in one query: the named statement ``QUEUE_FOR_CALLER`` of
:mod:`pgq_django.store.sql.access`, run by ``Queue.objects.for_caller`` — the rule of
:func:`pgq_django.access.queues_for` and the key check of :func:`.auth.still_valid`, as one
prepared statement (building and compiling the same question as a queryset cost Django
more CPU than PostgreSQL spends answering it).
"""

from __future__ import annotations

from dataclasses import replace

from ..models import Queue
from . import auth
from .errors import SqsError
from .params import Call


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
    found: Queue | None = Queue.objects.for_caller(
        name,
        right,
        user_id=user.pk,
        superuser=bool(user.is_superuser),
        key_id=caller.key_pk,
        check_key=not caller.confirmed,
    )
    return found
