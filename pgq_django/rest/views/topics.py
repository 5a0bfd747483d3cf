"""``/v1/topics`` and ``/v1/subscriptions``: psqlqueue's pub/sub over exchanges and bindings.

A topic is an exchange (fanout unless ``type`` says direct, topic or headers); a
subscription is a named binding of a queue to it, with psqlqueue's ``message_filters`` and
our ``routing_key``.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

import pgq_django as pgq

from ... import access, telemetry
from ...exceptions import PermissionDenied, SubscriptionNotFound
from .. import serializers as s
from ..permissions import (
    require_exchange,
    require_model_permission,
    require_queue,
    visible_exchanges,
    visible_queue_ids,
)
from .base import PgqView, no_content
from .params import page
from .queues import ANY_RIGHT, ERRORS, PAGE


class TopicListView(PgqView):
    @extend_schema(
        operation_id="topics_list", parameters=PAGE, responses={200: s.TopicListOut, **ERRORS}
    )
    def get(self, request: Request) -> Response:
        limit, offset = page(request)
        rows = list(visible_exchanges(request.user)[offset : offset + limit])
        return Response({"data": [s.topic_json(x) for x in rows], "limit": limit, "offset": offset})

    @extend_schema(
        operation_id="topics_create", request=s.TopicIn, responses={201: s.TopicOut, **ERRORS}
    )
    def post(self, request: Request) -> Response:
        data = self.body(request, s.TopicIn)
        require_model_permission(request.user, "add_exchange", "topics")
        exchange = pgq.create_exchange(data["id"], data.get("type", "fanout"), owner=request.user)
        return Response(s.topic_json(exchange), status=201)


class TopicDetailView(PgqView):
    @extend_schema(operation_id="topics_retrieve", responses={200: s.TopicOut, **ERRORS})
    def get(self, request: Request, topic: str) -> Response:
        require_exchange(request.user, ("publish", "manage"), topic)
        return Response(s.topic_json(pgq.get_exchange(topic)))

    @extend_schema(operation_id="topics_destroy", responses={204: None, **ERRORS})
    def delete(self, request: Request, topic: str) -> Response:
        """Drop the topic; 409 while subscriptions remain (delete those first)."""
        require_exchange(request.user, "manage", topic)
        pgq.drop_exchange(topic)
        return no_content()


class TopicMessagesView(PgqView):
    @extend_schema(
        operation_id="topics_publish",
        request=s.PublishIn,
        responses={201: s.PublishedOut, **ERRORS},
    )
    def post(self, request: Request, topic: str) -> Response:
        """Publish: one copy to every subscribed queue whose route and filters match."""
        data = self.body(request, s.PublishIn)
        require_exchange(request.user, "publish", topic)
        body = data.pop("body")
        routing_key = data.pop("routing_key", None)
        with telemetry.continuing(data.pop("traceparent", None), data.pop("tracestate", None)):
            ids = pgq.publish(topic, body, routing_key=routing_key, **data)
        return Response({"ids": ids}, status=201)


class SubscriptionListView(PgqView):
    @extend_schema(
        operation_id="subscriptions_list",
        parameters=PAGE,
        responses={200: s.SubscriptionListOut, **ERRORS},
    )
    def get(self, request: Request) -> Response:
        limit, offset = page(request)
        visible = visible_queue_ids(request.user)
        rows = [b for b in pgq.list_bindings() if b.queue_id in visible]
        data = [s.subscription_json(b) for b in rows[offset : offset + limit]]
        return Response({"data": data, "limit": limit, "offset": offset})

    @extend_schema(
        operation_id="subscriptions_create",
        request=s.SubscriptionIn,
        responses={201: s.SubscriptionOut, **ERRORS},
    )
    def post(self, request: Request) -> Response:
        data = self.body(request, s.SubscriptionIn)
        # Routing a topic into a queue needs both owners' consent: manage on each.
        require_queue(request.user, "manage", data["queue_id"])
        require_exchange(request.user, "manage", data["topic_id"])
        binding = pgq.subscribe(
            data["id"],
            data["topic_id"],
            data["queue_id"],
            routing_key=data.get("routing_key"),
            filters=data.get("message_filters"),
        )
        return Response(s.subscription_json(binding), status=201)


class SubscriptionDetailView(PgqView):
    @extend_schema(
        operation_id="subscriptions_retrieve", responses={200: s.SubscriptionOut, **ERRORS}
    )
    def get(self, request: Request, subscription: str) -> Response:
        binding = subscription_for(request.user, ANY_RIGHT, subscription)
        return Response(s.subscription_json(binding))

    @extend_schema(operation_id="subscriptions_destroy", responses={204: None, **ERRORS})
    def delete(self, request: Request, subscription: str) -> Response:
        subscription_for(request.user, ("manage",), subscription)
        pgq.unsubscribe(subscription)
        return no_content()


def subscription_for(user: Any, rights: tuple[str, ...], subscription: str) -> Any:
    """The subscription, if ``user`` holds one of ``rights`` on its queue.

    A user with no right at all on the queue gets the 404 of a missing subscription; one
    with some right but not these gets a 403 that names the subscription only, never the
    queue it feeds.
    """
    binding = pgq.get_subscription(subscription)
    queue = binding.queue
    if any(access.may(user, r, queue) for r in rights):
        return binding
    if not any(access.may(user, r, queue) for r in access.QUEUE_RIGHTS if r not in rights):
        raise SubscriptionNotFound(
            f"Subscription {subscription!r} does not exist.", subscription=str(subscription)
        )
    raise PermissionDenied(
        f"{user.get_username()} may not {rights[0]} subscription {subscription!r}.",
        right=rights[0],
        kind="subscription",
        target=str(subscription),
    )
