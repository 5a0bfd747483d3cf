"""Handlers the worker (``manage.py pgq_worker``) runs for the demo queues.

The worker discovers this module by its name in every installed app. Each handler runs
inside ``transaction.atomic()`` together with the acknowledgement of its message, so the
writes below happen exactly once even though delivery is at least once.
"""

from __future__ import annotations

import logging
from typing import Any

from django.utils import timezone

import pgq_django as pgq

from .models import ORDERS_QUEUE, Order

log = logging.getLogger(__name__)


@pgq.handler(ORDERS_QUEUE)
def fulfil_order(message: Any) -> None:
    """Mark the order fulfilled and queue its confirmation e-mail in the same transaction."""
    order_id = message.message["order_id"]
    updated = Order.objects.filter(pk=order_id, status=Order.Status.NEW).update(
        status=Order.Status.FULFILLED, fulfilled_at=timezone.now()
    )
    if updated:
        pgq.send("emails", {"to": f"customer-of-order-{order_id}", "template": "shipped"})
    log.info("order %s fulfilled (msg %s, delivery %s)", order_id, message.msg_id, message.read_ct)


# Many short messages: batch commit runs up to 100 of them in one transaction (each handler
# in its own savepoint) and acknowledges them with one statement (docs/workers.md).
@pgq.handler("emails", batch=100, batch_commit=True)
def send_email(message: Any) -> None:
    """Pretend to send an e-mail; a real project would call its mail backend here."""
    body = message.message
    if isinstance(body, str):  # an XML (or other text) e-mail: headers say which
        log.info("e-mail as %s: %s", message.headers.get("content_type"), body[:80])
    else:
        log.info("e-mail %s to %s", body.get("template"), body.get("to"))


@pgq.handler("payments")
def charge_card(message: Any) -> None:
    """Always fails, so the demo shows retries with backoff and then the dead-letter queue."""
    raise RuntimeError(f"card declined for payment {message.message.get('payment_id')}")


@pgq.handler("events.fifo")
def record_event(message: Any) -> None:
    """Events of one group arrive strictly in order (FIFO queue, one lease per group)."""
    log.info("event %s of %s", message.message.get("seq"), message.message.get("account"))


# A non-durable queue (created with durable=False): its messages skip the WAL, batched here.
@pgq.handler("page-views", batch=100, batch_commit=True)
def count_page_view(message: Any) -> None:
    """Pretend to aggregate a page view; losing a few in a crash is acceptable here."""
    log.info("page view %s (%s ms)", message.message.get("path"), message.message.get("ms"))


@pgq.handler("reports")
def build_report(message: Any) -> dict[str, str]:
    """One step of a report; the next step was sent with ``after=[this step]``, so it runs
    only once this one is acknowledged (docs/workflows.md)."""
    log.info("report %s: %s", message.message.get("report"), message.message.get("step"))
    return {"done": message.message.get("step", "")}


@pgq.periodic("*/30 * * * * *", queue="heartbeat", name="demo-heartbeat")
def heartbeat(message: Any) -> None:
    """A schedule declared with its handler: every 30 seconds the worker leader sends a
    message, stamped with the tick it stands for (docs/workflows.md#schedules)."""
    log.info("heartbeat scheduled at %s", message.headers.get("pgq_scheduled_at"))


@pgq.handler("pricing")
def quote_price(message: Any) -> dict[str, Any]:
    """Answer a request: the return value is the reply ``pgq.request`` receives."""
    items = message.message.get("items", [])
    return {"items": len(items), "total": f"{sum(9.5 for _ in items):.2f}"}
