"""Dependencies and groups: holding a message until the messages it waits for are acknowledged.

A dependant is an ordinary message whose ``vt`` is pushed to the far future (:data:`_HELD`),
so no lease sees it; its waits are rows of ``pgq_dependency``. When an awaited message leaves
its queue its waits get its outcome (_RESOLVE), and a dependant whose waits are all
acknowledged is made visible and its queue woken (_RELEASE), or, if one failed, dead-lettered
with the reason (_FAIL_DEPENDANT). These run together in one server function,
``pgq_resolve_waits`` (CREATE_RESOLVE_FUNCTION), which two triggers on ``pgq_message`` call
when an awaited message (``headers["pgq_awaited"]``) is deleted or moved to another queue:
the acknowledgement releases its dependants in its own transaction whichever door it came
through, and a plain ack, whose message carries no such header, runs none of it (the
triggers' ``WHEN`` reads the deleted row's headers and goes no further). The leader's
``workflows`` duty calls the same function for any open wait, as a safety net.
Run by :class:`pgq_django.store.managers.workflows.WorkflowManager`.
"""

from __future__ import annotations

import textwrap

from psycopg.sql import SQL

from .fragments import (
    M_COLS,
    MSG_ID_SEQUENCE,
    TRANSIENT_FIRST_ID,
    TRANSIENT_MSG_ID_SEQUENCE,
    archive_rows,
    count_one,
    counted,
    dead_letter_set,
)

# The visibility of a held message: later than any lease, still a date Python can read.
_HELD = "'9999-01-01 00:00:00+00'::timestamptz"
# A message visible this late or later is held (a margin below _HELD: a held row whose
# clocks were moved, as tests do to make time pass, is still held).
_HELD_SINCE = "'9000-01-01 00:00:00+00'::timestamptz"

# Outcomes of an awaited message that let its dependants go on.
_SUCCEEDED = "('acked', 'archived')"

# -- await -- Record that %(dependant)s (a message sent in this transaction, or NULL) and/or
# group %(group)s waits for each message of %(ids)s, hold the dependant invisible, and mark
# the awaited messages still in a queue with headers["pgq_awaited"] so whoever acknowledges
# them knows to resolve their waits. An id not issued yet by its id space's sequence (so no
# message can have it), or the dependant's own id, is refused: nothing is written and
# ``refused`` lists them. A dependant can only wait for older messages, so no cycle forms.
AWAIT = f"""
WITH awaited AS (
    SELECT a.id, m.queue_id,
           m.msg_id IS NOT NULL
           OR a.id <= CASE WHEN a.id < {TRANSIENT_FIRST_ID}
                           THEN (SELECT last_value FROM {MSG_ID_SEQUENCE})
                           ELSE (SELECT last_value FROM {TRANSIENT_MSG_ID_SEQUENCE}) END
               AS issued
    FROM unnest(%(ids)s::bigint[]) AS a(id)
    LEFT JOIN pgq_message m ON m.msg_id = a.id
), refused AS (
    SELECT id FROM awaited WHERE NOT issued OR id = %(dependant)s::bigint
), held AS (
    UPDATE pgq_message m SET vt = {_HELD}
    WHERE m.msg_id = %(dependant)s::bigint AND NOT EXISTS (SELECT 1 FROM refused)
    RETURNING m.msg_id
), waits AS (
    INSERT INTO pgq_dependency (msg_id, queue_id, dependant_id, group_id)
    SELECT a.id, a.queue_id, %(dependant)s::bigint, %(group)s::bigint FROM awaited a
    WHERE NOT EXISTS (SELECT 1 FROM refused)
    RETURNING id
), marked AS (
    UPDATE pgq_message m SET headers = m.headers || '{{"pgq_awaited": true}}'::jsonb
    FROM awaited a
    WHERE m.msg_id = a.id AND a.queue_id IS NOT NULL AND NOT m.headers ? 'pgq_awaited'
      AND NOT EXISTS (SELECT 1 FROM refused)
    RETURNING m.msg_id
)
SELECT ARRAY(SELECT id FROM refused ORDER BY id) AS refused,
       (SELECT count(*) FROM waits) AS waits,
       (SELECT count(*) FROM held) AS held,
       (SELECT count(*) FROM marked) AS marked
"""


def _resolve(which: str) -> str:
    """RESOLVE's text for the open waits ``which`` picks (a condition on ``w``): each gets
    the outcome its awaited message ended with, if that message has left its queue."""
    return f"""
WITH open AS (
    SELECT w.id FROM pgq_dependency w
    WHERE w.outcome IS NULL AND {which}
      AND NOT EXISTS (SELECT 1 FROM pgq_message m
                      WHERE m.msg_id = w.msg_id AND m.queue_id = w.queue_id)
    LIMIT %(limit)s
    FOR UPDATE OF w SKIP LOCKED
), finished AS (
    UPDATE pgq_dependency w
    SET outcome = coalesce(
            (SELECT a.outcome FROM pgq_archived_message a WHERE a.msg_id = w.msg_id
             ORDER BY a.archived_at DESC LIMIT 1),
            CASE WHEN EXISTS (SELECT 1 FROM pgq_message m WHERE m.msg_id = w.msg_id)
                     THEN 'dead'
                 WHEN w.queue_id IS NOT NULL
                      AND NOT EXISTS (SELECT 1 FROM pgq_queue q WHERE q.id = w.queue_id)
                     THEN 'cancelled'
                 ELSE 'acked' END),
        finished_at = clock_timestamp()
    FROM open o WHERE w.id = o.id
    RETURNING w.dependant_id
)
SELECT count(*) AS finished,
       ARRAY(SELECT DISTINCT dependant_id FROM finished WHERE dependant_id IS NOT NULL)
           AS dependants
FROM finished
"""


# Resolve: give the open waits on the messages %(ids)s that have left their queue (at
# most %(limit)s) the outcome they ended with: the archive's, 'dead' when the message is
# live in another queue (dead-lettered), 'cancelled' when its queue was dropped, else
# 'acked' (an ack that deletes leaves no row). Waits another resolver holds are skipped.
# Answers the dependants whose waits changed. Found through the partial index of open waits.
_RESOLVE = _resolve("w.msg_id = ANY(%(ids)s::bigint[])")

# Sweep: _RESOLVE for any open wait (the leader's duty): it reads only the partial index
# of open waits, never the finished ones kept for group_status.
_SWEEP = _resolve("true")

# Lock the dependants: lock the held dependants %(ids)s, in id order, before RELEASE looks
# at their waits: two resolvers that each finished one wait of the same dependant then take
# turns, and the second sees the first's wait finished (each alone would see the other's
# still open and leave the dependant held).
_LOCK_DEPENDANTS = """
SELECT m.msg_id FROM pgq_message m WHERE m.msg_id = ANY(%(ids)s::bigint[])
ORDER BY m.msg_id FOR UPDATE OF m
"""

# Release: for each held dependant of %(ids)s: make it visible now and wake its queue
# when every wait is acknowledged (an UPDATE of a still-held row, so a dependant is released
# once), or answer it among ``failed`` with the first awaited message that failed
# (``failed_by``) and how (``failed_how``).
_RELEASE = f"""
WITH state AS (
    SELECT w.dependant_id AS id,
           count(*) FILTER (WHERE w.outcome IS NULL) AS open,
           (array_agg(w.msg_id ORDER BY w.finished_at, w.msg_id)
                FILTER (WHERE w.outcome NOT IN {_SUCCEEDED}))[1] AS failed_by,
           (array_agg(w.outcome ORDER BY w.finished_at, w.msg_id)
                FILTER (WHERE w.outcome NOT IN {_SUCCEEDED}))[1] AS failed_how
    FROM pgq_dependency w WHERE w.dependant_id = ANY(%(ids)s::bigint[])
    GROUP BY w.dependant_id
), released AS (
    UPDATE pgq_message m SET vt = clock_timestamp()
    FROM state s
    WHERE m.msg_id = s.id AND s.open = 0 AND s.failed_by IS NULL AND m.vt >= {_HELD_SINCE}
    RETURNING m.msg_id, m.queue_id
)
SELECT ARRAY(SELECT msg_id FROM released ORDER BY msg_id) AS released,
       (SELECT count(pg_notify(%(channel)s, q.name)) FROM pgq_queue q
        WHERE q.id IN (SELECT queue_id FROM released)) AS notified,
       ARRAY(SELECT s.id FROM state s WHERE s.failed_by IS NOT NULL ORDER BY s.id) AS failed,
       ARRAY(SELECT s.failed_by FROM state s WHERE s.failed_by IS NOT NULL ORDER BY s.id)
           AS failed_by,
       ARRAY(SELECT s.failed_how FROM state s WHERE s.failed_by IS NOT NULL ORDER BY s.id)
           AS failed_how
"""

# The dead-letter move of a failed dependant (``q`` its queue), and its counters, as a nack's.
_FAIL_DEAD_LETTER = dead_letter_set(
    dlq_id="dlq.id", origin_id="q.id", origin_name="q.name", retention="dlq.retention"
)
_FAIL_COUNTED = counted(
    count_one("'dead'", "EXISTS (SELECT 1 FROM moved) OR EXISTS (SELECT 1 FROM gone)"),
    count_one("'dead_arrived'", "EXISTS (SELECT 1 FROM moved)", queue="dlq"),
)

# Fail a dependant: a held dependant one of whose dependencies failed: dead-letter it with
# %(error)s (the reason, naming the dependency) to its queue's dead-letter queue, or archive
# it as 'dead' when there is none. A dependant no longer held is left alone (``outcome`` NULL).
_FAIL_DEPENDANT = f"""
WITH t AS (
    SELECT m.msg_id, m.queue_id FROM pgq_message m
    WHERE m.msg_id = %(msg_id)s AND m.vt >= {_HELD_SINCE}
    FOR UPDATE OF m
), q AS (
    SELECT id, name, dead_letter_queue_id FROM pgq_queue WHERE id = (SELECT queue_id FROM t)
), dlq AS (
    SELECT id, name, retention FROM pgq_queue WHERE id = (SELECT dead_letter_queue_id FROM q)
), moved AS (
    UPDATE pgq_message m
    SET {_FAIL_DEAD_LETTER}
    FROM t, q, dlq WHERE m.msg_id = t.msg_id
    RETURNING m.msg_id, dlq.name AS dlq_name
), gone AS (
    DELETE FROM pgq_message m USING t
    WHERE m.msg_id = t.msg_id AND NOT EXISTS (SELECT 1 FROM dlq)
    RETURNING {M_COLS}
), archived AS (
    {archive_rows("gone", "'dead'", error="%(error)s")}
), counted AS (
    {_FAIL_COUNTED}
)
SELECT CASE WHEN EXISTS (SELECT 1 FROM moved) THEN 'dead_lettered'
            WHEN EXISTS (SELECT 1 FROM gone) THEN 'dead' END AS outcome,
       (SELECT count(pg_notify(%(channel)s, dlq_name)) FROM moved) AS notified
"""


def _inline(statement: str, indent: int, **expressions: str) -> str:
    """``statement`` as a PL/pgSQL statement indented by ``indent`` (its first line by the
    caller): each ``%(name)s`` becomes ``expressions[name]``."""
    for name, expression in expressions.items():
        statement = statement.replace(f"%({name})s", expression)
    if "%(" in statement:
        raise ValueError(f"a placeholder was left unfilled in {statement!r}")
    return textwrap.indent(statement.strip(), " " * indent).lstrip()


# Set (transaction-local) while pgq_resolve_waits runs: the triggers leave what it does to
# the messages it fails to its own loop, so a failing chain is walked there, not by
# triggers nested as deep as the chain is long.
_RESOLVING = "'pgq.resolving'"

# _FAIL_DEPENDANT for the i-th failed dependant of the loop below.
_FAIL_IN_LOOP = _inline(
    _FAIL_DEPENDANT, 12, msg_id="v_failed[i]", error="v_error", channel="p_channel"
)

# -- create_resolve_function -- Make pgq_resolve_waits(p_ids, p_batch, p_channel): resolve
# the open waits on the messages p_ids (all open waits when NULL, the leader's sweep; at most
# p_batch), lock and release the dependants that wait for nothing more (their queues woken
# on channel p_channel), dead-letter (or archive as dead) those one of whose dependencies
# failed, then resolve the waits on those in turn, down a chain. One call, in the caller's
# transaction. Answers how many waits finished, the dependants released, and the dependants
# failed with the dependency that failed them and its outcome. Made by ``migrate`` from the
# fragments above, so the texts run here are the ones shown above.
CREATE_RESOLVE_FUNCTION = f"""
CREATE OR REPLACE FUNCTION pgq_resolve_waits(p_ids bigint[], p_batch integer, p_channel text)
RETURNS TABLE (finished bigint, released bigint[], failed bigint[], failed_by bigint[],
               failed_how text[])
LANGUAGE plpgsql VOLATILE SET search_path FROM CURRENT AS $resolve$
#variable_conflict use_column
DECLARE
    v_outer text := current_setting({_RESOLVING}, true);
    v_count bigint;
    v_dependants bigint[];
    v_released bigint[];
    v_notified bigint;
    v_failed bigint[];
    v_failed_by bigint[];
    v_failed_how text[];
    v_error text;
    v_outcome text;
    v_dead bigint[];
BEGIN
    PERFORM set_config({_RESOLVING}, 'on', true);
    finished := 0;
    released := ARRAY[]::bigint[];
    failed := ARRAY[]::bigint[];
    failed_by := ARRAY[]::bigint[];
    failed_how := ARRAY[]::text[];
    IF p_ids IS NULL THEN
        {_inline(_SWEEP, 8, limit="p_batch")}
        INTO v_count, v_dependants;
    ELSE
        {_inline(_RESOLVE, 8, ids="p_ids", limit="p_batch")}
        INTO v_count, v_dependants;
    END IF;
    finished := v_count;
    WHILE cardinality(v_dependants) > 0 LOOP
        PERFORM count(*) FROM ({_inline(_LOCK_DEPENDANTS, 8, ids="v_dependants")}) AS locked;
        {_inline(_RELEASE, 8, ids="v_dependants", channel="p_channel")}
        INTO v_released, v_notified, v_failed, v_failed_by, v_failed_how;
        released := released || v_released;
        v_dead := ARRAY[]::bigint[];
        FOR i IN 1 .. coalesce(cardinality(v_failed), 0) LOOP
            v_error := format(
                'dependency %s ended %s; this message waited for it and will not run',
                v_failed_by[i], v_failed_how[i]);
            {_FAIL_IN_LOOP}
            INTO v_outcome, v_notified;
            IF v_outcome IS NOT NULL THEN
                v_dead := v_dead || v_failed[i];
                failed := failed || v_failed[i];
                failed_by := failed_by || v_failed_by[i];
                failed_how := failed_how || v_failed_how[i];
            END IF;
        END LOOP;
        EXIT WHEN cardinality(v_dead) = 0;
        {_inline(_RESOLVE, 8, ids="v_dead", limit="p_batch")}
        INTO v_count, v_dependants;
        finished := finished + v_count;
    END LOOP;
    PERFORM set_config({_RESOLVING}, coalesce(v_outer, ''), true);
    RETURN NEXT;
END
$resolve$
"""

# -- create_awaited_left_function -- Make the function of the triggers on pgq_message (made by
# migration 0018) that fire when an awaited message (``headers ? 'pgq_awaited'``) is deleted
# or moved to another queue: it resolves that message's waits with pgq_resolve_waits, in the
# deleting statement's transaction, whichever door deleted it (an ack, an archive, a PGMQ
# function, expiry, a purge, a dead-letter move). Filled with the batch and the notify
# channel as literals; a message is left to the function when pgq_resolve_waits itself
# moved it.
CREATE_AWAITED_LEFT_FUNCTION = SQL(
    f"""
CREATE OR REPLACE FUNCTION pgq_awaited_left() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $left$
BEGIN
    IF current_setting({_RESOLVING}, true) IS DISTINCT FROM 'on' THEN
        PERFORM pgq_resolve_waits(ARRAY[OLD.msg_id], {{batch}}, {{channel}});
    END IF;
    RETURN NULL;
END
$left$
"""
)

# -- resolve_waits -- Resolve the waits on the messages %(ids)s (NULL: any open wait) and what
# follows from them, as CREATE_RESOLVE_FUNCTION says.
RESOLVE_WAITS = """
SELECT * FROM pgq_resolve_waits(%(ids)s::bigint[], %(limit)s::integer, %(channel)s::text)
"""

# -- group_counts -- A group's members by state: pending (still in a queue), done
# (acknowledged) and failed, and its follow-up; no row for an unknown group.
GROUP_COUNTS = f"""
SELECT g.id, g.queue_name, g.size, g.then_msg_id, g.then_queue_name, g.created_at,
       count(w.id) FILTER (WHERE w.outcome IS NULL) AS pending,
       count(w.id) FILTER (WHERE w.outcome IN {_SUCCEEDED}) AS done,
       count(w.id) FILTER (WHERE w.outcome NOT IN {_SUCCEEDED}) AS failed
FROM pgq_workflow_group g
LEFT JOIN pgq_dependency w ON w.group_id = g.id
WHERE g.id = %(group)s
GROUP BY g.id
"""

# -- prune_workflows -- Forget what finished more than %(keep)s seconds ago: groups none of
# whose members is pending (with their rows), and the other waits of dependants that wait
# for nothing more. Answers how many rows went.
PRUNE_WORKFLOWS = """
WITH groups AS (
    DELETE FROM pgq_workflow_group g
    WHERE g.created_at < clock_timestamp() - make_interval(secs => %(keep)s)
      AND NOT EXISTS (SELECT 1 FROM pgq_dependency w WHERE w.group_id = g.id AND w.outcome IS NULL)
    RETURNING g.id
), members AS (
    DELETE FROM pgq_dependency w WHERE w.group_id IN (SELECT id FROM groups) RETURNING 1
), waits AS (
    DELETE FROM pgq_dependency w
    WHERE w.group_id IS NULL
      AND w.finished_at < clock_timestamp() - make_interval(secs => %(keep)s)
      AND NOT EXISTS (SELECT 1 FROM pgq_dependency o
                      WHERE o.dependant_id = w.dependant_id AND o.outcome IS NULL)
    RETURNING 1
)
SELECT (SELECT count(*) FROM groups) + (SELECT count(*) FROM members)
       + (SELECT count(*) FROM waits) AS pruned
"""
