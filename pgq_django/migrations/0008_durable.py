"""Non-durable (unlogged) queues: ``Queue.durable`` and the second msg_id space.

A range-partitioned table cannot hold logged and unlogged rows of one range, so a
non-durable queue draws its msg_ids from a sequence of its own, starting at
``TRANSIENT_FIRST_ID`` (4 * 10**15, below 2**53 so ids stay exact in JSON), far above
anything the durable sequence reaches (it now stops just below). The ranges of that space
are UNLOGGED partitions of the same ``pgq_message`` (a leaf partition may be unlogged; only
a partitioned table may not), so the primary key, the foreign key, the indexes and every
statement stay as they are. The first range of each table is made here, as 0001 made the
first durable one; upkeep makes the rest (pgq_django.partitions). The archive's ranges of the
second space are logged: an archived message is durable whatever its queue.

Reversing keeps the sequence and the ranges of the second space (owned by the message
table, they go with it when migrating to zero): dropping them would lose archived
messages, and a new sequence would hand out ids that ranges still hold. Messages already
there stay readable; new sends all go to the durable space.
"""

from django.db import migrations, models

TRANSIENT_FIRST_ID = 4 * 10**15
LAST_MSG_ID = 2**53 - 1
FIRST_RANGE_END = TRANSIENT_FIRST_ID + 10_000_000
MESSAGE_FILLFACTOR = 85

FORWARD_SQL = f"""
CREATE SEQUENCE IF NOT EXISTS pgq_message_transient_id_seq AS bigint
    MINVALUE {TRANSIENT_FIRST_ID} MAXVALUE {LAST_MSG_ID} START {TRANSIENT_FIRST_ID};
ALTER SEQUENCE pgq_message_transient_id_seq OWNED BY pgq_message.msg_id;
ALTER SEQUENCE pgq_message_msg_id_seq MAXVALUE {TRANSIENT_FIRST_ID - 1};
CREATE UNLOGGED TABLE IF NOT EXISTS pgq_message_r{TRANSIENT_FIRST_ID} PARTITION OF pgq_message
    FOR VALUES FROM ({TRANSIENT_FIRST_ID}) TO ({FIRST_RANGE_END})
    WITH (fillfactor = {MESSAGE_FILLFACTOR});
CREATE TABLE IF NOT EXISTS pgq_archived_message_r{TRANSIENT_FIRST_ID}
    PARTITION OF pgq_archived_message
    FOR VALUES FROM ({TRANSIENT_FIRST_ID}) TO ({FIRST_RANGE_END});
"""

REVERSE_SQL = "ALTER SEQUENCE pgq_message_msg_id_seq NO MAXVALUE;"


class Migration(migrations.Migration):
    dependencies = [("pgq_django", "0007_spark")]

    operations = [
        migrations.AddField(
            model_name="queue",
            name="durable",
            field=models.BooleanField(
                db_default=True,
                default=True,
                help_text="Whether the queue's live messages are WAL-logged (crash-safe). A "
                "non-durable queue keeps them in UNLOGGED partitions: faster sends and acks, "
                "emptied by a crash. Fixed when the queue is created.",
            ),
        ),
        migrations.RunSQL(FORWARD_SQL, REVERSE_SQL),
    ]
