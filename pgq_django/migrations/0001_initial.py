"""Queues, and the partitioned message and archive tables.

The message and archive tables are ``PARTITION BY RANGE (msg_id)`` with a default partition
and a first range premade; Django cannot declare partitioning, so they are created by RunSQL
with the equivalent model state. Foreign keys to the queue are real and ``ON DELETE CASCADE``
(the models declare ``db_constraint=False`` so Django neither creates nor emulates them).
"""

import django.core.validators
import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

import pgq_django.models.fields

FIRST_PARTITION_END = 10_000_000
MESSAGE_FILLFACTOR = 85

MESSAGE_COLUMNS_SQL = """
    msg_id bigint NOT NULL DEFAULT nextval('pgq_message_msg_id_seq'::regclass),
    queue_id bigint NOT NULL REFERENCES pgq_queue (id) ON DELETE CASCADE,
    message jsonb NULL,
    headers jsonb NOT NULL DEFAULT '{}'::jsonb,
    attributes jsonb NOT NULL DEFAULT '{}'::jsonb,
    label text NULL,
    priority integer NOT NULL DEFAULT 0,
    read_ct integer NOT NULL DEFAULT 0,
    enqueued_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    vt timestamptz NOT NULL DEFAULT clock_timestamp(),
    expires_at timestamptz NULL,
    group_id text NULL,
    dedup_id text NULL,
    max_retries integer NULL,
    retry_delay double precision NULL,
    cancel_requested boolean NOT NULL DEFAULT false
"""

CREATE_SQL = f"""
CREATE SEQUENCE pgq_message_msg_id_seq AS bigint;

CREATE TABLE pgq_message ({MESSAGE_COLUMNS_SQL},
    PRIMARY KEY (msg_id)
) PARTITION BY RANGE (msg_id);
ALTER SEQUENCE pgq_message_msg_id_seq OWNED BY pgq_message.msg_id;
-- fillfactor leaves room on each page so a lease (which changes only vt and read_ct, neither
-- indexed) is a HOT update that writes no index entry.
CREATE TABLE pgq_message_p0 PARTITION OF pgq_message FOR VALUES FROM (1) TO ({FIRST_PARTITION_END})
    WITH (fillfactor = {MESSAGE_FILLFACTOR});
CREATE TABLE pgq_message_default PARTITION OF pgq_message DEFAULT
    WITH (fillfactor = {MESSAGE_FILLFACTOR});
-- Reads walk this index in delivery order and stop at the first visible rows; metrics count
-- a queue through it too. No index covers vt on purpose: see the fillfactor note above.
CREATE INDEX pgq_message_ready ON pgq_message (queue_id, priority, msg_id);
-- FIFO: the head of each message group.
CREATE INDEX pgq_message_group ON pgq_message (queue_id, group_id, msg_id)
    WHERE group_id IS NOT NULL;
CREATE INDEX pgq_message_expires ON pgq_message (expires_at) WHERE expires_at IS NOT NULL;

CREATE TABLE pgq_archived_message ({MESSAGE_COLUMNS_SQL},
    archived_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    outcome varchar(12) NOT NULL,
    result jsonb NULL,
    error text NULL,
    PRIMARY KEY (msg_id)
) PARTITION BY RANGE (msg_id);
CREATE TABLE pgq_archived_message_p0 PARTITION OF pgq_archived_message
    FOR VALUES FROM (1) TO ({FIRST_PARTITION_END});
CREATE TABLE pgq_archived_message_default PARTITION OF pgq_archived_message DEFAULT;
CREATE INDEX pgq_archived_message_queue ON pgq_archived_message (queue_id, archived_at);
CREATE INDEX pgq_archived_message_archived_at ON pgq_archived_message (archived_at);

ALTER TABLE pgq_queue_counter
    ADD CONSTRAINT pgq_queue_counter_queue_fk FOREIGN KEY (queue_id)
    REFERENCES pgq_queue (id) ON DELETE CASCADE;
CREATE INDEX pgq_queue_counter_queue_kind ON pgq_queue_counter (queue_id, kind);
"""

DROP_SQL = """
DROP TABLE IF EXISTS pgq_archived_message;
DROP TABLE IF EXISTS pgq_message;
ALTER TABLE pgq_queue_counter DROP CONSTRAINT IF EXISTS pgq_queue_counter_queue_fk;
DROP INDEX IF EXISTS pgq_queue_counter_queue_kind;
"""


def _message_fields() -> list[tuple[str, models.Field]]:
    return [
        (
            "msg_id",
            models.BigIntegerField(
                db_default=pgq_django.models.fields.NextMessageId(),
                primary_key=True,
                serialize=False,
            ),
        ),
        ("message", models.JSONField(null=True)),
        ("headers", models.JSONField(default=dict)),
        ("attributes", models.JSONField(default=dict)),
        ("label", models.TextField(blank=True, null=True)),
        ("priority", models.IntegerField(default=0)),
        ("read_ct", models.IntegerField(default=0)),
        ("enqueued_at", models.DateTimeField()),
        ("vt", models.DateTimeField()),
        ("expires_at", models.DateTimeField(blank=True, null=True)),
        ("group_id", models.TextField(blank=True, null=True)),
        ("dedup_id", models.TextField(blank=True, null=True)),
        ("max_retries", models.IntegerField(blank=True, null=True)),
        ("retry_delay", models.FloatField(blank=True, null=True)),
        ("cancel_requested", models.BooleanField(default=False)),
        (
            "queue",
            models.ForeignKey(
                db_constraint=False,
                on_delete=django.db.models.deletion.DO_NOTHING,
                related_name="+",
                to="pgq_django.queue",
            ),
        ),
    ]


class Migration(migrations.Migration):
    initial = True

    dependencies = [migrations.swappable_dependency(settings.AUTH_USER_MODEL)]

    operations = [
        migrations.CreateModel(
            name="Queue",
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
                        help_text="Letters, digits, '-' and '_' (1-80), with an optional '.fifo' suffix.",
                        max_length=85,
                        unique=True,
                        validators=[
                            django.core.validators.RegexValidator("^[A-Za-z0-9_-]{1,80}(\\.fifo)?$")
                        ],
                    ),
                ),
                ("fifo", models.BooleanField(default=False)),
                (
                    "visibility_timeout",
                    models.FloatField(
                        default=30, validators=[django.core.validators.MinValueValidator(0)]
                    ),
                ),
                (
                    "delivery_delay",
                    models.FloatField(
                        default=0, validators=[django.core.validators.MinValueValidator(0)]
                    ),
                ),
                (
                    "retention",
                    models.FloatField(
                        default=1209600, validators=[django.core.validators.MinValueValidator(1)]
                    ),
                ),
                ("max_retries", models.PositiveIntegerField(default=10)),
                (
                    "retry_delay",
                    models.FloatField(
                        default=30, validators=[django.core.validators.MinValueValidator(0)]
                    ),
                ),
                (
                    "backoff",
                    models.CharField(
                        choices=[
                            ("none", "none"),
                            ("linear", "linear"),
                            ("exponential", "exponential"),
                        ],
                        default="exponential",
                        max_length=12,
                    ),
                ),
                (
                    "backoff_cap",
                    models.FloatField(
                        default=3600, validators=[django.core.validators.MinValueValidator(0)]
                    ),
                ),
                ("backoff_jitter", models.BooleanField(default=True)),
                ("max_message_size", models.PositiveIntegerField(default=1048576)),
                ("max_length", models.PositiveBigIntegerField(blank=True, null=True)),
                ("archive_on_ack", models.BooleanField(default=False)),
                ("paused", models.BooleanField(default=False)),
                (
                    "rate_limit",
                    models.FloatField(
                        blank=True,
                        null=True,
                        validators=[django.core.validators.MinValueValidator(0)],
                    ),
                ),
                ("concurrency_limit", models.PositiveIntegerField(blank=True, null=True)),
                (
                    "callback",
                    models.CharField(
                        blank=True,
                        default="",
                        help_text="Dotted path of a function the worker calls for each message.",
                        max_length=255,
                    ),
                ),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                ("updated_at", models.DateTimeField(auto_now=True)),
                (
                    "dead_letter_queue",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="source_queues",
                        to="pgq_django.queue",
                    ),
                ),
                (
                    "owner",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="pgq_queues",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            options={"db_table": "pgq_queue", "ordering": ["name"]},
        ),
        migrations.CreateModel(
            name="QueueCounter",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("kind", models.CharField(max_length=12)),
                ("n", models.BigIntegerField()),
                ("at", models.DateTimeField()),
                (
                    "queue",
                    models.ForeignKey(
                        db_constraint=False,
                        db_index=False,
                        on_delete=django.db.models.deletion.DO_NOTHING,
                        related_name="+",
                        to="pgq_django.queue",
                    ),
                ),
            ],
            options={"db_table": "pgq_queue_counter"},
        ),
        migrations.RunSQL(
            CREATE_SQL,
            DROP_SQL,
            state_operations=[
                migrations.CreateModel(
                    name="Message",
                    fields=_message_fields(),
                    options={
                        "db_table": "pgq_message",
                        "ordering": ["priority", "msg_id"],
                        "managed": True,
                    },
                ),
                migrations.CreateModel(
                    name="ArchivedMessage",
                    fields=[
                        *_message_fields(),
                        ("archived_at", models.DateTimeField()),
                        (
                            "outcome",
                            models.CharField(
                                choices=[
                                    ("acked", "acked"),
                                    ("dead", "dead"),
                                    ("expired", "expired"),
                                    ("cancelled", "cancelled"),
                                    ("archived", "archived"),
                                ],
                                max_length=12,
                            ),
                        ),
                        ("result", models.JSONField(blank=True, null=True)),
                        ("error", models.TextField(blank=True, null=True)),
                    ],
                    options={"db_table": "pgq_archived_message", "ordering": ["msg_id"]},
                ),
            ],
        ),
    ]
