"""SQS's high-throughput FIFO attributes on ``pgq_queue``: ``deduplication_scope`` and
``fifo_throughput_limit``.

Two columns with constant defaults (``db_default``), so adding them rewrites no rows and
existing queues keep SQS's defaults, ``queue`` and ``perQueue``.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("pgq_django", "0015_workflows"),
    ]

    operations = [
        migrations.AddField(
            model_name="queue",
            name="deduplication_scope",
            field=models.CharField(
                choices=[("queue", "queue"), ("messageGroup", "messageGroup")],
                db_default="queue",
                default="queue",
                help_text="FIFO queues: whether an SQS MessageDeduplicationId is unique in the "
                "queue or within its message group (SQS's DeduplicationScope).",
                max_length=12,
            ),
        ),
        migrations.AddField(
            model_name="queue",
            name="fifo_throughput_limit",
            field=models.CharField(
                choices=[("perQueue", "perQueue"), ("perMessageGroupId", "perMessageGroupId")],
                db_default="perQueue",
                default="perQueue",
                help_text="FIFO queues: SQS's FifoThroughputLimit, kept and answered for SQS "
                "clients (pgq_django applies no throughput quota).",
                max_length=17,
            ),
        ),
    ]
