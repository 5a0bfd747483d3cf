"""Demo queues and traffic, so the admin and the worker have something to show.

``seed_queues()`` creates the demo queues if they are missing, and the demo's daily digest
schedule (it is safe to run twice);
``seed_traffic()`` sends a burst of messages that exercises the main features: transactional
enqueue, priorities, delays, labels and headers, a FIFO queue with groups, a non-durable
queue, and a queue whose failures end in its dead-letter queue.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from django.db import connection, transaction

import pgq_django as pgq
from pgq_django.conf import settings as pgq_settings

from .models import place_order

# name -> create_queue() options, in creation order (a dead-letter queue before its source).
DEMO_QUEUES: dict[str, dict[str, Any]] = {
    # Acked orders stay in the archive, so the admin can show what the worker completed.
    "orders": {"visibility_timeout": 30, "archive_on_ack": True},
    # The mail provider takes at most 20 messages a second, from all workers together.
    "emails": {"archive_on_ack": True, "rate_limit": 20},
    "events.fifo": {},
    # Page views are cheap to lose and many: a non-durable (unlogged) queue writes no WAL for
    # them, and a crash of PostgreSQL empties it (every other queue keeps its messages).
    "page-views": {"durable": False},
    # Workflows (docs/workflows.md): a report built in three steps, each waiting for the one
    # before it, and a pricing service answering requests.
    # Reports are heavy: one is built at a time, however many workers run.
    "reports": {"archive_on_ack": True, "concurrency_limit": 1},
    "pricing": {},
    # Sent to by a schedule every 30 seconds (@pgq.periodic in pgq_handlers.py).
    "heartbeat": {},
    "payments-dlq": {"retention": 30 * 24 * 3600},
    "payments": {
        "dead_letter_queue": "payments-dlq",
        "max_retries": 2,
        "retry_delay": 2,
        "backoff": "linear",
    },
}


def seed_queues(log: Callable[[str], Any] = print) -> list[str]:
    """Create the demo queues that do not exist yet; returns the names created."""
    created = []
    for name, options in DEMO_QUEUES.items():
        try:
            pgq.create_queue(name, **options)
        except pgq.QueueAlreadyExists:
            continue
        created.append(name)
        log(f"created queue {name}")
    # A schedule (docs/workflows.md#schedules): the worker leader sends it each morning.
    pgq.schedule(
        "emails-daily-digest",
        "0 7 * * *",
        "emails",
        {"to": "team@example.com", "template": "digest"},
        timezone="Europe/Paris",
    )
    return created


class _RolledBack(Exception):
    """Raised on purpose to roll back a demo order."""


def seed_traffic(log: Callable[[str], Any] = print) -> dict[str, int]:
    """Send demo messages to every demo queue; returns how many each queue got."""
    sent: dict[str, int] = {}

    def count(queue: str, n: int = 1) -> None:
        sent[queue] = sent.get(queue, 0) + n

    for customer, item, qty in [
        ("ada", "keyboard", 1),
        ("grace", "monitor", 2),
        ("linus", "penguin plush", 3),
        ("barbara", "notebook", 5),
    ]:
        place_order(customer, item, qty)
        count("orders")

    # An order whose transaction rolls back leaves neither the order nor its message behind.
    try:
        with transaction.atomic():
            place_order("mallory", "stolen goods")
            raise _RolledBack
    except _RolledBack:
        log("rolled back an order: no Order row and no message were committed")

    pgq.send_batch(
        "emails",
        [{"to": f"user{i}@example.com", "template": "welcome"} for i in range(5)],
        headers={"content_type": "application/json"},
    )
    count("emails", 5)
    pgq.send("emails", {"to": "ops@example.com", "template": "alert"}, priority=-10)
    count("emails")
    pgq.send(
        "emails",
        "<mail><to>xml@example.com</to></mail>",
        headers={"content_type": "application/xml"},
    )
    count("emails")
    pgq.send("emails", {"to": "later@example.com", "template": "digest"}, delay=60)
    count("emails")

    for account in ("acct-1", "acct-2"):
        for seq in range(1, 4):
            pgq.send("events.fifo", {"account": account, "seq": seq}, group=account)
            count("events.fifo")

    pgq.send_batch("page-views", [{"path": f"/products/{n}", "ms": 40 + n} for n in range(20)])
    count("page-views", 20)

    # PGMQ's SQL functions reach the same queues (settings: PGQ["PGMQ_SCHEMA"]): what any
    # PGMQ client, in any language, would send; the worker handles it like the rest.
    if pgq_settings.PGMQ_SCHEMA:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT * FROM pgmq.send(%s::text, %s::jsonb)",
                ["page-views", json.dumps({"path": "/from-pgmq", "ms": 1})],
            )
        count("page-views")
        log("sent a page view through pgmq.send (the PGMQ SQL interface)")

    # A chain: each step stays invisible until the step before it is acknowledged.
    previous: list[int] = []
    for name in ("extract", "transform", "publish"):
        body = {"report": "monthly", "step": name}
        previous = [pgq.send("reports", body, after=previous or None)]
        count("reports")
    log("sent a three-step report chain (python manage.py pgq_quote asks the pricing service)")

    for payment_id in range(1, 4):
        pgq.send(
            "payments",
            {"payment_id": payment_id, "amount": "12.50"},
            attributes={"currency": "EUR"},
        )
        count("payments")
    # Fail one payment past its retries right away, so the dead-letter queue is not empty.
    _fail_until_dead("payments")

    # A django.tasks task, stored in the tasks_default queue and run by the worker.
    from .models import Order
    from .tasks import send_order_summary

    first_order = Order.objects.order_by("pk").first()
    if first_order is not None:
        task = send_order_summary.enqueue(first_order.pk)
        log(f"enqueued task send_order_summary as {task.id}")
        count("tasks_default")

    for queue, n in sent.items():
        log(f"sent {n} message(s) to {queue}")
    return sent


def _fail_until_dead(queue: str) -> None:
    """Lease and nack the head message of ``queue`` until its retries are spent.

    Each nack with ``delay=0`` makes it visible again at once, and it stays at the head of
    the queue (same priority, lowest msg_id), so the next read gets it back. Once its read
    count exceeds the queue's max_retries the nack moves it to the dead-letter queue.
    """
    for _ in range(50):
        leased = pgq.read(queue, qty=1)
        if not leased:
            return
        pgq.nack(queue, leased[0].receipt, delay=0, error="demo: card declined")
        if pgq.read_by_id(queue, leased[0].msg_id) is None:
            return


# -- exchanges (added with the exchanges feature; separate from the queue seeds above) --------

# name -> (type, [(queue, routing key or None, filters or None), ...])
DEMO_EXCHANGES: dict[str, tuple[str, list[tuple[str, str | None, dict[str, Any] | None]]]] = {
    "shop-events": ("topic", [("orders", "order.#", None), ("emails", "order.created", None)]),
    "broadcast": ("fanout", [("orders", None, None), ("emails", None, None)]),
    "payments-eu": ("headers", [("payments", None, {"currency": ["EUR"]})]),
}


def seed_exchanges(log: Callable[[str], Any] = print) -> list[str]:
    """Create the demo exchanges and bind the demo queues (run seed_queues() first).

    Safe to run twice: existing exchanges are kept and binding again is idempotent.
    """
    created = []
    for name, (kind, bindings) in DEMO_EXCHANGES.items():
        try:
            pgq.create_exchange(name, kind)
        except pgq.ExchangeAlreadyExists:
            pass
        else:
            created.append(name)
            log(f"created {kind} exchange {name}")
        for queue, key, filters in bindings:
            pgq.bind_queue(queue, name, key, filters=filters)
    return created
