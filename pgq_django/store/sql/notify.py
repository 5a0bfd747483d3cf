"""The LISTEN connection's own commands, and the wake-up of one queue.

Run by :mod:`pgq_django.store.notify`. A LISTEN hears notifications only while its session lasts,
so the hub (and a worker's :class:`~pgq_django.store.notify.Listener`) holds a psycopg connection
of its own and runs these on it with :func:`pgq_django.store.db.run_dedicated`; the wake-up of one
queue runs on Django's connection, inside the caller's transaction, through the runner.
"""

from __future__ import annotations

from psycopg import sql

# -- listen -- Hear the wake-ups sent on {channel} (``PGQ["NOTIFY_CHANNEL"]``; each
# notification's payload is a queue name) for as long as this session lasts.
LISTEN = sql.SQL("LISTEN {channel}")

# -- listener_ping -- Check an idle LISTEN connection is still alive, so a silently dropped
# one is noticed and replaced even when no notification arrives.
LISTENER_PING = "SELECT 1"

# -- terminate_listener -- End the LISTEN connection's server process from another session,
# as a dropped network would (tests of the hub's reconnection use it).
TERMINATE_LISTENER = "SELECT pg_terminate_backend(%(pid)s) AS terminated"

# -- notify_queue -- Wake the consumers of one queue (after a resume, a redrive or a manual
# change): a notification on the channel with the queue's name, sent at commit.
NOTIFY_QUEUE = "SELECT pg_notify(%(channel)s, %(queue)s)::text AS notified"
