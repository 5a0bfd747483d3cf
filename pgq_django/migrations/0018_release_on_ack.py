"""An awaited message's dependants are released in the transaction that takes it out of
its queue, whatever took it.

Until now only the worker released dependants as it acknowledged; a message acknowledged
any other way (``pgq.delete``, REST, SQS, the PGMQ functions) left them to the leader's
sweep, and with no worker running they were never released. Two row triggers on
``pgq_message`` fire when a message carrying ``headers["pgq_awaited"]`` is deleted, or
moved to another queue (a dead-letter move), and resolve its waits there. Their ``WHEN``
reads the old row's headers, so a message nothing waits for runs no function.

The trigger function made here does nothing: ``migrate``'s ``post_migrate`` handler
(:func:`pgq_django.api.workflows.install_functions`) replaces it, and makes
``pgq_resolve_waits``, from the statements in ``pgq_django/store/sql/workflows.py`` with
the settings of the day (the notify channel), every time ``migrate`` runs.
"""

from django.db import migrations

FORWARD = """
CREATE FUNCTION pgq_awaited_left() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RETURN NULL;
END
$$;
CREATE TRIGGER pgq_awaited_deleted AFTER DELETE ON pgq_message
    FOR EACH ROW WHEN (OLD.headers ? 'pgq_awaited')
    EXECUTE FUNCTION pgq_awaited_left();
CREATE TRIGGER pgq_awaited_moved AFTER UPDATE OF queue_id ON pgq_message
    FOR EACH ROW WHEN (OLD.headers ? 'pgq_awaited' AND OLD.queue_id IS DISTINCT FROM NEW.queue_id)
    EXECUTE FUNCTION pgq_awaited_left();
"""

BACKWARD = """
DROP TRIGGER pgq_awaited_moved ON pgq_message;
DROP TRIGGER pgq_awaited_deleted ON pgq_message;
DROP FUNCTION pgq_awaited_left();
DROP FUNCTION IF EXISTS pgq_resolve_waits(bigint[], integer, text);
"""


class Migration(migrations.Migration):
    dependencies = [
        ("pgq_django", "0017_schedule_queue_cascade"),
    ]

    operations = [migrations.RunSQL(FORWARD, BACKWARD)]
