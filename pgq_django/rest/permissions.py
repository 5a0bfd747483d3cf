"""Who is calling, and may they: DRF authentication plus the grants of :mod:`pgq_django.access`.

Authentication is DRF's: the classes of ``PGQ["REST_AUTHENTICATION_CLASSES"]``, else DRF's
``DEFAULT_AUTHENTICATION_CLASSES`` when the project set them, else HTTP basic, session and —
when ``rest_framework.authtoken`` is installed — token authentication; DRF's basic and token
classes are served by the throttled twins of :mod:`pgq_django.rest.authentication`. Every view then
needs an authenticated user (:class:`IsAuthenticated`; 401 otherwise) and checks the grant
for what it touches with :func:`require_queue` / :func:`require_exchange` before it calls
the functional API, so a refused request changes nothing: 403 for a user with some right on
the queue or topic but not this one, the same 404 as for a missing one for a user with none.
"""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from rest_framework.permissions import BasePermission

from .. import access
from .. import validation as v
from ..api.exchanges import get_exchange
from ..api.queues import get_queue
from ..exceptions import ExchangeNotFound, PermissionDenied, QueueNotFound
from ..models import Exchange, Queue


class IsAuthenticated(BasePermission):
    """Every pgq_django endpoint needs a logged-in, active user; grants come after."""

    def has_permission(self, request: Any, view: Any) -> bool:
        user = request.user
        return bool(user and user.is_authenticated and user.is_active)


def require_queue(user: Any, right: str | tuple[str, ...], name: str) -> None:
    """Raise unless ``user`` has ``right`` (or one of several) on queue ``name``.

    A queue on which the user holds no right at all answers the same 404 as a queue that
    does not exist, so a caller learns nothing about queues they cannot use; a user with
    some right but not this one gets 403. A name that breaks the naming rule (a NUL, a
    non-ASCII letter) answers 400 before any query. The check runs before anything
    changes.
    """
    rights = (right,) if isinstance(right, str) else right
    v.name(name)
    if any(access.may(user, r, name) for r in rights):
        return
    queue = get_queue(name)  # QueueNotFound when missing
    if not any(access.may(user, r, queue) for r in access.QUEUE_RIGHTS if r not in rights):
        raise QueueNotFound.for_name(name)
    access.require(user, rights[0], queue)


def require_exchange(user: Any, right: str | tuple[str, ...], name: str) -> None:
    """Raise unless ``user`` has ``right`` (publish or manage, or one of several) on exchange
    ``name``; a missing exchange, or one the user holds no right on, answers 404."""
    rights = (right,) if isinstance(right, str) else right
    exchange = get_exchange(name)
    if any(access.may(user, r, exchange) for r in rights):
        return
    if not any(access.may(user, r, exchange) for r in access.EXCHANGE_RIGHTS if r not in rights):
        raise ExchangeNotFound.for_name(exchange.name)
    access.require(user, rights[0], exchange)


def require_model_permission(user: Any, codename: str, what: str) -> None:
    """Creating a queue or exchange needs Django's add permission (superusers have it)."""
    if not user.has_perm(f"pgq_django.{codename}"):
        raise PermissionDenied(
            f"{user.get_username()} may not create {what}: it needs the "
            f"pgq_django.{codename} permission.",
            right=codename,
        )


def visible_queues(user: Any) -> QuerySet[Queue]:
    """Queues the user holds any right on, in name order."""
    found = (
        access.queues_for(user, "read")
        | access.queues_for(user, "write")
        | access.queues_for(user, "manage")
    )
    return found.distinct().order_by("name")


def visible_queue_ids(user: Any) -> set[int]:
    return set(visible_queues(user).values_list("pk", flat=True))


def visible_exchanges(user: Any) -> QuerySet[Exchange]:
    """Exchanges the user may publish through or manage, in name order."""
    found = access.exchanges_for(user, "publish") | access.exchanges_for(user, "manage")
    return found.distinct().order_by("name")
