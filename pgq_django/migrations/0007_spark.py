"""The record of Spark exports (pgq_spark export), which archive retention can consult."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("pgq_django", "0006_sqs")]

    operations = [
        migrations.CreateModel(
            name="SparkExport",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                ("since", models.DateTimeField(blank=True, null=True)),
                ("until", models.DateTimeField()),
                ("path", models.TextField()),
                ("rows", models.BigIntegerField()),
                ("min_msg_id", models.BigIntegerField(blank=True, null=True)),
                ("max_msg_id", models.BigIntegerField(blank=True, null=True)),
            ],
            options={"db_table": "pgq_spark_export", "ordering": ["-created_at"]},
        ),
    ]
