"""Dependencies and groups: ``pgq_workflow_group`` and ``pgq_dependency``.

Two plain tables beside the message tables; nothing on ``pgq_message`` changes, so the
statements of messages outside any workflow are untouched (see
:mod:`pgq_django.store.sql.workflows`).
"""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("pgq_django", "0014_schedules_limits"),
    ]

    operations = [
        migrations.CreateModel(
            name="WorkflowGroup",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("queue_name", models.CharField(max_length=100)),
                ("size", models.PositiveIntegerField()),
                ("then_msg_id", models.BigIntegerField(blank=True, null=True)),
                ("then_queue_name", models.CharField(blank=True, default="", max_length=100)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
            ],
            options={
                "verbose_name": "group",
                "db_table": "pgq_workflow_group",
                "ordering": ["-id"],
            },
        ),
        migrations.CreateModel(
            name="Dependency",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("msg_id", models.BigIntegerField()),
                ("queue_id", models.BigIntegerField(blank=True, null=True)),
                ("dependant_id", models.BigIntegerField(blank=True, null=True)),
                ("outcome", models.CharField(blank=True, max_length=12, null=True)),
                ("finished_at", models.DateTimeField(blank=True, null=True)),
                (
                    "group",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="members",
                        to="pgq_django.workflowgroup",
                    ),
                ),
            ],
            options={
                "verbose_name_plural": "dependencies",
                "db_table": "pgq_dependency",
                "ordering": ["id"],
                "indexes": [
                    models.Index(
                        condition=models.Q(("outcome__isnull", True)),
                        fields=["msg_id"],
                        name="pgq_dependency_open",
                    ),
                    models.Index(fields=["dependant_id"], name="pgq_dependency_dependant"),
                ],
            },
        ),
    ]
