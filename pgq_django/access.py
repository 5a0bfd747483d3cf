"""The one answer to "may this user do X on Y?", used by every entry point.

REST views, the SQS endpoint and the admin all ask :func:`may` (or :func:`require`, which
raises) before they call the functional API; the functional API itself trusts its caller, as
Django's ORM does. The rule is stated as a queryset filter (:func:`queues_for`,
:func:`exchanges_for`) for listings, and as named statements
(:mod:`pgq_django.store.sql.access`) for the per-request question :func:`may` answers, which runs
on every REST and SQS call; the tests hold the statements' answers to the querysets' on
every kind of user, so "which queues may this user see" and "may this user read this queue"
cannot disagree.

Rights (pgpro_queue's, mapped onto Django users and groups):

=========  ==========  ================================================================
target     right       allows
=========  ==========  ================================================================
queue      ``read``    lease, pop, browse and acknowledge messages
queue      ``write``   send messages
queue      ``manage``  purge, pause/resume, redrive, alter, drop, bind, change grants
exchange   ``publish`` publish through the exchange
exchange   ``manage``  drop the exchange, change its grants (owner and superusers only)
=========  ==========  ================================================================

Active superusers and the owner of the queue or exchange have every right; an anonymous or
inactive user has none; anyone else has the union of the grants made to them and to their
groups.
"""

from __future__ import annotations

from typing import Any

from django.db.models import Exists, OuterRef, Q, QuerySet

from .exceptions import InvalidArgument, PermissionDenied
from .models import Exchange, ExchangeGrant, Queue, QueueGrant

QUEUE_RIGHTS = ("read", "write", "manage")
EXCHANGE_RIGHTS = ("publish", "manage")


def _is_superuser(user: Any) -> bool:
    return bool(user is not None and user.is_active and user.is_superuser)


def _is_anonymous(user: Any) -> bool:
    return user is None or not user.is_authenticated or not user.is_active


def _granted(grants: QuerySet[Any], user: Any, right_field: str) -> Exists:
    """Some grant row with the right, to the user or one of their groups, for the outer row."""
    return Exists(
        grants.filter(**{right_field: True}).filter(Q(user=user) | Q(group__in=user.groups.all()))
    )


def queues_for(user: Any, right: str) -> QuerySet[Queue]:
    """The queues on which ``user`` has ``right`` (read, write or manage)."""
    if right not in QUEUE_RIGHTS:
        raise InvalidArgument(
            f"A queue right is one of {', '.join(QUEUE_RIGHTS)}, not {right!r}.", field="right"
        )
    if _is_superuser(user):
        return Queue.objects.all()
    if _is_anonymous(user):
        return Queue.objects.none()
    grants = QueueGrant.objects.filter(queue=OuterRef("pk"))
    return Queue.objects.filter(Q(owner=user) | _granted(grants, user, f"can_{right}"))


def visible_queues(user: Any) -> QuerySet[Queue]:
    """The queues on which ``user`` has any right at all (what a listing shows them)."""
    return queues_for(user, "read") | queues_for(user, "write") | queues_for(user, "manage")


def exchanges_for(user: Any, right: str) -> QuerySet[Exchange]:
    """The exchanges on which ``user`` has ``right`` (publish or manage)."""
    if right not in EXCHANGE_RIGHTS:
        raise InvalidArgument(
            f"An exchange right is one of {', '.join(EXCHANGE_RIGHTS)}, not {right!r}.",
            field="right",
        )
    if _is_superuser(user):
        return Exchange.objects.all()
    if _is_anonymous(user):
        return Exchange.objects.none()
    if right == "manage":
        return Exchange.objects.filter(owner=user)
    grants = ExchangeGrant.objects.filter(exchange=OuterRef("pk"))
    return Exchange.objects.filter(Q(owner=user) | _granted(grants, user, "can_publish"))


def may_create_queues(user: Any) -> bool:
    """Whether ``user`` may create queues (and so own them): active superusers, and active
    users holding Django's ``pgq_django.add_queue`` permission, directly or through a group."""
    if _is_anonymous(user):
        return False
    return _is_superuser(user) or bool(user.has_perm("pgq_django.add_queue"))


def may(user: Any, right: str, target: Queue | Exchange | str) -> bool:
    """Whether ``user`` may exercise ``right`` on ``target``; one query at most.

    ``target`` is a Queue, an Exchange, or a name: an exchange name for ``publish``, a
    queue name otherwise. An unknown name answers False (the caller reports "not found").

    The query is the rule of :func:`queues_for` / :func:`exchanges_for` for one target, as
    a prepared statement (``QUEUE_RIGHT`` / ``EXCHANGE_RIGHT`` of
    :mod:`pgq_django.store.sql.access`): building and compiling the queryset would cost several
    times the query itself on every REST and SQS request.
    """
    is_exchange = isinstance(target, Exchange) or (isinstance(target, str) and right == "publish")
    rights = EXCHANGE_RIGHTS if is_exchange else QUEUE_RIGHTS
    if right not in rights:
        # The error the queryset builders give.
        (exchanges_for if is_exchange else queues_for)(user, right)
    superuser = _is_superuser(user)
    if superuser and not isinstance(target, str):
        return True
    if _is_anonymous(user):
        return False
    # The owner has every right: no query needed (the SQS and REST hot paths ask this often).
    if not isinstance(target, str) and target.owner_id is not None and target.owner_id == user.pk:
        return True
    by_name = isinstance(target, str)
    manager = Exchange.objects if is_exchange else Queue.objects
    return manager.has_right(
        right,
        target if isinstance(target, str) else target.pk,
        by_name=by_name,
        user_id=user.pk,
        superuser=superuser,
    )


def require(user: Any, right: str, target: Queue | Exchange | str) -> None:
    """Raise PermissionDenied unless :func:`may` says yes."""
    if not may(user, right, target):
        name = target if isinstance(target, str) else target.name
        kind = "exchange" if isinstance(target, Exchange) or right == "publish" else "queue"
        who = getattr(user, "get_username", lambda: "anonymous")() if user else "anonymous"
        raise PermissionDenied(
            f"{who} may not {right} on {kind} {name!r}.", right=right, target=name, kind=kind
        )
