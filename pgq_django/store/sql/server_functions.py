"""The hot statements as server-side functions, for connections that cannot prepare.

Behind a transaction-mode pooler that keeps no prepared statements (PgBouncer 1.18, or a
newer one without ``max_prepared_statements``), every call would parse and plan its
statement again, a large share of the server's work for a single send, read or ack
(docs/performance.md). PL/pgSQL caches the plans of a function's queries per server
session, and a pooled server session outlives the client transactions it serves, so
running the same statement as the body of a function keeps its plan across calls,
whichever client sends it.
:mod:`pgq_django.store.server_functions` makes one function per statement of :data:`WRAPPED`
(named after a hash of the statement's text) when ``migrate`` runs, and the runner calls it
in place of the statement when prepared statements are off.
"""

from __future__ import annotations

import hashlib

from psycopg.sql import SQL

from . import messages

# The statements worth a function: what a single send, read, pop, ack, archive, nack or
# visibility change runs (reads without filters; a filtered read's text varies with its
# filters). Each text is exactly what the managers run.
WRAPPED = (
    messages.SEND,
    messages.SEND_UNCOUNTED,
    messages.SEND_PLAIN,
    messages.SEND_PLAIN_COUNTED,
    messages.SEND_ONE,
    messages.SEND_ONE_COUNTED,
    *(text.format(filters="") for text in messages.READ.values()),
    *(text.format(filters="") for text in messages.POP.values()),
    *messages.DELETE.values(),
    *messages.DELETE_UNCOUNTED.values(),
    *messages.DELETE_ONE.values(),
    *messages.DELETE_ONE_UNCOUNTED.values(),
    messages.ACK_ONE,
    messages.ARCHIVE,
    messages.SET_VT,
    messages.NACK,
)

# -- wrapped_functions -- Which of the named functions exist, with their argument types in
# order, as the call's casts spell them.
WRAPPED_FUNCTIONS = """
SELECT p.proname::text AS name,
       ARRAY(SELECT format_type(t.oid, NULL)
             FROM unnest(p.proargtypes::oid[]) WITH ORDINALITY AS t(oid, n)
             ORDER BY t.n) AS arg_types
FROM pg_proc p
WHERE p.proname = ANY(%(names)s::text[]) AND pg_function_is_visible(p.oid)
"""

# -- type_names -- The SQL names of type oids, in the order given (what a function
# signature spells for the parameter and column types a statement was described with).
TYPE_NAMES = """
SELECT ARRAY(SELECT format_type(t.oid, NULL)
             FROM unnest(%(oids)s::oid[]) WITH ORDINALITY AS t(oid, n)
             ORDER BY t.n) AS names
"""

# -- create_wrapped_function -- A function whose body returns the rows of one statement
# (its placeholders become $1, $2, ...), with the statement's own parameter and column
# types. ``use_column``: a column the statement names wins over the output parameter of
# the same name. Filled with identifiers and literals by pgq_django.store.server_functions.
CREATE_WRAPPED_FUNCTION = SQL(
    "CREATE OR REPLACE FUNCTION {name}({args}) RETURNS TABLE ({columns}) "
    "LANGUAGE plpgsql VOLATILE AS {body}"
)

# -- wrapped_signatures -- The functions of one name, each with its signature (as DROP
# FUNCTION takes it) and every argument and column type in order.
WRAPPED_SIGNATURES = """
SELECT p.oid::regprocedure::text AS signature,
       coalesce(p.proallargtypes, p.proargtypes::oid[]) AS types
FROM pg_proc p
WHERE p.proname = %(name)s AND pg_function_is_visible(p.oid)
"""

# -- drop_wrapped_function -- Drop one such function by its signature (to make it again with
# other types). Filled with the catalog's own spelling of the signature.
DROP_WRAPPED_FUNCTION = SQL("DROP FUNCTION {signature}")


def function_name(statement: str) -> str:
    """The function of a statement: named by its text, so a changed statement never runs
    an older function (it has none until the next ``migrate``, and runs as it is)."""
    return "pgq_fn_" + hashlib.sha256(statement.encode()).hexdigest()[:24]


def function_body(statement: str) -> str:
    """PL/pgSQL returning the rows of ``statement`` (placeholders already $1, $2, ...)."""
    return f"#variable_conflict use_column\nBEGIN\nRETURN QUERY {statement.strip()};\nEND"


# How a call of such a function begins (see call_text and called_function).
_CALL = "SELECT * FROM "


def call_text(name: str, arguments: list[str]) -> str:
    """The call of function ``name``; ``arguments`` are its placeholders, each with its cast."""
    return f"{_CALL}{name}({', '.join(arguments)})"


def called_function(sql: str) -> str | None:
    """The wrapped function a :func:`call_text` calls, or None for any other text."""
    if not sql.startswith(_CALL + "pgq_fn_"):
        return None
    return sql[len(_CALL) : sql.index("(")]
