"""The Django admin for queues, exchanges, grants and access keys.

A thin translator over the functional API: every change goes through ``pgq_django`` functions
and every decision about who may do what through :mod:`pgq_django.access`. Staff users see
only the queues and exchanges they hold a grant on (or own); superusers see everything.
Messages are browsed with plain SELECTs, never leased, so looking does not disturb consumers.
"""

from __future__ import annotations

from . import (  # noqa: F401  (each registers its ModelAdmin)
    access_keys,
    dashboard_entry,
    exchanges,
    queues,
    schedules,
    workflows,
)
from .common import visible_queues

__all__ = ["visible_queues"]
