"""A demo django.tasks task, run by ``pgq_worker`` through ``pgq_django.tasks.PgqBackend``.

It needs ``TASKS = {"default": {"BACKEND": "pgq_django.tasks.PgqBackend"}}`` in settings;
``send_order_summary.enqueue(order_id)`` then stores it in the ``tasks_default`` queue and
``send_order_summary.get_result(result.id)`` reports READY, RUNNING and SUCCESSFUL with the
return value below.
"""

from __future__ import annotations

try:  # Django 6
    from django.tasks import task
except ImportError:  # Django 5.2 with the django-tasks backport
    from django_tasks import task

from .models import Order


@task(priority=5)
def send_order_summary(order_id: int) -> dict[str, object]:
    """Summarise an order; the return value is kept as the task's result."""
    order = Order.objects.get(pk=order_id)
    return {"order": order.pk, "status": order.status}
