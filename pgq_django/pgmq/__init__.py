"""PGMQ 1.13.0's SQL surface over pgq_django's tables (``PGQ["PGMQ_SCHEMA"] = "pgmq"``).

PGMQ's clients, in any language, call SQL functions in schema ``pgmq``: ``pgmq.send``,
``pgmq.read``, ``pgmq.delete``, ... With the setting on, ``migrate`` installs that schema
(:mod:`.install`): the same function names, argument names, defaults and result types as
PGMQ 1.13.0, its record types, ``pgmq.meta`` and a ``q_<name>``/``a_<name>`` view per queue,
all over pgq_django's own tables, so a message sent by ``pgq.send`` is read by a PGMQ
client and the other way round, with no extension installed. The SQL is in ``sql/``;
docs/pgmq.md says how it differs from PGMQ.
"""
