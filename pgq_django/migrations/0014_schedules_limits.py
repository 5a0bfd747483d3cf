"""Periodic schedules (``pgq_schedule``) and the per-queue limit rows (``pgq_queue_limit``).

``pgq_queue_limit`` has no model: only the limited lease statements read and write it
(:mod:`pgq_django.store.sql.limits`). A queue with a rate or concurrency limit gets its row
on its first limited lease; the row holds the token bucket (``tokens`` as of
``refreshed_at``) and the leases currently counted against the concurrency limit. No
foreign key, as the message tables have none (migration 0011): a dropped queue's row is
never read again, since queue ids are never reused, and the statements find it by the id
of the queue they found by name.
"""

import django.db.models.deletion
from django.db import migrations, models

LIMIT_TABLE = """
CREATE TABLE pgq_queue_limit (
    queue_id bigint PRIMARY KEY,
    tokens double precision NOT NULL,
    refreshed_at timestamptz NOT NULL,
    held_ids bigint[] NOT NULL DEFAULT '{}',
    held_cts integer[] NOT NULL DEFAULT '{}'
)
"""


class Migration(migrations.Migration):
    dependencies = [
        ("pgq_django", "0013_message_last_read_at"),
    ]

    operations = [
        migrations.CreateModel(
            name="Schedule",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "name",
                    models.CharField(
                        help_text="The schedule's own name: pgq.schedule() with the same name "
                        "updates it.",
                        max_length=200,
                        unique=True,
                    ),
                ),
                (
                    "cron",
                    models.CharField(
                        help_text="A cron expression: five fields (minute hour day month "
                        "weekday), or six with seconds first.",
                        max_length=120,
                    ),
                ),
                (
                    "message",
                    models.JSONField(blank=True, help_text="The body of each message.", null=True),
                ),
                (
                    "headers",
                    models.JSONField(
                        blank=True,
                        default=dict,
                        help_text="Headers of each message (no pgq_ keys).",
                    ),
                ),
                (
                    "timezone",
                    models.CharField(
                        default="UTC",
                        help_text="The IANA time zone the cron fields are read in.",
                        max_length=64,
                    ),
                ),
                (
                    "catch_up",
                    models.BooleanField(
                        default=False,
                        help_text="Send every missed tick after downtime, instead of one for "
                        "all of them.",
                    ),
                ),
                (
                    "last_tick",
                    models.DateTimeField(
                        blank=True,
                        help_text="The latest tick enqueued (or the creation time).",
                        null=True,
                    ),
                ),
                (
                    "next_tick",
                    models.DateTimeField(db_index=True, help_text="The next tick to enqueue."),
                ),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                ("updated_at", models.DateTimeField(auto_now=True)),
                (
                    "queue",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="schedules",
                        to="pgq_django.queue",
                    ),
                ),
            ],
            options={
                "db_table": "pgq_schedule",
                "ordering": ["name"],
            },
        ),
        migrations.RunSQL(LIMIT_TABLE, "DROP TABLE pgq_queue_limit"),
    ]
