"""Who is calling, and may they: DRF authentication plus the grants of :mod:`pgq_django.access`.

Authentication is DRF's: the classes of ``PGQ["REST_AUTHENTICATION_CLASSES"]``, else DRF's
``DEFAULT_AUTHENTICATION_CLASSES`` when the project set them, else HTTP basic, session and —
when ``rest_framework.authtoken`` is installed — token authentication. Every view then
needs an authenticated user (:class:`IsAuthenticated`; 401 otherwise) and checks the grant
for what it touches with :func:`require_queue` / :func:`require_exchange` (403 otherwise)
before it calls the functional API, so a refused request changes nothing.
"""

from __future__ import annotations

from typing import Any

from django.apps import apps
from django.db.models import QuerySet
from django.utils.module_loading import import_string
from rest_framework.authentication import BaseAuthentication
from rest_framework.permissions import BasePermission
from rest_framework.settings import api_settings

from .. import access
from ..api.exchanges import get_exchange
from ..api.queues import get_queue
from ..conf import settings
from ..exceptions import PermissionDenied
from ..models import Exchange, Queue

_BUILTIN = [
    "rest_framework.authentication.BasicAuthentication",
    "rest_framework.authentication.SessionAuthentication",
]
_TOKEN = "rest_framework.authentication.TokenAuthentication"


def authentication_classes() -> list[type[BaseAuthentication]]:
    """The authenticators the REST API uses, resolved from the settings on each call."""
    configured = settings.REST_AUTHENTICATION_CLASSES
    if configured is not None:
        return [import_string(path) if isinstance(path, str) else path for path in configured]
    if "DEFAULT_AUTHENTICATION_CLASSES" in api_settings.user_settings:
        return list(api_settings.DEFAULT_AUTHENTICATION_CLASSES)
    paths = list(_BUILTIN)
    if apps.is_installed("rest_framework.authtoken"):
        paths.append(_TOKEN)
    return [import_string(path) for path in paths]


class IsAuthenticated(BasePermission):
    """Every pgq_django endpoint needs a logged-in, active user; grants come after."""

    def has_permission(self, request: Any, view: Any) -> bool:
        user = request.user
        return bool(user and user.is_authenticated and user.is_active)


def require_queue(user: Any, right: str | tuple[str, ...], name: str) -> None:
    """Raise unless ``user`` has ``right`` (or one of several) on queue ``name``.

    A queue the user may not touch answers 403 when it exists and 404 when it does not,
    as the admin does; the check runs before anything changes.
    """
    rights = (right,) if isinstance(right, str) else right
    if any(access.may(user, r, name) for r in rights):
        return
    get_queue(name)  # QueueNotFound first, so a missing queue answers 404
    access.require(user, rights[0], name)


def require_exchange(user: Any, right: str | tuple[str, ...], name: str) -> None:
    """Raise unless ``user`` has ``right`` (publish or manage, or one of several) on exchange
    ``name``; a missing exchange answers 404."""
    rights = (right,) if isinstance(right, str) else right
    exchange = get_exchange(name)
    if not any(access.may(user, r, exchange) for r in rights):
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
