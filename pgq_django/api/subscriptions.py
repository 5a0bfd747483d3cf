"""Named bindings: psqlqueue's subscriptions, a binding with an id of its own.

A subscription *is* a :class:`~pgq_django.models.Binding` (exchange → queue, routing key,
filters) whose ``name`` the caller chose; the REST API's ``/v1/subscriptions`` speaks in
these. A binding made with :func:`pgq_django.bind_queue` has no name and is addressed by its
numeric primary key instead, so every binding is reachable as a subscription.
"""

from __future__ import annotations

from typing import Any

from django.db import IntegrityError, transaction

from .. import routing
from .. import validation as v
from ..conf import settings
from ..exceptions import InvalidName, SubscriptionAlreadyExists, SubscriptionNotFound
from ..models import Binding
from ..types import ExchangeRef, QueueRef
from .exchanges import get_exchange
from .queues import get_queue


def _db() -> str:
    return settings.DATABASE


def subscription_id(binding: Binding) -> str:
    """The id a binding is known by: its name, or its primary key for an unnamed binding."""
    return binding.name or str(binding.pk)


def subscribe(
    name: Any,
    exchange: ExchangeRef,
    queue: QueueRef,
    *,
    routing_key: str | None = None,
    filters: Any = None,
) -> Binding:
    """Bind ``queue`` to ``exchange`` under the subscription id ``name``.

    Raises SubscriptionAlreadyExists when the id is taken or the same route (exchange,
    queue, routing key) already exists under another id; nothing is changed then.
    """
    label = v.name(name, kind="subscription")
    if label.isdigit():
        # Digits alone address unnamed bindings by primary key.
        raise InvalidName(
            f"{label!r} is not a valid subscription id: it needs a character besides digits.",
            name=label,
        )
    key = routing.routing_key(routing_key)
    clean = routing.binding_filters(filters)
    x = get_exchange(exchange)
    q = get_queue(queue)
    try:
        with transaction.atomic(using=_db()):
            existing = (
                Binding.objects.using(_db())
                .select_for_update()
                .filter(exchange=x, queue=q, routing_key=key)
                .first()
            )
            if existing is not None:
                raise SubscriptionAlreadyExists(
                    f"Queue {q.name!r} is already bound to exchange {x.name!r} with this "
                    f"routing key, as subscription {subscription_id(existing)!r}.",
                    subscription=subscription_id(existing),
                )
            binding = Binding(name=label, exchange=x, queue=q, routing_key=key, filters=clean)
            binding.save(using=_db())
    except IntegrityError:
        raise SubscriptionAlreadyExists(
            f"Subscription {label!r} already exists.", subscription=label
        ) from None
    return binding


def get_subscription(subscription: Any) -> Binding:
    """The binding named ``subscription`` (or, for digits, with that primary key)."""
    found = Binding.objects.using(_db()).select_related("exchange", "queue")
    if isinstance(subscription, str) and v.is_ascii_digits(subscription) and len(subscription) < 19:
        binding = found.filter(pk=int(subscription)).first()
    elif isinstance(subscription, str) and v.NAME_RE.fullmatch(subscription):
        binding = found.filter(name=subscription).first()
    else:
        binding = None
    if binding is None:
        raise SubscriptionNotFound(
            f"Subscription {subscription!r} does not exist.", subscription=str(subscription)
        )
    return binding


def unsubscribe(subscription: Any) -> bool:
    """Remove the subscription (the binding); False if there was none."""
    try:
        binding = get_subscription(subscription)
    except SubscriptionNotFound:
        return False
    deleted, _ = Binding.objects.using(_db()).filter(pk=binding.pk).delete()
    return deleted > 0
