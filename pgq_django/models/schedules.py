"""Periodic schedules: a cron expression that puts a message on a queue at each tick.

The worker leader enqueues the due ticks (:func:`pgq_django.api.schedules.enqueue_due`):
``last_tick`` is the latest tick already sent and ``next_tick`` the first one still to come,
both written in the same transaction as the sends, so a tick is never sent twice and never
skipped by a restart or a change of leader.
"""

from __future__ import annotations

from django.db import models

from ..store.managers.schedules import ScheduleManager
from .queues import Queue


class Schedule(models.Model):
    """A named cron schedule for one queue (see :func:`pgq_django.schedule`)."""

    name = models.CharField(
        max_length=200,
        unique=True,
        help_text="The schedule's own name: pgq.schedule() with the same name updates it.",
    )
    cron = models.CharField(
        max_length=120,
        help_text="A cron expression: five fields (minute hour day month weekday), or six "
        "with seconds first.",
    )
    queue = models.ForeignKey(Queue, on_delete=models.CASCADE, related_name="schedules")
    message = models.JSONField(null=True, blank=True, help_text="The body of each message.")
    headers = models.JSONField(
        default=dict, blank=True, help_text="Headers of each message (no pgq_ keys)."
    )
    timezone = models.CharField(
        max_length=64, default="UTC", help_text="The IANA time zone the cron fields are read in."
    )
    catch_up = models.BooleanField(
        default=False,
        help_text="Send every missed tick after downtime, instead of one for all of them.",
    )
    last_tick = models.DateTimeField(
        null=True, blank=True, help_text="The latest tick enqueued (or the creation time)."
    )
    next_tick = models.DateTimeField(db_index=True, help_text="The next tick to enqueue.")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = ScheduleManager()

    class Meta:
        app_label = "pgq_django"
        db_table = "pgq_schedule"
        ordering = ["name"]

    def __str__(self) -> str:
        return f"{self.name} ({self.cron} → {self.queue_id})"
