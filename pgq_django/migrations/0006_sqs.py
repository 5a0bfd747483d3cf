"""SQS queue settings: content-based deduplication, receive wait time and tags.

They belong to a queue (SQS's CreateQueue and SetQueueAttributes set them) but mean nothing
to the rest of pgq_django. Database defaults equal the model defaults, so existing queues
and rows inserted by hand keep their behaviour.
"""

import django.core.validators
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("pgq_django", "0005_rest"),
    ]

    operations = [
        migrations.AddField(
            model_name="queue",
            name="content_based_deduplication",
            field=models.BooleanField(
                db_default=False,
                default=False,
                help_text="FIFO queues: deduplicate SQS sends without a MessageDeduplicationId by the SHA-256 of their body.",
            ),
        ),
        migrations.AddField(
            model_name="queue",
            name="receive_wait_time",
            field=models.FloatField(
                db_default=0,
                default=0,
                help_text="Seconds an SQS ReceiveMessage waits when it does not say (long polling).",
                validators=[django.core.validators.MinValueValidator(0)],
            ),
        ),
        migrations.AddField(
            model_name="queue",
            name="tags",
            field=models.JSONField(
                blank=True, db_default={}, default=dict, help_text="Key/value labels (SQS tags)."
            ),
        ),
    ]
