"""Exchanges: create, drop, bind queues to them, and publish through them.

Routing rules are in :mod:`pgq_django.routing`; publishing is one statement that inserts one
message per matched queue, so a publish inside ``transaction.atomic()`` commits or rolls back
all its copies together with the caller's own rows.
"""

from __future__ import annotations

from typing import Any, Unpack

from django.db import IntegrityError, transaction

from .. import routing, telemetry
from .. import validation as v
from ..conf import settings
from ..exceptions import (
    ExchangeAlreadyExists,
    ExchangeInUse,
    ExchangeNotFound,
    InvalidArgument,
    MessageTooLarge,
    QueueFull,
)
from ..models import Binding, Exchange, ExchangeType, Queue
from ..types import ExchangeRef, QueueRef
from .queues import get_queue
from .recovery import has_dedup_id, recovers
from .sending import SendOptions, check_send_options


def _db() -> str:
    return settings.DATABASE


@recovers()
def get_exchange(exchange: ExchangeRef) -> Exchange:
    """The Exchange for a name or instance; raises ExchangeNotFound."""
    name = v.name(exchange, kind="exchange")
    try:
        return Exchange.objects.using(_db()).get(name=name)
    except Exchange.DoesNotExist:
        raise ExchangeNotFound.for_name(name) from None


@recovers(False)
def create_exchange(name: str, type: str = "fanout", *, owner: Any = None) -> Exchange:
    """Create an exchange of type fanout, direct, topic or headers.

    Raises ExchangeAlreadyExists when the name is taken; nothing is changed then.
    """
    name = v.name(name, kind="exchange")
    if type not in ExchangeType.values:
        raise InvalidArgument(
            f"type must be one of {', '.join(ExchangeType.values)}, not {type!r}.", field="type"
        )
    try:
        with transaction.atomic(using=_db()):
            return Exchange.objects.using(_db()).create(name=name, type=type, owner=v.user(owner))
    except IntegrityError:
        raise ExchangeAlreadyExists(f"Exchange {name!r} already exists.", exchange=name) from None


@recovers()
def list_exchanges() -> list[Exchange]:
    return list(Exchange.objects.using(_db()).order_by("name"))


@recovers()
def drop_exchange(name: Any, *, cascade: bool = False) -> bool:
    """Remove an exchange; False if there was no such exchange.

    While queues are bound to it this raises ExchangeInUse, unless ``cascade`` is true: then
    the bound queues are dropped too, with their messages (pgpro_queue's cascade). To keep
    the queues, unbind them first. The exchange row is locked for the check, so a binding
    made concurrently either lands before (and is seen) or waits and then fails.
    """
    name = v.name(name, kind="exchange")
    if not isinstance(cascade, bool):
        raise InvalidArgument(f"cascade must be True or False, not {cascade!r}.", field="cascade")
    with transaction.atomic(using=_db()):
        exchange = Exchange.objects.using(_db()).select_for_update().filter(name=name).first()
        if exchange is None:
            return False
        bound = Queue.objects.using(_db()).filter(bindings__exchange=exchange).distinct()
        if not cascade:
            names = sorted(bound.values_list("name", flat=True))
            if names:
                raise ExchangeInUse(
                    f"Exchange {name!r} still has queues bound: {', '.join(names)}; unbind "
                    "them or drop with cascade=True to drop them too.",
                    exchange=name,
                    queues=names,
                )
        else:
            Queue.objects.using(_db()).filter(
                pk__in=list(bound.values_list("pk", flat=True))
            ).delete()
        exchange.delete(using=_db())
    return True


@recovers()
def bind_queue(
    queue: QueueRef, exchange: ExchangeRef, routing_key: str | None = None, *, filters: Any = None
) -> Binding:
    """Route the exchange's messages to the queue.

    ``routing_key`` is a key (direct) or an AMQP pattern (topic); fanout and headers
    exchanges ignore it. ``filters`` (``{"attr": ["v1", "v2"]}``) narrow any type. Binding
    the same queue with the same key again replaces the filters instead of adding a second
    route; a queue bound in several matching ways still gets each message once.
    """
    key = routing.routing_key(routing_key)
    clean = routing.binding_filters(filters)
    x = get_exchange(exchange)
    q = get_queue(queue)
    with transaction.atomic(using=_db()):
        binding = (
            Binding.objects.using(_db())
            .select_for_update()
            .filter(exchange=x, queue=q, routing_key=key)
            .first()
        )
        if binding is None:
            binding = Binding(exchange=x, queue=q, routing_key=key)
        binding.filters = clean
        binding.save(using=_db())
    return binding


@recovers()
def unbind_queue(queue: QueueRef, exchange: ExchangeRef, routing_key: str | None = None) -> int:
    """Stop routing to the queue: one routing key, or every binding when ``routing_key`` is
    None. Returns how many bindings were removed (0 is not an error)."""
    x = get_exchange(exchange)
    q = get_queue(queue)
    found = Binding.objects.using(_db()).filter(exchange=x, queue=q)
    if routing_key is not None:
        found = found.filter(routing_key=routing.routing_key(routing_key))
    deleted, _ = found.delete()
    return deleted


@recovers()
def list_bindings(
    *, exchange: ExchangeRef | None = None, queue: QueueRef | None = None
) -> list[Binding]:
    """Bindings of one exchange, one queue, both, or all, with their exchange and queue."""
    found = Binding.objects.using(_db()).select_related("exchange", "queue")
    if exchange is not None:
        found = found.filter(exchange=get_exchange(exchange))
    if queue is not None:
        found = found.filter(queue=get_queue(queue))
    return list(found.order_by("exchange__name", "queue__name", "routing_key"))


@recovers(has_dedup_id)
def publish(
    exchange: ExchangeRef,
    message: Any,
    *,
    routing_key: str | None = None,
    **send_options: Unpack[SendOptions],
) -> list[int]:
    """Send a copy of ``message`` to every queue the exchange routes it to; returns the ids.

    Accepts :func:`pgq_django.send`'s options (headers, attributes, priority, delay …),
    applied to every copy; header keys starting with ``pgq_`` are reserved and refused. No
    matching binding is not an error: the answer is ``[]``. A body
    larger than any matched queue accepts raises MessageTooLarge, and a matched queue
    holding its ``max_length`` messages raises QueueFull; either way nothing is sent. With a
    ``dedup_id`` each routed queue deduplicates its copy as :func:`pgq_django.send` does: a
    repeat within five minutes adds no copy and answers the first copies' ids.
    """
    name = v.name(exchange, kind="exchange")
    key = routing.routing_key(routing_key)
    v.unreserved_headers(send_options.get("headers"))
    opts = check_send_options(dict(send_options))
    body = v.body(message, send_options.get("headers"))
    size = len(body.encode())
    with telemetry.publishing(name, size, opts) as opts:
        exchange_id, ids, too_large, full = Exchange.objects.db_manager(_db()).publish_body(
            name, body, size=size, routing_key=key, **opts
        )
    if exchange_id is None:
        raise ExchangeNotFound.for_name(name)
    if full is not None:
        raise QueueFull(
            f"Queue {full!r} bound to exchange {name!r} holds its max_length messages; "
            "nothing was published.",
            queue=full,
        )
    if too_large is not None:
        limit = Queue.objects.using(_db()).get(name=too_large).max_message_size
        raise MessageTooLarge(
            f"The message is {size} bytes; queue {too_large!r} bound to exchange {name!r} "
            f"accepts at most {limit}.",
            queue=too_large,
            size=size,
            max_message_size=limit,
        )
    return list(ids)
