"""Who may do what: the rights rule of :mod:`pgq_django.access` as statements.

Run by :class:`pgq_django.store.managers.QueueManager` (a right on a queue; the SQS endpoint's
lookup of a queue with its caller's right and key) and
:class:`pgq_django.store.managers.ExchangeManager` (a right on an exchange).

The rule, as :func:`pgq_django.access.queues_for` states it with the ORM: an active superuser
has every right; the owner of a queue or exchange has every right on it; anyone else has the
union of the grant rows made to them and to their groups (``manage`` on an exchange is the
owner's alone). Whether the user is anonymous or inactive is decided before any statement
runs. The tests hold each statement's answers to the ORM rule's on every kind of user.

The user model is the project's (``AUTH_USER_MODEL``), so its tables are template fields the
manager fills in once per process, quoted: ``{user.table}`` and its primary key column
``{user.pk}``, the ``{user.is_active}`` and ``{user.is_superuser}`` columns, and the table
linking users to their groups, ``{user.groups}``, with its ``{user.groups_user}`` and
``{user.groups_group}`` columns. The filled-in text is fixed, so it is prepared like any other.
"""

from __future__ import annotations

# Every column of pgq_queue, named as Queue's fields' attnames (a test checks the list), so
# a row becomes a Queue as the ORM would load it.
_QUEUE_COLUMNS = """q.id, q.name, q.fifo, q.visibility_timeout, q.delivery_delay, q.retention,
       q.max_retries, q.retry_delay, q.backoff, q.backoff_cap, q.backoff_jitter,
       q.dead_letter_queue_id, q.max_message_size, q.max_length, q.archive_on_ack, q.durable,
       q.content_based_deduplication, q.deduplication_scope, q.fifo_throughput_limit,
       q.receive_wait_time, q.tags, q.paused, q.rate_limit, q.concurrency_limit, q.callback,
       q.owner_id, q.created_at, q.updated_at"""

# The groups of user user_id, for a grant's group_id.
_USER_GROUPS = """SELECT ug.{user.groups_group} FROM {user.groups} ug
                  WHERE ug.{user.groups_user} = %(user_id)s"""

# Whether user user_id (superuser or not) has right ('read', 'write' or 'manage') on queue q.
_QUEUE_RIGHT = f"""(
        %(superuser)s
        OR q.owner_id = %(user_id)s
        OR EXISTS (
            SELECT 1 FROM pgq_queue_grant g
            WHERE g.queue_id = q.id
              AND CASE %(right)s
                    WHEN 'read' THEN g.can_read
                    WHEN 'write' THEN g.can_write
                    WHEN 'manage' THEN g.can_manage
                  END
              AND (g.user_id = %(user_id)s OR g.group_id IN (
                  {_USER_GROUPS}))))"""

# Whether user user_id (superuser or not) has right ('publish' or 'manage') on exchange e.
_EXCHANGE_RIGHT = f"""(
        %(superuser)s
        OR e.owner_id = %(user_id)s
        OR (%(right)s = 'publish' AND EXISTS (
            SELECT 1 FROM pgq_exchange_grant g
            WHERE g.exchange_id = e.id AND g.can_publish
              AND (g.user_id = %(user_id)s OR g.group_id IN (
                  {_USER_GROUPS})))))"""


def _by_name_or_id(template: str) -> dict[bool, str]:
    """The template for a target found by id (False) and by name (True)."""
    return {
        by_name: template.replace("{target}", "name" if by_name else "id")
        for by_name in (False, True)
    }


# -- queue_right -- Whether the user has the right on the queue: a row when yes, none when no
# or when there is no such queue. One text per way to name the queue (False: by id, True: by
# name), the value in target.
QUEUE_RIGHT = _by_name_or_id(f"""
SELECT 1 AS allowed FROM pgq_queue q
WHERE q.{{target}} = %(target)s
  AND {_QUEUE_RIGHT}
""")

# -- exchange_right -- Whether the user has the right on the exchange: a row when yes, none
# when no or when there is no such exchange. One text per way to name the exchange (False: by
# id, True: by name), the value in target.
EXCHANGE_RIGHT = _by_name_or_id(f"""
SELECT 1 AS allowed FROM pgq_exchange e
WHERE e.{{target}} = %(target)s
  AND {_EXCHANGE_RIGHT}
""")

# -- queue_for_caller -- The queue called name, every column, if the user has the right on
# it and, when check_key is true, access key key_id is still live for that user: unrevoked,
# its owner active, the user with the superuser flag given. One query before a hot SQS action.
QUEUE_FOR_CALLER = f"""
SELECT {_QUEUE_COLUMNS}
FROM pgq_queue q
WHERE q.name = %(name)s
  AND {_QUEUE_RIGHT}
  AND (NOT %(check_key)s OR EXISTS (
        SELECT 1 FROM pgq_access_key k
        JOIN {{user.table}} u ON u.{{user.pk}} = k.user_id
        WHERE k.id = %(key_id)s AND k.revoked_at IS NULL AND u.{{user.is_active}}
          AND k.user_id = %(user_id)s AND u.{{user.is_superuser}} = %(superuser)s))
"""
