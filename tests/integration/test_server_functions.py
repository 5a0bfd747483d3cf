"""With prepared statements off, the hot statements run through server-side functions.

migrate made one function per wrapped statement (pgq_django.store.server_functions); these tests
check that each exists with the statement's own parameter and column types, that the runner
calls it when prepared statements are off and not otherwise, that what comes back is what
the statement itself returns, and that a statement without its function still runs.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

import pgq_django as pgq
from pgq_django.store import server_functions
from pgq_django.store.sql import messages
from pgq_django.store.sql import server_functions as statements
from pgq_django.store.sql.fragments import MESSAGE_COLUMNS
from tests.protocol_trace import message_kinds, protocol_trace

UNPREPARED = {"PREPARED_STATEMENTS": False}


@pytest.fixture(autouse=True)
def _fresh_lookup() -> Any:
    """Each test reads which functions exist anew (a test may drop one)."""
    server_functions.forget()
    yield
    server_functions.forget()


def _functions() -> dict[str, tuple[int, int]]:
    """name -> (arguments, result columns) of the wrapped statements' functions."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT proname, pronargs, cardinality(proallargtypes) - pronargs FROM pg_proc "
            "WHERE proname LIKE 'pgq_fn_%%'"
        )
        return {name: (args, columns) for name, args, columns in cursor.fetchall()}


def _calls(queries: CaptureQueriesContext) -> list[str]:
    return [q["sql"] for q in queries.captured_queries if "pgq_fn_" in (q["sql"] or "")]


def test_migrate_made_a_function_for_every_wrapped_statement(db: Any) -> None:
    made = _functions()
    for statement in statements.WRAPPED:
        name = statements.function_name(statement)
        assert name in made, statement[:200]
        assert made[name][1] > 0  # it returns the statement's columns


def test_without_prepared_statements_send_read_ack_run_the_functions(queue: Any) -> None:
    with override_settings(PGQ=UNPREPARED), CaptureQueriesContext(connection) as queries:
        msg_id = pgq.send(queue, {"n": 1}, headers={"h": "v"})
        [message] = pgq.read(queue, vt=30)
        assert pgq.set_vt(queue, message.receipt, 60) is not None
        assert pgq.delete(queue, message.receipt) is True
    assert (message.msg_id, message.message, message.headers) == (msg_id, {"n": 1}, {"h": "v"})
    assert message.read_ct == 1 and message.vt > message.enqueued_at
    assert len(_calls(queries)) == 4, [q["sql"][:80] for q in queries.captured_queries]


def test_a_function_returns_what_its_statement_returns(queue: Any) -> None:
    """The same read, through the function and as the statement itself (prepared)."""
    pgq.send_batch(queue, [{"n": 1}, {"n": 2}], headers={"k": "v"})
    with override_settings(PGQ=UNPREPARED):
        through = pgq.read(queue, vt=0, qty=10)
    direct = pgq.read(queue, vt=0, qty=10)

    def fields(m: Any) -> tuple[Any, ...]:
        return (m.msg_id, m.message, m.headers, m.priority, m.enqueued_at, type(m.vt))

    assert [fields(m) for m in through] == [fields(m) for m in direct]
    assert [m.read_ct for m in direct] == [m.read_ct + 1 for m in through]


# A body, header and label written to break out of a client-bound literal.
HOSTILE = "x'); DROP TABLE pgq_message; --\\' $$ $1 %s %(queue)s"


def test_a_call_is_one_query_message_with_every_value_as_its_statement_gives_it(
    queue: Any,
) -> None:
    """A call is bound on the client and sent as one simple-protocol Query message; what it
    returns (text results) is what the prepared statement returns (binary), value for value
    and type for type, and a hostile body cannot leave its quotes."""
    pgq.send(queue, {"q": HOSTILE, "nested": [1, 2.5, None]}, headers={"h": HOSTILE})
    pgq.send(queue, {"n": 2}, label=HOSTILE, priority=-3, max_retries=2, retry_delay=1.5)
    with override_settings(PGQ=UNPREPARED):
        connection.ensure_connection()  # which functions exist: read once, before the trace
        assert server_functions.call_for(connection.alias, connection.connection, messages.ARCHIVE)
        with protocol_trace() as sent:
            through = pgq.read(queue, vt=0, qty=10)
    direct = pgq.read(queue, vt=0, qty=10)
    kinds = message_kinds(sent)
    assert kinds == ["Query"], sent
    assert '"SELECT * FROM pgq_fn_' in sent[0]

    def typed(m: Any) -> list[tuple[Any, Any]]:
        """Every column but those the second read moved, each with its type; the time
        zone of each timestamp."""
        values = [getattr(m, c) for c in MESSAGE_COLUMNS if c not in ("vt", "read_ct")]
        zones = [(t.utcoffset(), type(t.tzinfo)) for t in (m.enqueued_at, m.vt, m.expires_at)]
        return [(v, type(v)) for v in values] + zones

    assert [typed(m) for m in through] == [typed(m) for m in direct]
    plain, labelled = sorted(through, key=lambda m: m.label is not None)
    assert (labelled.label, labelled.priority, labelled.retry_delay) == (HOSTILE, -3, 1.5)
    assert plain.message == {"q": HOSTILE, "nested": [1, 2.5, None]}
    assert plain.headers == {"h": HOSTILE}
    assert plain.attributes == {} and type(plain.attributes) is dict
    assert [m.read_ct for m in direct] == [m.read_ct + 1 for m in through]
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pgq_message")
        assert cursor.fetchone()[0] >= 2  # the table is still there


def test_a_call_with_a_binary_argument_is_bound_on_the_server(queue: Any) -> None:
    """A batch's bodies go as one binary array, not as a literal the server must parse."""
    with override_settings(PGQ=UNPREPARED):
        connection.ensure_connection()
        assert server_functions.call_for(connection.alias, connection.connection, messages.SEND)
        with protocol_trace() as sent:
            ids = pgq.send_batch(queue, [{"n": 1}, {"q": HOSTILE}])
    kinds = message_kinds(sent)
    assert kinds[:2] == ["Parse", "Bind"] and "Query" not in kinds, kinds
    assert "pgq_fn_" in sent[0]
    assert [m.message for m in pgq.read(queue, qty=10)] == [{"n": 1}, {"q": HOSTILE}]
    assert len(ids) == 2


def test_prepared_statements_on_never_call_the_functions(queue: Any) -> None:
    with (
        override_settings(PGQ={"PREPARED_STATEMENTS": True}),
        CaptureQueriesContext(connection) as queries,
    ):
        pgq.send(queue, {"n": 1})
        pgq.delete(queue, pgq.read(queue))
    assert _calls(queries) == []


def test_server_functions_off_runs_the_statements_as_they_are(queue: Any) -> None:
    with (
        override_settings(PGQ={**UNPREPARED, "SERVER_FUNCTIONS": False}),
        CaptureQueriesContext(connection) as queries,
    ):
        pgq.send(queue, {"n": 1})
        pgq.delete(queue, pgq.read(queue))
    assert _calls(queries) == []
    assert pgq.metrics(queue).queue_length == 0


def test_a_statement_without_its_function_runs_as_it_is(queue: Any) -> None:
    """Code newer than the last migrate: its changed statement has no function yet."""
    # Every statement that puts messages on a queue, whichever the send picks.
    sends = [s for s in statements.WRAPPED if "INSERT INTO pgq_message (" in s]
    assert messages.SEND_ONE_COUNTED in sends and messages.SEND in sends
    gone = [statements.function_name(s) for s in sends]
    with connection.cursor() as cursor:
        for name in gone:
            cursor.execute(f'DROP FUNCTION "{name}"')  # rolls back with the test
    with override_settings(PGQ=UNPREPARED), CaptureQueriesContext(connection) as queries:
        msg_id = pgq.send(queue, {"n": 1})
        [message] = pgq.read(queue)
    assert message.msg_id == msg_id
    assert not any(name in q for q in _calls(queries) for name in gone)
    assert len(_calls(queries)) == 1  # the read still runs its function


def test_install_again_replaces_the_functions_in_place(db: Any) -> None:
    before = _functions()
    made = server_functions.install(connection.alias)
    assert sorted(made) == sorted(set(made)) and set(made) <= set(_functions())
    assert {statements.function_name(s) for s in statements.WRAPPED} == set(made)
    assert _functions() == before


@pytest.fixture
def committed(transactional_db: Any) -> Any:
    """For tests whose changes install() must see (it runs on a connection of its own);
    the functions are made again afterwards."""
    yield
    server_functions.install(connection.alias)


def test_migrate_remakes_what_flush_leaves_alone(committed: Any) -> None:
    """post_migrate comes after migrate (with its plan, empty or not) and after flush
    (without one): only migrate remakes the functions."""
    name = statements.function_name(messages.ARCHIVE)
    with connection.cursor() as cursor:
        cursor.execute(f'DROP FUNCTION "{name}"')
    server_functions.on_post_migrate(using=connection.alias)  # as flush sends it
    assert name not in _functions()
    server_functions.on_post_migrate(using=connection.alias, plan=[])  # nothing to apply
    assert name in _functions()


def test_a_function_whose_columns_changed_type_is_made_again(committed: Any) -> None:
    queue = pgq.create_queue("changed_types")
    name = statements.function_name(messages.SET_VT)
    with connection.cursor() as cursor:
        cursor.execute(f'DROP FUNCTION "{name}"')
        cursor.execute(
            f'CREATE FUNCTION "{name}"(text, bigint[], integer[], double precision) '
            "RETURNS TABLE (found_queue_id text) LANGUAGE sql AS 'SELECT NULL::text'"
        )
    server_functions.install(connection.alias)
    msg_id = pgq.send(queue, {"n": 1})
    [message] = pgq.read(queue)
    with override_settings(PGQ=UNPREPARED), CaptureQueriesContext(connection) as queries:
        assert pgq.set_vt(queue, message.receipt, 60) is not None
    assert [name in q for q in _calls(queries)] == [True]
    assert message.msg_id == msg_id


def test_hooks_can_tell_which_statement_a_call_runs(queue: Any) -> None:
    seen: list[str] = []

    def record(execute: Any, sql: Any, params: Any, many: bool, context: Any) -> Any:
        seen.append(sql)
        return execute(sql, params, many, context)

    with override_settings(PGQ=UNPREPARED), connection.execute_wrapper(record):
        pgq.send(queue, {"n": 1})
    [call] = seen
    assert call.startswith("SELECT * FROM pgq_fn_")
    # The test's transaction is open: a send without options counts itself in it.
    assert server_functions.statement_run_by(call) == messages.SEND_ONE_COUNTED
    assert server_functions.statement_run_by("SELECT 1") == "SELECT 1"
