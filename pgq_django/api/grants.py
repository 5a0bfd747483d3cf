"""Granting and revoking access to queues and exchanges (pgpro_queue's grant functions).

A grantee (``to``) is a user, a group, or a username. Granting again replaces the rights of
the earlier grant rather than adding a second row. :mod:`pgq_django.access` answers whether a
user may act; these functions only change who may.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import transaction

from ..conf import settings
from ..exceptions import InvalidArgument
from ..models import ExchangeGrant, QueueGrant
from ..types import ExchangeRef, QueueRef
from .exchanges import get_exchange
from .queues import get_queue
from .recovery import recovers


def _grantee(to: Any) -> dict[str, Any]:
    """``{"user": u}`` or ``{"group": g}`` for a user, a group or a username."""
    user_model = get_user_model()
    if isinstance(to, Group):
        return {"group": to}
    if isinstance(to, user_model):
        return {"user": to}
    if isinstance(to, str) and to:
        try:
            return {"user": user_model._default_manager.get_by_natural_key(to)}
        except user_model.DoesNotExist:
            raise InvalidArgument(f"There is no user named {to!r}.", field="to") from None
    raise InvalidArgument(
        f"A grant is made to a user, a group or a username, not {to!r}.", field="to"
    )


def _flag(value: Any, field: str) -> bool:
    if not isinstance(value, bool):
        raise InvalidArgument(f"{field} must be True or False, not {value!r}.", field=field)
    return value


@recovers()
def grant_queue_access(
    queue: QueueRef, to: Any, *, read: bool = True, write: bool = True, manage: bool = False
) -> QueueGrant:
    """Give ``to`` these rights on the queue, replacing any earlier grant to ``to``."""
    rights = {
        "can_read": _flag(read, "read"),
        "can_write": _flag(write, "write"),
        "can_manage": _flag(manage, "manage"),
    }
    who = _grantee(to)
    q = get_queue(queue)
    with transaction.atomic(using=settings.DATABASE):
        grant, _ = QueueGrant.objects.using(settings.DATABASE).update_or_create(
            queue=q, **who, defaults=rights
        )
    return grant


@recovers()
def revoke_queue_access(queue: QueueRef, to: Any) -> bool:
    """Remove the grant to ``to`` on the queue; False if there was none.

    A user keeps what their groups' grants (or ownership) give them.
    """
    who = _grantee(to)
    deleted, _ = (
        QueueGrant.objects.using(settings.DATABASE).filter(queue=get_queue(queue), **who).delete()
    )
    return deleted > 0


@recovers()
def reset_queue_access(queue: QueueRef) -> int:
    """Remove every grant on the queue, so only its owner (and superusers) keep access."""
    deleted, _ = QueueGrant.objects.using(settings.DATABASE).filter(queue=get_queue(queue)).delete()
    return deleted


@recovers()
def grant_publish_access(exchange: ExchangeRef, to: Any) -> ExchangeGrant:
    """Let ``to`` publish through the exchange."""
    who = _grantee(to)
    x = get_exchange(exchange)
    with transaction.atomic(using=settings.DATABASE):
        grant, _ = ExchangeGrant.objects.using(settings.DATABASE).update_or_create(
            exchange=x, **who, defaults={"can_publish": True}
        )
    return grant


@recovers()
def revoke_publish_access(exchange: ExchangeRef, to: Any) -> bool:
    """Remove the publish grant to ``to``; False if there was none."""
    who = _grantee(to)
    deleted, _ = (
        ExchangeGrant.objects.using(settings.DATABASE)
        .filter(exchange=get_exchange(exchange), **who)
        .delete()
    )
    return deleted > 0
