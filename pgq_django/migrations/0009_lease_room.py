"""Live partitions leave half of each page free, so a batch lease stays a HOT update.

A lease changes only ``vt`` and ``read_ct``, which no index covers, so PostgreSQL can write
the new row version on the same page without touching any index (a HOT update) when the
page has room for it. Migration 0001 set a fillfactor of 85: room for one lease at a time,
but a ``read(qty=100)`` rewrites every row of a page at once, and most of those updates
went to another page, each inserting into the three indexes. With half of each page free
every row of a page fits a second version, and a wide read and its ack cost the server
clearly less (docs/performance.md). The cost is room: a backlog takes twice the pages.

``ALTER TABLE … SET (fillfactor …)`` changes only pages filled from now on and takes a lock
that does not block sends, reads or acks. Ranges made later get it from
``pgq_django.partitions.storage_options``, and upkeep's ``tune_live_partitions`` brings any
range this migration did not see (made by an older upkeep meanwhile) to it.
"""

from django.db import migrations

LIVE_FILLFACTOR = 50
OLD_FILLFACTOR = 85


def _set_fillfactor(value: int) -> str:
    # ``value`` is one of this module's integer constants, never input.
    return f"""
DO $$
DECLARE part regclass;
BEGIN
    FOR part IN SELECT inhrelid::regclass FROM pg_inherits
                WHERE inhparent = 'pgq_message'::regclass
    LOOP
        EXECUTE format('ALTER TABLE %s SET (fillfactor = {value})', part);
    END LOOP;
END
$$;
"""  # noqa: S608


class Migration(migrations.Migration):
    dependencies = [("pgq_django", "0008_durable")]

    operations = [
        migrations.RunSQL(_set_fillfactor(LIVE_FILLFACTOR), _set_fillfactor(OLD_FILLFACTOR)),
    ]
