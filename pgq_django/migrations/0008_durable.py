"""Non-durable (unlogged) queues: ``Queue.durable`` and the second msg_id space.

A range-partitioned table cannot hold logged and unlogged rows of one range, so a
non-durable queue draws its msg_ids from a sequence of its own, starting at
``TRANSIENT_FIRST_ID`` (4 * 10**15, below 2**53 so ids stay exact in JSON), far above
anything the durable sequence reaches (it now stops just below). The ranges of that space
are UNLOGGED partitions of the same ``pgq_message`` (a leaf partition may be unlogged; only
a partitioned table may not), so the primary key, the foreign key, the indexes and every
statement stay as they are. No range is made here: ``create_queue(durable=False)`` makes the
first ones and upkeep the rest (pgq_django.partitions), so a project that never makes a
non-durable queue has no UNLOGGED table (a hot standby refuses to open one, which would fail
every query of ``pgq_message`` there that is not pruned to durable ranges).

Reversing keeps the sequence (owned by the message table, it goes with it when migrating to
zero) and any range of the second space: dropping them would lose archived messages, and a
new sequence would hand out ids that ranges still hold. Messages already there stay
readable; new sends all go to the durable space.
"""

from django.db import migrations, models

TRANSIENT_FIRST_ID = 4 * 10**15
LAST_MSG_ID = 2**53 - 1

FORWARD_SQL = f"""
CREATE SEQUENCE IF NOT EXISTS pgq_message_transient_id_seq AS bigint
    MINVALUE {TRANSIENT_FIRST_ID} MAXVALUE {LAST_MSG_ID} START {TRANSIENT_FIRST_ID};
ALTER SEQUENCE pgq_message_transient_id_seq OWNED BY pgq_message.msg_id;
ALTER SEQUENCE pgq_message_msg_id_seq MAXVALUE {TRANSIENT_FIRST_ID - 1};
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
