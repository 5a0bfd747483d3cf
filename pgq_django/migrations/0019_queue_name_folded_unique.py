"""One queue per name folded to lower case.

PGMQ folds a queue's name to lower case (its tables, and the PGMQ SQL interface's views,
are ``q_<lower name>``), so queues named ``Orders`` and ``orders`` would be one queue to
its clients, and creating the second could take over the first's views. A unique index on
``lower(name)`` refuses the second, whichever door creates or renames it.

A database that already holds such a pair cannot take the index: the migration stops and
names them, to rename one (``pgq.alter_queue`` cannot rename; the admin or SQL can) before
migrating again.
"""

from django.db import migrations, models
from django.db.models.functions import Lower

REFUSE_COLLISIONS = """
DO $$
DECLARE
    pairs text;
BEGIN
    SELECT string_agg(names, '; ') INTO pairs FROM (
        SELECT string_agg(quote_literal(name), ', ' ORDER BY name) AS names
        FROM pgq_queue GROUP BY lower(name) HAVING count(*) > 1
    ) collisions;
    IF pairs IS NOT NULL THEN
        RAISE EXCEPTION 'queue names that differ only in case: %', pairs
            USING HINT = 'PGMQ clients see them as one queue. Rename all but one of each '
                         'group, then run migrate again.';
    END IF;
END
$$;
"""


class Migration(migrations.Migration):
    dependencies = [("pgq_django", "0018_release_on_ack")]

    operations = [
        migrations.RunSQL(REFUSE_COLLISIONS, migrations.RunSQL.noop),
        migrations.AddConstraint(
            model_name="queue",
            constraint=models.UniqueConstraint(
                Lower("name"),
                name="pgq_queue_name_folded_uniq",
                violation_error_message="A queue of this name, ignoring case, already exists.",
            ),
        ),
    ]
