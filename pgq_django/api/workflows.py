"""Dependencies and groups: messages that wait for other messages to be acknowledged.

``pgq.send(queue, message, after=[…])`` sends a message held invisible until every message
it names is acknowledged; ``pgq.group(queue, messages, then=(queue, message))`` sends a
batch whose follow-up waits for all of it (a chord). The waits live in ``pgq_dependency``
(:mod:`pgq_django.store.sql.workflows`), never in the statements a plain send, lease or ack
runs, so a queue that uses none of this pays nothing for it.

Who notices that an awaited message has finished: the store, in the transaction that
takes the message out of its queue, whatever took it (a worker, ``pgq.delete`` or
``pgq.archive``, REST, SQS, the PGMQ functions, expiry, a purge or drop, a dead-letter
move). Such a message carries ``headers["pgq_awaited"]`` (the group's members from their
send, a message something waits for from the moment that wait is recorded), and triggers
on ``pgq_message`` resolve its waits when it is deleted or moved to another queue. The
worker leader's ``workflows`` duty resolves any wait left open, as a safety net, and
:func:`group_status` the group it is asked about.

A dependency must exist when the dependant is sent (its id must have been issued), so a
message can only wait for older ones and no cycle can be built.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from django.db import connections, transaction
from django.db.migrations.recorder import MigrationRecorder

from .. import validation as v
from ..conf import settings
from ..exceptions import GroupNotFound, InvalidArgument
from ..models import Dependency, WorkflowGroup
from ..store.managers.workflows import GroupManager, WorkflowManager
from ..types import QueueRef
from .queues import get_queue
from .recovery import recovers
from .sending import send_one, send_trusted

logger = logging.getLogger("pgq_django.workflows")

#: Set on a message something waits for: whoever finishes it resolves its waits.
AWAITED = "pgq_awaited"
#: The group a member belongs to (its id).
GROUP = "pgq_group"
#: Where the worker sends the handler's return value (a queue name written by the API only).
REPLY_TO = "pgq_reply_to"
#: On a reply: the msg_id of the request it answers.
CORRELATION_ID = "pgq_correlation_id"
#: On a request of ``pgq.request``: its reply expires with the request (a late one is unread).
REQUEST = "pgq_request"

#: A message whose ``vt`` is in this year or later is held for its dependencies
#: (pgq_django.store.sql.workflows pushes it to 9999).
HELD_YEAR = 9000
#: Most messages one message may wait for.
MAX_DEPENDENCIES = 1000
#: Waits one resolve looks at.
RESOLVE_BATCH = 1000
# The migration that makes the awaited-message triggers whose function post_migrate installs.
TRIGGERS_MIGRATION = ("pgq_django", "0018_release_on_ack")
# A dependant is sent with this delay before it is held, so its send wakes nobody.
_HOLD_DELAY = 3600.0
_SUCCEEDED = frozenset({"acked", "archived"})


def _manager() -> WorkflowManager:
    return Dependency.objects.db_manager(settings.DATABASE)


def _groups() -> GroupManager:
    return WorkflowGroup.objects.db_manager(settings.DATABASE)


def message_ids(value: Any, field: str) -> list[int]:
    """Checked message ids: a non-empty list of positive integers, at most MAX_DEPENDENCIES."""
    if isinstance(value, str | bytes | dict) or not isinstance(value, Iterable):
        raise InvalidArgument(f"{field} must be a list of message ids.", field=field)
    ids = [v.integer(i, field, minimum=1, maximum=2**63 - 1) for i in value]
    if not ids:
        raise InvalidArgument(f"{field} must name at least one message.", field=field)
    if len(ids) > MAX_DEPENDENCIES:
        raise InvalidArgument(f"{field} may name at most {MAX_DEPENDENCIES} messages.", field=field)
    return sorted(set(ids))


def send_after(
    queue: QueueRef,
    message: Any,
    *,
    after: Any,
    reply_to: QueueRef | None,
    options: dict[str, Any],
) -> int:
    """:func:`pgq_django.send` with ``after`` and/or ``reply_to`` (its headers checked)."""
    ids = None if after is None else message_ids(after, "after")
    headers = dict(options.pop("headers", None) or {})
    if reply_to is not None:
        headers[REPLY_TO] = get_queue(reply_to).name
    if ids is None:
        return send_one(queue, message, headers=headers, **options)
    if options.get("delay") is not None:
        raise InvalidArgument(
            "delay cannot be combined with after: the message is sent when its "
            "dependencies are acknowledged.",
            field="delay",
        )
    if options.get("dedup_id") is not None:
        raise InvalidArgument("dedup_id cannot be combined with after.", field="dedup_id")
    with transaction.atomic(using=settings.DATABASE):
        msg_id = send_one(queue, message, headers=headers, delay=_HOLD_DELAY, **options)
        hold(ids, dependant=msg_id, group=None, field="after")
        resolve_waits(ids)
    return msg_id


def hold(ids: Sequence[int], *, dependant: int | None, group: int | None, field: str) -> None:
    """Record the waits (in the caller's transaction); refuse ids no message can have."""
    refused = _manager().await_messages(ids, dependant=dependant, group=group)
    if refused:
        raise InvalidArgument(
            f"{field} names messages that do not exist yet: {refused}. A message can only "
            "wait for messages sent before it.",
            field=field,
            msg_ids=refused,
        )


def resolve_waits(ids: Sequence[int] | None = None) -> dict[str, int]:
    """Resolve the waits on messages that left their queue (``ids``, or any), then release
    the dependants that wait for nothing more and dead-letter those whose dependency failed,
    and so on down a chain: one call of the store's ``pgq_resolve_waits``, in the caller's
    transaction when there is one. The triggers on ``pgq_message`` run the same function
    when an awaited message leaves its queue, so this finds work only for what they could
    not do (waits beyond one resolve's batch, rows that left before the triggers existed)."""
    row = _manager().resolve_waits(ids, limit=RESOLVE_BATCH)
    for dependant, dependency, outcome in zip(
        row.failed, row.failed_by, row.failed_how, strict=True
    ):
        logger.info(
            "event=dependant_failed msg_id=%s dependency=%s outcome=%s",
            dependant,
            dependency,
            outcome,
        )
    return {
        "finished": int(row.finished),
        "released": len(row.released),
        "failed": len(row.failed),
    }


def install_functions(using: str, plan: Any = None, **kwargs: Any) -> None:
    """``post_migrate`` of pgq_django: (re)make the store's resolving function and the
    awaited-message triggers' function with this process's settings. Only after
    ``migrate`` (``flush`` sends the signal too, without a plan) and while the migration
    that makes the triggers is applied: after migrating back past it (to zero, say), the
    functions would be left behind, and applying it again would find them there."""
    if plan is None or using != settings.DATABASE:
        return
    applied = MigrationRecorder(connections[using]).applied_migrations()
    if TRIGGERS_MIGRATION not in applied:
        return
    Dependency.objects.db_manager(using).install_functions(batch=RESOLVE_BATCH)


@dataclass(frozen=True)
class GroupStatus:
    """Where a group stands (``pgq.group_status``).

    ``status`` is ``failed`` as soon as a member failed (dead, expired or cancelled),
    ``done`` when every member is acknowledged, else ``pending``. ``then_msg_id`` is the
    follow-up's id (None without ``then``).
    """

    id: int
    status: str
    queue_name: str
    size: int
    pending: int
    done: int
    failed: int
    then_msg_id: int | None
    then_queue_name: str
    created_at: datetime

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _then(then: Any) -> tuple[str, Any]:
    if not (isinstance(then, tuple | list) and len(then) == 2):
        raise InvalidArgument("then must be a (queue, message) pair.", field="then")
    return v.name(then[0]), then[1]


@recovers(False)
def group(queue: QueueRef, messages: Iterable[Any], *, then: Any = None, **options: Any) -> int:
    """Send ``messages`` to ``queue`` as one group; returns the group's id.

    Takes :func:`pgq_django.send_batch`'s options. ``then=(queue, message)`` sends a
    follow-up that stays invisible until every member is acknowledged, and is dead-lettered
    with the reason if any member fails (dead, expired or cancelled). Everything is sent in
    one transaction. :func:`group_status` tells how the group is doing.
    """
    v.unreserved_headers(options.get("headers"))
    if options.get("dedup_id") is not None:
        raise InvalidArgument("dedup_id cannot be used with a group.", field="dedup_id")
    name = v.name(queue)
    follow_up = None if then is None else _then(then)
    with transaction.atomic(using=settings.DATABASE):
        entry = _groups().open(name)
        headers = {**(options.pop("headers", None) or {}), GROUP: entry.pk, AWAITED: True}
        ids = send_trusted(name, messages, headers=headers, **options)
        if not ids:
            raise InvalidArgument("A group needs at least one message.", field="messages")
        then_id = None
        if follow_up is not None:
            then_id = send_one(
                follow_up[0], follow_up[1], headers={GROUP: entry.pk}, delay=_HOLD_DELAY
            )
        hold(ids, dependant=then_id, group=entry.pk, field="messages")
        then_queue = "" if follow_up is None else follow_up[0]
        _groups().fill(entry, size=len(ids), then_msg_id=then_id, then_queue_name=then_queue)
    return int(entry.pk)


@recovers()
def group_queue(group_id: int) -> str:
    """The queue a group's members were sent to (what a transport checks the caller's
    read right on before it answers the group's status); GroupNotFound if unknown."""
    ident = v.integer(group_id, "group_id", minimum=1, maximum=2**63 - 1)
    found = _groups().queue_of(ident)
    if found is None:
        raise GroupNotFound.for_id(ident)
    return found


@recovers()
def group_status(group_id: int) -> GroupStatus:
    """How a group of :func:`group` stands: pending, done or failed, with counts.

    Raises GroupNotFound for an unknown group (or one pruned after
    ``PGQ["WORKFLOW_RETENTION"]``).
    """
    ident = v.integer(group_id, "group_id", minimum=1, maximum=2**63 - 1)
    open_members = _manager().open_members(ident)
    if open_members:
        resolve_waits(open_members)
    row = _manager().group_counts(ident)
    if row is None:
        raise GroupNotFound.for_id(ident)
    if row.failed:
        status = "failed"
    elif row.pending:
        status = "pending"
    else:
        status = "done"
    return GroupStatus(
        id=int(row.id),
        status=status,
        queue_name=row.queue_name,
        size=int(row.size),
        pending=int(row.pending),
        done=int(row.done),
        failed=int(row.failed),
        then_msg_id=row.then_msg_id,
        then_queue_name=row.then_queue_name,
        created_at=row.created_at,
    )


def dependencies_of(msg_ids: Iterable[int]) -> dict[int, list[tuple[int, str | None]]]:
    """What each of ``msg_ids`` waits for: dependant -> [(dependency, its outcome or None
    while it is pending)], in dependency order; for the admin's message browser."""
    found: dict[int, list[tuple[int, str | None]]] = {}
    for dependant, dependency, outcome in _manager().waits_of(list(msg_ids)):
        if dependant is not None:
            found.setdefault(dependant, []).append((dependency, outcome))
    return found


def prune() -> int:
    """Forget finished groups and waits older than ``PGQ["WORKFLOW_RETENTION"]``."""
    return _manager().prune(keep=float(settings.WORKFLOW_RETENTION))


def upkeep() -> dict[str, int]:
    """The leader's ``workflows`` duty: resolve every open wait, then prune."""
    done = resolve_waits(None)
    done["pruned"] = prune()
    return done


__all__ = ["GroupStatus", "group", "group_status", "resolve_waits", "send_after"]
