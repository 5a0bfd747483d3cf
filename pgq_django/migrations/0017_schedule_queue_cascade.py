"""A schedule goes with its queue in the database too, not only through the ORM.

Django's ``on_delete=CASCADE`` on ``Schedule.queue`` runs in Python, so ``drop_queue`` and
the admin removed a queue's schedules, but a raw ``DELETE FROM pgq_queue`` (or PGMQ's
``pgmq.drop_queue``, which deletes the row) failed on the schedule's foreign key. The key is
made again with ``ON DELETE CASCADE``, as the grant and binding keys have it. The model's
state does not change.
"""

from django.db import migrations

FORWARD = """
DO $$
DECLARE
    old_name text;
BEGIN
    SELECT conname INTO old_name FROM pg_constraint
    WHERE conrelid = 'pgq_schedule'::regclass AND contype = 'f'
      AND confrelid = 'pgq_queue'::regclass;
    EXECUTE format('ALTER TABLE pgq_schedule DROP CONSTRAINT %I', old_name);
END
$$;
ALTER TABLE pgq_schedule ADD CONSTRAINT pgq_schedule_queue_fk
    FOREIGN KEY (queue_id) REFERENCES pgq_queue (id) ON DELETE CASCADE
    DEFERRABLE INITIALLY DEFERRED;
"""

BACKWARD = """
ALTER TABLE pgq_schedule DROP CONSTRAINT pgq_schedule_queue_fk;
ALTER TABLE pgq_schedule ADD CONSTRAINT pgq_schedule_queue_id_fk_pgq_queue_id
    FOREIGN KEY (queue_id) REFERENCES pgq_queue (id) DEFERRABLE INITIALLY DEFERRED;
"""


class Migration(migrations.Migration):
    dependencies = [
        ("pgq_django", "0016_queue_sqs_high_throughput"),
    ]

    operations = [migrations.RunSQL(FORWARD, BACKWARD)]
