"""Every SQL statement pgq_django runs, named, one module per concern.

- :mod:`.messages`: send, read, pop, read_by_id, delete (ack), archive, set_vt, nack, purge,
  and the lease of an ORM-selected queryset.
- :mod:`.delivery`: deduplicated send, cancel, result, release of leases, redrive,
  dead-lettering of crashed deliveries, expiry, pruning.
- :mod:`.exchanges`: publish (plain and deduplicated).
- :mod:`.queues`: a queue's state, the dead-letter graph lock.
- :mod:`.counters`: folding counters, metrics.
- :mod:`.partitions`: partition catalog queries and DDL templates.
- :mod:`.leader`: the worker leader's advisory lock.
- :mod:`.access`: the rights rule (may this user do this on this queue or exchange; the SQS
  endpoint's lookup of a queue with its caller's right and key).
- :mod:`.notify`: the LISTEN connection's own commands, and the wake-up of one queue.
- :mod:`.spark`: what the Spark pipeline adds (partition spans, id-range reads, the archive
  stream's watermark); its executors run without Django, on connections of their own.
- :mod:`.server_functions`: the hot statements as server-side functions, for connections
  that cannot keep prepared statements (a transaction-mode pooler).
- :mod:`.workflows`: dependencies and groups (holding a message until the ones it waits for
  are acknowledged, releasing or dead-lettering it, a group's counts).
- :mod:`.fragments`: the pieces several statements share (the message INSERT, the archive
  move, the counter insert, the dead-letter move, the dedup claim), composed, never copied.
- :mod:`.params`: the parameters of the statements both the managers and Spark run (send,
  publish, read, ack, a queue's state), built by one function each.

A statement is a module-level constant in UPPER_CASE whose value is SQL text, a
:class:`psycopg.sql.Composable` (templates filled with identifiers), or a dict of texts
keyed by queue shape (``READ[fifo]``); a ``# -- name --`` comment above it says what it
does. Each is run by exactly one manager method (``tests/integration/test_sql.py`` checks
it), through the one runner, :mod:`pgq_django.store.db`, or, for the operations the Spark
executors share with the managers and :mod:`.spark`'s own, through the connection interface
of :mod:`pgq_django.store.connection`, which a plain psycopg connection satisfies too
(:mod:`pgq_django.store.managers.operations`, :mod:`pgq_django.store.managers.pipeline`).
Values always travel as parameters.

Nothing here imports Django, so the same texts and builders run where Django is not set up.

:mod:`.catalogue` renders every statement's complete text, with the code that runs it, into
``docs/reference/sql.md`` (a unit test fails when that page is stale).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from typing import Any

from psycopg.sql import Composable

# The modules holding named statements, by concern (fragments hold none).
MODULES = (
    "messages",
    "delivery",
    "exchanges",
    "queues",
    "counters",
    "partitions",
    "leader",
    "access",
    "notify",
    "spark",
    "server_functions",
    "workflows",
    "pgmq_interface",
)

Statement = str | Composable | dict[bool, str]


def _is_statement(name: str, value: Any) -> bool:
    if not name.isupper() or name.startswith("_"):
        return False
    if isinstance(value, str | Composable):
        return True
    return (
        isinstance(value, dict)
        and bool(value)
        and all(isinstance(k, bool) and isinstance(v, str) for k, v in value.items())
    )


def statements() -> Iterator[tuple[str, str, Statement]]:
    """Every named statement as (module, NAME, statement), module by module.

    Fragments a module imports are not its statements, even when they are SQL text.
    """
    fragments = vars(importlib.import_module(f"{__name__}.fragments"))
    for module_name in MODULES:
        module = importlib.import_module(f"{__name__}.{module_name}")
        for name, value in vars(module).items():
            if _is_statement(name, value) and fragments.get(name) is not value:
                yield module_name, name, value
