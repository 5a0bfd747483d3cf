"""Server-side functions of the hot statements, for connections that cannot prepare.

Why. With ``PGQ["PREPARED_STATEMENTS"] = False`` (a transaction-mode pooler such as
PgBouncer 1.18, which cannot keep a prepared statement between transactions), PostgreSQL
parses and plans each statement on every call, which for a single send, read or ack costs
about as much as running it (docs/performance.md, "Behind PgBouncer"). PL/pgSQL keeps the
plans of a function's queries for the life of the server session, and a pooler's server sessions
serve many client transactions, so a statement run as a function's body is planned once per
server session, as a prepared statement is per client connection.

How. ``migrate`` (a ``post_migrate`` handler, or :func:`install`) describes each statement
of :data:`~pgq_django.store.sql.server_functions.WRAPPED` (an unnamed prepare: the server infers
its parameter and column types exactly as for a prepared call) and creates a function named
after a hash of its text. When prepared statements are off, the runner (:mod:`pgq_django.store.db`)
calls :func:`call_for` and runs ``SELECT * FROM pgq_fn_…(%(queue)s::text, …)`` instead: the
same statement, same parameters and rows, one short parse per call. A statement whose
function does not exist (code newer than the last ``migrate``, or ``SERVER_FUNCTIONS``
off) runs as it is. Which functions exist is read once per process and database.
"""

from __future__ import annotations

import logging
import re
from typing import Any

import psycopg
from django.db import connections
from psycopg import pq
from psycopg.sql import SQL, Identifier, Literal

from ..conf import settings
from .sql import server_functions as statements

logger = logging.getLogger("pgq_django.store.server_functions")

# psycopg's placeholders: %(name)s / %s, in text (s, t) or binary (b) format; %% is a "%".
_PLACEHOLDER = re.compile(r"%%|%(?:\((\w+)\))?([sbt])")


class Placeholders:
    """A statement's placeholders in order of first use: each becomes $1, $2, … in the
    function's body and one argument of its call (a named one used twice is one argument,
    as psycopg binds it). The tests' EXPLAIN of a prepared statement numbers them the same
    way."""

    def __init__(self, statement: str) -> None:
        self.spelled: list[str] = []  # each argument's placeholder, as the call spells it
        numbers: dict[str, int] = {}

        def number(match: re.Match[str]) -> str:
            if match.group(0) == "%%":
                return "%"
            name, fmt = match.group(1), match.group(2)
            if name is None:
                self.spelled.append(f"%{fmt}")
                return f"${len(self.spelled)}"
            if name not in numbers:
                self.spelled.append(f"%({name}){fmt}")
                numbers[name] = len(self.spelled)
            return f"${numbers[name]}"

        self.body = _PLACEHOLDER.sub(number, statement)


# Each wrapped statement by its function's name.
_BY_NAME = {statements.function_name(s): s for s in statements.WRAPPED}


def install(using: str) -> list[str]:
    """Create (or replace) the function of every wrapped statement on database ``using``;
    returns the names made. A statement that cannot be described or wrapped is logged and
    left to run as it is."""
    params = connections[using].get_connection_params()
    made = []
    with psycopg.connect(**params) as conn, conn.transaction():
        for name, statement in _BY_NAME.items():
            try:
                with conn.transaction():
                    _create(conn, name, Placeholders(statement).body)
            except psycopg.Error as exc:
                logger.warning("event=server_function_skipped function=%s error=%s", name, exc)
                continue
            made.append(name)
    forget()
    return made


def _create(conn: psycopg.Connection[Any], name: str, body: str) -> None:
    pgconn = conn.pgconn
    prepared = pgconn.prepare(b"", body.encode())
    if prepared.status != pq.ExecStatus.COMMAND_OK:
        raise psycopg.ProgrammingError((prepared.error_message or b"").decode())
    described = pgconn.describe_prepared(b"")
    if described.status != pq.ExecStatus.COMMAND_OK:
        raise psycopg.ProgrammingError((described.error_message or b"").decode())
    oids = [described.param_type(i) for i in range(described.nparams)]
    columns = [(described.fname(i) or b"").decode() for i in range(described.nfields)]
    oids += [described.ftype(i) for i in range(described.nfields)]
    row = conn.execute(statements.TYPE_NAMES, {"oids": oids}).fetchone()
    types = list(row[0]) if row else []
    args, results = types[: described.nparams], types[described.nparams :]
    create = statements.CREATE_WRAPPED_FUNCTION.format(
        name=Identifier(name),
        args=SQL(", ").join(SQL(t) for t in args),
        columns=SQL(", ").join(
            SQL("{} {}").format(Identifier(c), SQL(t))
            for c, t in zip(columns, results, strict=True)
        ),
        body=Literal(statements.function_body(body)),
    )
    # Same types: replaced in place, so callers keep resolving the same function. Other
    # types (a migration altered a column the statement uses; CREATE OR REPLACE would add an
    # overload or refuse a new result type): the old one goes first.
    existing = conn.execute(statements.WRAPPED_SIGNATURES, {"name": name}).fetchall()
    for signature, their_types in existing:
        if list(their_types) != oids:
            conn.execute(statements.DROP_WRAPPED_FUNCTION.format(signature=SQL(signature)))
    conn.execute(create)


# alias -> {statement text: its call}, for the statements whose function exists.
_CALLS: dict[str, dict[str, str]] = {}


def call_for(alias: str, raw: psycopg.Connection[Any], statement: str) -> str | None:
    """The call that runs ``statement`` through its function, or None to run it as it is."""
    calls = _CALLS.get(alias)
    if calls is None:
        calls = _CALLS[alias] = _existing(raw)
    return calls.get(statement)


def _existing(raw: psycopg.Connection[Any]) -> dict[str, str]:
    with raw.cursor() as cursor:
        cursor.execute(statements.WRAPPED_FUNCTIONS, {"names": list(_BY_NAME)})
        rows = cursor.fetchall()
    found = {name: list(types) for name, types in rows}
    if len(found) < len(rows):  # overloaded: which one a call resolves to is not ours to say
        found = {n: t for n, t in found.items() if sum(r[0] == n for r in rows) == 1}
    calls = {}
    for name, statement in _BY_NAME.items():
        placeholders = Placeholders(statement).spelled
        types = found.get(name)
        if types is None or len(types) != len(placeholders):
            continue
        arguments = [f"{p}::{t}" for p, t in zip(placeholders, types, strict=True)]
        calls[statement] = statements.call_text(name, arguments)
    return calls


def binds_on_client(call: str) -> bool:
    """Whether the runner sends ``call`` bound on the client, in one simple-protocol message
    (see ``pgq_django.store.db._CallCursor``): every call but one with a binary argument (the
    bodies of a batch send, the receipts of a batch ack), which PostgreSQL reads in a
    fraction of the time it takes to parse the same array as a literal (batches of 100
    sends went at half the rate)."""
    return all(match.group(2) != "b" for match in _PLACEHOLDER.finditer(call))


def statement_run_by(sql: str) -> str:
    """The statement ``sql`` runs: a wrapped one when ``sql`` calls its function, else
    ``sql`` itself. For ``execute_wrapper`` hooks and query logs, which see the call."""
    name = statements.called_function(sql)
    if name is None:
        return sql
    return _BY_NAME.get(name, sql)


def forget() -> None:
    """Read which functions exist again on next use (after :func:`install`, or in tests)."""
    _CALLS.clear()


def on_post_migrate(using: str, plan: Any = None, **kwargs: Any) -> None:
    """``post_migrate`` of pgq_django: (re)make the functions on the queue database.

    Only after ``migrate`` (which passes its plan, empty when nothing was left to apply: a
    new release's changed statements get their functions then), not after ``flush``, which
    sends the signal too and changes no schema.
    """

    if plan is None or using != settings.DATABASE or not settings.SERVER_FUNCTIONS:
        return
    if "pgq_message" not in connections[using].introspection.table_names():
        return  # migrated back to zero
    try:
        install(using)
    except psycopg.Error as exc:  # the statements still run as they are: never fail migrate
        logger.warning("event=server_functions_not_made error=%s", exc)
