"""The worker leader's advisory lock: one maintenance runner per database.

The leader holds the lock on a dedicated psycopg connection of its own, in a transaction it
keeps open while it leads (the lock lives as long as that transaction, which a
transaction-mode pooler keeps on one server connection), so
:class:`pgq_django.worker.leader.Leader` runs these directly on it rather than through
:mod:`pgq_django.store.db`, which runs on Django's connections.
"""

from __future__ import annotations

# The advisory lock key: the first 8 bytes of md5("pgq_django.leader") as a signed bigint.
_LOCK_KEY = "('x' || left(md5('pgq_django.leader'), 16))::bit(64)::bigint"

# -- try_leader_lock -- Become the leader if no other transaction holds the lock (no wait);
# the lock goes when this transaction ends (a stopping leader rolls back; a dead one's
# connection closes).
TRY_LEADER_LOCK = f"SELECT pg_try_advisory_xact_lock({_LOCK_KEY}) AS locked"

# -- leader_ping -- Check the lock's transaction is still alive (connected: still holding it).
LEADER_PING = "SELECT 1"
