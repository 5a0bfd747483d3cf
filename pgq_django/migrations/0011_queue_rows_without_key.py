"""Messages, archive rows and counter rows no longer carry a foreign key to their queue.

Why. A foreign key check share-locks the referenced row: every send, every archival (archive
on ack, expiry, dead-lettering) and every counter row (a send or ack inside a transaction
counts in its statement) locked its queue's row. Each lock writes a WAL record and dirties
the queue's page, and when several transactions hold it at once PostgreSQL has to record them
together as a MultiXact, rewritten by each new locker. Processes sending to one queue
contended for that lock; without the keys they do not (docs/performance.md, "What the
numbers rest on").

What a drop does instead. The keys' ``ON DELETE CASCADE`` is replaced by a trigger on
``pgq_queue`` that deletes the queue's messages, archive rows and counter rows in the
dropping statement, so ``drop_queue``, the admin and a raw ``DELETE FROM pgq_queue`` still
take everything with the queue in one transaction. The keys also made a statement that raced
a drop wait for it and fail, and a drop under REPEATABLE READ fail with a serialization error
when a send committed after its snapshot. Without them such a statement commits rows of a
queue that no longer exists: nothing finds them (every statement finds its queue by name, and
a queue made again under the same name has a new id), and upkeep deletes them by the dropped
id the trigger records in ``pgq_dropped_queue`` (kept for a day). Ids are never reused, so an
old id cannot name a new queue.

Reversing deletes rows without a queue and puts the keys back (it scans the three tables).
"""

from django.db import migrations, models

FORWARD = """
ALTER TABLE pgq_message DROP CONSTRAINT pgq_message_queue_id_fkey;
ALTER TABLE pgq_archived_message DROP CONSTRAINT pgq_archived_message_queue_id_fkey;
ALTER TABLE pgq_queue_counter DROP CONSTRAINT pgq_queue_counter_queue_fk;

CREATE FUNCTION pgq_queue_dropped() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM pgq_message WHERE queue_id = OLD.id;
    DELETE FROM pgq_archived_message WHERE queue_id = OLD.id;
    DELETE FROM pgq_queue_counter WHERE queue_id = OLD.id;
    INSERT INTO pgq_dropped_queue (queue_id, dropped_at) VALUES (OLD.id, clock_timestamp())
        ON CONFLICT (queue_id) DO NOTHING;
    RETURN NULL;
END
$$;
CREATE TRIGGER pgq_queue_dropped AFTER DELETE ON pgq_queue
    FOR EACH ROW EXECUTE FUNCTION pgq_queue_dropped();
"""

REVERSE = """
DROP TRIGGER pgq_queue_dropped ON pgq_queue;
DROP FUNCTION pgq_queue_dropped();
DELETE FROM pgq_message m WHERE NOT EXISTS (SELECT 1 FROM pgq_queue q WHERE q.id = m.queue_id);
DELETE FROM pgq_archived_message a
    WHERE NOT EXISTS (SELECT 1 FROM pgq_queue q WHERE q.id = a.queue_id);
DELETE FROM pgq_queue_counter c WHERE NOT EXISTS (SELECT 1 FROM pgq_queue q WHERE q.id = c.queue_id);
ALTER TABLE pgq_message ADD CONSTRAINT pgq_message_queue_id_fkey
    FOREIGN KEY (queue_id) REFERENCES pgq_queue (id) ON DELETE CASCADE;
ALTER TABLE pgq_archived_message ADD CONSTRAINT pgq_archived_message_queue_id_fkey
    FOREIGN KEY (queue_id) REFERENCES pgq_queue (id) ON DELETE CASCADE;
ALTER TABLE pgq_queue_counter ADD CONSTRAINT pgq_queue_counter_queue_fk
    FOREIGN KEY (queue_id) REFERENCES pgq_queue (id) ON DELETE CASCADE;
"""


class Migration(migrations.Migration):
    dependencies = [("pgq_django", "0010_queue_plans")]

    operations = [
        migrations.CreateModel(
            name="DroppedQueue",
            fields=[
                ("queue_id", models.BigIntegerField(primary_key=True, serialize=False)),
                ("dropped_at", models.DateTimeField()),
            ],
            options={"db_table": "pgq_dropped_queue"},
        ),
        migrations.RunSQL(FORWARD, REVERSE),
    ]
