"""Messages and archive rows gain ``last_read_at``, the column PGMQ's message_record carries.

The PGMQ SQL interface (pgq_django.pgmq) sets it on every read it leases and copies it into
the archive. A nullable column without a default: adding it to the partitioned tables
rewrites nothing.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("pgq_django", "0012_queuedashboard")]

    operations = [
        migrations.AddField(
            model_name="message",
            name="last_read_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="archivedmessage",
            name="last_read_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
    ]
