"""Reads are planned on the queue's index however few queues a project has.

A read finds a queue's oldest visible messages through the ``(queue_id, priority, msg_id)``
index. The queue's id is looked up by name in the same statement, so the planner only knows
it as "some queue_id" and estimates that queue's rows as the partition's rows divided by the
number of distinct queue_ids ANALYZE saw. A project with one to five queues measures 1 to 5:
every row looks like this queue's, and a read of a partition holding a few thousand messages
was planned as a scan of the whole partition and a sort, many times slower than the
index walk (docs/performance.md). Setting ``n_distinct`` on the live partitions'
``queue_id`` tells the planner to expect many queues
(``pgq_django.partitions.QUEUE_ID_DISTINCT``); upkeep gives ranges it makes the same
setting, and ``tune_live_partitions`` any range this did not see.
The DEFAULT partition is left as it is: it holds rows only when ids outrun the ranges, and
then its plans are best made from what ANALYZE measures.

The setting takes effect at a partition's next ANALYZE, which this migration runs on each
live range (it samples at most 30,000 rows of each, and takes no lock that blocks
sends, reads or acks).
"""

from django.db import migrations

QUEUE_ID_DISTINCT = 1000


def _each_live_partition(action: str) -> str:
    return f"""
DO $$
DECLARE part regclass;
BEGIN
    FOR part IN SELECT i.inhrelid::regclass FROM pg_inherits i
                JOIN pg_class c ON c.oid = i.inhrelid
                WHERE i.inhparent = 'pgq_message'::regclass
                  AND pg_get_expr(c.relpartbound, c.oid) <> 'DEFAULT'
    LOOP
        {action}
    END LOOP;
END
$$;
"""  # noqa: S608 (``action`` is one of the two constant statements below)


FORWARD = _each_live_partition(
    "EXECUTE format('ALTER TABLE %s ALTER COLUMN queue_id SET (n_distinct = "
    f"{QUEUE_ID_DISTINCT})', part); EXECUTE format('ANALYZE %s', part);"
)
REVERSE = _each_live_partition(
    "EXECUTE format('ALTER TABLE %s ALTER COLUMN queue_id RESET (n_distinct)', part);"
)


class Migration(migrations.Migration):
    dependencies = [("pgq_django", "0009_lease_room")]

    operations = [migrations.RunSQL(FORWARD, REVERSE)]
