"""The demo shop's one model, and the function that shows transactional enqueue.

An order and the message announcing it are written in the same ``transaction.atomic()``:
if anything fails before the commit, neither exists; once it commits, both do. No outbox
table and no second system are needed because the queue lives in the same PostgreSQL.
"""

from __future__ import annotations

from decimal import Decimal

from django.db import models, transaction

import pgq_django as pgq

ORDERS_QUEUE = "orders"


class Order(models.Model):
    class Status(models.TextChoices):
        NEW = "new", "new"
        FULFILLED = "fulfilled", "fulfilled"

    customer = models.CharField(max_length=100)
    item = models.CharField(max_length=100)
    quantity = models.PositiveIntegerField(default=1)
    total = models.DecimalField(max_digits=10, decimal_places=2)
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.NEW)
    # The id of the message that announced this order, so the admin can link the two.
    msg_id = models.BigIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    fulfilled_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"Order #{self.pk}: {self.quantity} x {self.item} for {self.customer}"


def place_order(customer: str, item: str, quantity: int = 1, *, unit_price: str = "9.99") -> Order:
    """Create an order and enqueue its fulfilment in one transaction.

    The message is sent inside the same ``transaction.atomic()`` as the INSERT of the order,
    so a consumer can never see a message for an order that was rolled back, and an order is
    never committed without its message.
    """
    with transaction.atomic():
        order = Order.objects.create(
            customer=customer,
            item=item,
            quantity=quantity,
            total=Decimal(unit_price) * quantity,
        )
        order.msg_id = pgq.send(
            ORDERS_QUEUE,
            {"order_id": order.pk, "item": item, "quantity": quantity},
            headers={"event": "order_placed"},
            label="order",
        )
        order.save(update_fields=["msg_id"])
    return order
