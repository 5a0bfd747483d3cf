"""Security: a dead-lettered message's origin is kept server-side, in its own column.

Redrive used to send a message back to the queue its ``pgq_dead_letter`` header named, a
header any sender could set. ``pgq_message.dead_letter_origin_id`` is written only by the
dead-letter statements and is what redrive reads now. No foreign key (like the counters): a
dropped origin simply no longer matches, and dropping a queue need not scan the messages.

Messages already in a dead-letter queue get their origin from the header, but only where the
named queue really dead-letters into the queue holding the message, so a forged header made
before this migration cannot pick an arbitrary destination either.
"""

import django.db.models.deletion
from django.db import migrations, models

FORWARD_SQL = """
ALTER TABLE pgq_message ADD COLUMN dead_letter_origin_id bigint NULL;
UPDATE pgq_message m SET dead_letter_origin_id = origin.id
FROM pgq_queue origin
WHERE m.headers ? 'pgq_dead_letter'
  AND origin.name = m.headers -> 'pgq_dead_letter' ->> 'original_queue'
  AND origin.dead_letter_queue_id = m.queue_id;
"""

REVERSE_SQL = "ALTER TABLE pgq_message DROP COLUMN dead_letter_origin_id;"


class Migration(migrations.Migration):
    dependencies = [("pgq_django", "0003_delivery")]

    operations = [
        migrations.RunSQL(
            FORWARD_SQL,
            REVERSE_SQL,
            state_operations=[
                migrations.AddField(
                    model_name="message",
                    name="dead_letter_origin",
                    field=models.ForeignKey(
                        blank=True,
                        db_constraint=False,
                        db_index=False,
                        null=True,
                        on_delete=django.db.models.deletion.DO_NOTHING,
                        related_name="+",
                        to="pgq_django.queue",
                    ),
                ),
            ],
        ),
    ]
