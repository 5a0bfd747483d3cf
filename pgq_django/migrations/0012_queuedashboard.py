"""The dashboard's entry in the admin index: a proxy model of Queue, so no table changes.

Only Django's state and the proxy's content type and permissions are added; the admin lists
"Dashboard" beside Queues and its list page opens the dashboard.
"""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("pgq_django", "0011_queue_rows_without_key"),
    ]

    operations = [
        migrations.CreateModel(
            name="QueueDashboard",
            fields=[],
            options={
                "verbose_name": "dashboard",
                "verbose_name_plural": "dashboard",
                "proxy": True,
                "indexes": [],
                "constraints": [],
            },
            bases=("pgq_django.queue",),
        ),
    ]
