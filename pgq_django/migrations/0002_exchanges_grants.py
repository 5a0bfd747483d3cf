"""Exchanges, bindings, grants and access keys.

Bindings and grants point at their queue or exchange through foreign keys that the database
enforces with ON DELETE CASCADE (the models say ``db_constraint=False`` so Django neither
creates nor emulates them): dropping a queue or an exchange, by any route, unbinds it and
removes its grants in the same statement.
"""

import django.core.validators
import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

CASCADES_SQL = """
ALTER TABLE pgq_binding
    ADD CONSTRAINT pgq_binding_exchange_fk FOREIGN KEY (exchange_id)
        REFERENCES pgq_exchange (id) ON DELETE CASCADE,
    ADD CONSTRAINT pgq_binding_queue_fk FOREIGN KEY (queue_id)
        REFERENCES pgq_queue (id) ON DELETE CASCADE;
CREATE INDEX pgq_binding_queue ON pgq_binding (queue_id);
ALTER TABLE pgq_queue_grant
    ADD CONSTRAINT pgq_queue_grant_queue_fk FOREIGN KEY (queue_id)
        REFERENCES pgq_queue (id) ON DELETE CASCADE;
CREATE INDEX pgq_queue_grant_queue ON pgq_queue_grant (queue_id);
ALTER TABLE pgq_exchange_grant
    ADD CONSTRAINT pgq_exchange_grant_exchange_fk FOREIGN KEY (exchange_id)
        REFERENCES pgq_exchange (id) ON DELETE CASCADE;
CREATE INDEX pgq_exchange_grant_exchange ON pgq_exchange_grant (exchange_id);
"""

DROP_CASCADES_SQL = """
ALTER TABLE pgq_binding DROP CONSTRAINT pgq_binding_exchange_fk,
    DROP CONSTRAINT pgq_binding_queue_fk;
DROP INDEX pgq_binding_queue;
ALTER TABLE pgq_queue_grant DROP CONSTRAINT pgq_queue_grant_queue_fk;
DROP INDEX pgq_queue_grant_queue;
ALTER TABLE pgq_exchange_grant DROP CONSTRAINT pgq_exchange_grant_exchange_fk;
DROP INDEX pgq_exchange_grant_exchange;
"""


class Migration(migrations.Migration):
    dependencies = [
        ("auth", "0012_alter_user_first_name_max_length"),
        ("pgq_django", "0001_initial"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="AccessKey",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("key_id", models.CharField(editable=False, max_length=32, unique=True)),
                ("encrypted_secret", models.TextField(editable=False)),
                ("secret_hint", models.CharField(editable=False, max_length=8)),
                ("description", models.CharField(blank=True, default="", max_length=200)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                ("last_used_at", models.DateTimeField(blank=True, editable=False, null=True)),
                ("revoked_at", models.DateTimeField(blank=True, null=True)),
                (
                    "user",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="pgq_access_keys",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            options={
                "db_table": "pgq_access_key",
                "ordering": ["-created_at"],
            },
        ),
        migrations.CreateModel(
            name="Exchange",
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
                        help_text="Same rule as queue names.",
                        max_length=85,
                        unique=True,
                        validators=[
                            django.core.validators.RegexValidator("^[A-Za-z0-9_-]{1,80}(\\.fifo)?$")
                        ],
                    ),
                ),
                (
                    "type",
                    models.CharField(
                        choices=[
                            ("fanout", "fanout"),
                            ("direct", "direct"),
                            ("topic", "topic"),
                            ("headers", "headers"),
                        ],
                        default="fanout",
                        max_length=8,
                    ),
                ),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                (
                    "owner",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="pgq_exchanges",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            options={
                "db_table": "pgq_exchange",
                "ordering": ["name"],
            },
        ),
        migrations.CreateModel(
            name="Binding",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("routing_key", models.CharField(blank=True, default="", max_length=255)),
                ("key_pattern", models.TextField(blank=True, default="", editable=False)),
                ("filters", models.JSONField(blank=True, default=dict)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                (
                    "queue",
                    models.ForeignKey(
                        db_constraint=False,
                        on_delete=django.db.models.deletion.DO_NOTHING,
                        related_name="bindings",
                        to="pgq_django.queue",
                    ),
                ),
                (
                    "exchange",
                    models.ForeignKey(
                        db_constraint=False,
                        on_delete=django.db.models.deletion.DO_NOTHING,
                        related_name="bindings",
                        to="pgq_django.exchange",
                    ),
                ),
            ],
            options={
                "db_table": "pgq_binding",
                "ordering": ["exchange_id", "queue_id", "routing_key"],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("exchange", "queue", "routing_key"), name="pgq_binding_unique_route"
                    )
                ],
            },
        ),
        migrations.CreateModel(
            name="ExchangeGrant",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("can_publish", models.BooleanField(default=True)),
                (
                    "exchange",
                    models.ForeignKey(
                        db_constraint=False,
                        on_delete=django.db.models.deletion.DO_NOTHING,
                        related_name="grants",
                        to="pgq_django.exchange",
                    ),
                ),
                (
                    "group",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="auth.group",
                    ),
                ),
                (
                    "user",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            options={
                "db_table": "pgq_exchange_grant",
                "constraints": [
                    models.CheckConstraint(
                        condition=models.Q(
                            models.Q(("group__isnull", True), ("user__isnull", False)),
                            models.Q(("group__isnull", False), ("user__isnull", True)),
                            _connector="OR",
                        ),
                        name="pgq_exchange_grant_one_grantee",
                    ),
                    models.UniqueConstraint(
                        condition=models.Q(("user__isnull", False)),
                        fields=("exchange", "user"),
                        name="pgq_exchange_grant_user",
                    ),
                    models.UniqueConstraint(
                        condition=models.Q(("group__isnull", False)),
                        fields=("exchange", "group"),
                        name="pgq_exchange_grant_group",
                    ),
                ],
            },
        ),
        migrations.CreateModel(
            name="QueueGrant",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("can_read", models.BooleanField(default=True)),
                ("can_write", models.BooleanField(default=True)),
                ("can_manage", models.BooleanField(default=False)),
                (
                    "group",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="auth.group",
                    ),
                ),
                (
                    "queue",
                    models.ForeignKey(
                        db_constraint=False,
                        on_delete=django.db.models.deletion.DO_NOTHING,
                        related_name="grants",
                        to="pgq_django.queue",
                    ),
                ),
                (
                    "user",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            options={
                "db_table": "pgq_queue_grant",
                "constraints": [
                    models.CheckConstraint(
                        condition=models.Q(
                            models.Q(("group__isnull", True), ("user__isnull", False)),
                            models.Q(("group__isnull", False), ("user__isnull", True)),
                            _connector="OR",
                        ),
                        name="pgq_queue_grant_one_grantee",
                    ),
                    models.UniqueConstraint(
                        condition=models.Q(("user__isnull", False)),
                        fields=("queue", "user"),
                        name="pgq_queue_grant_user",
                    ),
                    models.UniqueConstraint(
                        condition=models.Q(("group__isnull", False)),
                        fields=("queue", "group"),
                        name="pgq_queue_grant_group",
                    ),
                ],
            },
        ),
        migrations.RunSQL(CASCADES_SQL, DROP_CASCADES_SQL),
    ]
