"""Named bindings: psqlqueue's subscription ids for the REST API."""

import django.core.validators
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("pgq_django", "0004_security"),
    ]

    operations = [
        migrations.AddField(
            model_name="binding",
            name="name",
            field=models.CharField(
                blank=True,
                help_text="Subscription id (REST); same rule as queue names.",
                max_length=85,
                null=True,
                unique=True,
                validators=[
                    django.core.validators.RegexValidator("^[A-Za-z0-9_-]{1,80}(\\.fifo)?$")
                ],
            ),
        ),
    ]
