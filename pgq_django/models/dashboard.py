"""The dashboard's row in the admin index: a proxy of :class:`Queue`, with no table of its own.

Django's admin index lists registered models and nothing else, so the dashboard gets a model
to be listed by: "Dashboard" appears in pgq_django's box on the admin index, beside Queues,
and its list page is the dashboard (:class:`pgq_django.admin.queues.QueueDashboardAdmin`).
"""

from __future__ import annotations

from .queues import Queue


class QueueDashboard(Queue):
    """The queue dashboard as an entry of the admin index; rows are the queues themselves."""

    class Meta:
        proxy = True
        verbose_name = "dashboard"
        verbose_name_plural = "dashboard"
