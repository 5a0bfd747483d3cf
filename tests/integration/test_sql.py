"""Every statement has one home (pgq_django/store/sql/), one runner and one manager method.

The first tests read the package's source, procrastinate-style: they need no database. The
last ones ask PostgreSQL how it plans the hot-path read (django-tasks'
``test_index_scan_for_ready``).
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection

import pgq_django as pgq
from pgq_django.store import sql
from pgq_django.store.sql import catalogue, messages

SQL_DIR = catalogue.SQL_DIR

# Where a statement may run besides a manager method, and why:
# - store/partitions.py: partition upkeep (DDL), run through pgq_django.store.db like the rest;
# - worker/leader.py: the advisory lock lives on the leader's own psycopg connection;
# - server_functions.py: making the hot statements' functions at migrate (on a connection
#   of its own) and finding them for the runner, which calls it;
# - tallies.py and wakeups.py: the counter flusher and the trailing wake-ups, store services
#   below the models (they run their statement through the runner rather than climbing back
#   up into Message.objects);
# - notify.py: the LISTEN hub, whose commands run on the session it holds for as long as it
#   listens (a LISTEN is heard only while its session lasts), through the runner's
#   run_dedicated, and the wake-up of one queue, a store duty below the models as wakeups.py;
# - store/pgmq_schema.py: the PGMQ SQL interface's schema, which the installer (run by
#   migrate's signals) checks, drops and (re)creates: a schema rather than rows of a model.
OTHER_RUNNERS = {
    "store/pgmq_schema.py",
    "store/partitions.py",
    "worker/leader.py",
    "store/server_functions.py",
    "store/tallies.py",
    "store/wakeups.py",
    "store/notify.py",
}
# The Spark pipeline's face of the store: its executors, without Django set up, run the
# managers' shared operations and sql.spark's statements there, on psycopg connections.
PIPELINE = "store/managers/pipeline.py"


def test_every_statement_is_run_by_exactly_one_manager_method() -> None:
    """Spark's executors have no Django set up: they run the store's operations through
    its pipeline, never a statement of their own; sql.spark's run in the pipeline alone."""
    users = catalogue.statement_users()
    problems = []
    for module, name, _statement in sql.statements():
        found = users.get((module, name), set())
        if len(found) != 1:
            problems.append(f"sql.{module}.{name} is used by {sorted(found) or 'nothing'}")
            continue
        [(path, function)] = found
        in_manager = path.startswith("store/managers/") and "." in function
        if module == "spark":
            if path != PIPELINE:
                problems.append(f"sql.{module}.{name} runs in {path}, outside {PIPELINE}")
        elif not (in_manager or path in OTHER_RUNNERS):
            problems.append(f"sql.{module}.{name} runs in {path}:{function}, not a manager")
    assert not problems, "\n".join(problems)


def test_the_statement_inventory_is_complete() -> None:
    found = {(module, name) for module, name, _s in sql.statements()}
    assert len(found) >= 38
    assert {
        ("messages", "SEND"),
        ("messages", "READ"),
        ("messages", "NACK"),
        ("delivery", "REDRIVE"),
        ("exchanges", "PUBLISH"),
        ("queues", "QUEUE_STATE"),
        ("counters", "METRICS"),
        ("partitions", "CREATE_PARTITION"),
        ("leader", "TRY_LEADER_LOCK"),
    } <= found


def test_every_statement_says_what_it_does() -> None:
    """A ``# -- name --`` comment with a description sits right above each statement."""
    missing = []
    for module, name, _statement in sql.statements():
        source = (SQL_DIR / f"{module}.py").read_text(encoding="utf-8")
        marker = f"# -- {name.lower()} -- "
        pattern = re.escape(marker) + r"\S.*\n(?:#.*\n)*" + re.escape(name) + " = "
        if not re.search(pattern, source):
            missing.append(f"sql.{module}.{name}")
    assert not missing, f"no '# -- name -- what it does' comment above: {missing}"


def _code_strings(tree: ast.Module) -> Iterator[str]:
    """String constants that are not docstrings."""
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in docstrings
        ):
            yield node.value


# SQL that must appear once in pgq_django/store/sql/, in fragments.py: the shared pieces.
FRAGMENTS = [
    "INSERT INTO pgq_message ",
    "INSERT INTO pgq_archived_message ",
    "INSERT INTO pgq_queue_counter ",
    "INSERT INTO pgq_dedup ",
    "jsonb_build_object('pgq_dead_letter'",
    "r.queue_id = {q}.id",  # the room check under max_length
]


@pytest.mark.parametrize("text", FRAGMENTS)
def test_shared_fragments_are_written_once(text: str) -> None:
    homes: dict[str, int] = {}
    for path in SQL_DIR.glob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        count = sum(piece.count(text) for piece in _code_strings(tree))
        if count:
            homes[path.name] = count
    assert homes == {"fragments.py": 1}


# Modules that may hold SQL text outside store/sql/: none (the PGMQ SQL interface's schema
# is .sql files, not Python).
SQL_TEXT_ALLOWED: set[str] = set()
_SQL_TEXT = re.compile(r"\b(SELECT\s.+\sFROM|INSERT\s+INTO|DELETE\s+FROM|UPDATE\s+pgq_\w+\s+SET)\b")


def test_no_sql_text_outside_the_sql_package() -> None:
    offenders = [
        relative
        for relative, tree in catalogue.package_sources()
        if relative not in SQL_TEXT_ALLOWED
        and any(_SQL_TEXT.search(text) for text in _code_strings(tree))
    ]
    assert offenders == []


def test_rows_come_back_with_named_fields(queue: Any) -> None:
    from pgq_django.store import db

    msg_id = pgq.send(queue, {"n": 1})
    row = db.run_one(messages.READ_BY_ID, {"queue": queue.name, "msg_id": msg_id}, prepare=False)
    assert row.found_queue_id == queue.pk
    assert (row.msg_id, row.message, row.read_ct) == (msg_id, {"n": 1}, 0)
    # The same statement again: the row type made the first time is reused.
    again = db.run_one(messages.READ_BY_ID, {"queue": queue.name, "msg_id": msg_id})
    assert type(again) is type(db.run_one(messages.READ_BY_ID, {"queue": queue.name, "msg_id": 0}))
    assert again == row
    [plain] = db.run_all(messages.READ_BY_ID, {"queue": queue.name, "msg_id": msg_id}, named=False)
    assert type(plain) is tuple and plain == tuple(row)


def test_a_statement_keeps_working_after_its_large_result_is_let_go(queue: Any) -> None:
    # A fixed statement has a cursor of its own (pgq_django.store.db), closed after a large
    # result so that the result is not held until the statement runs again.
    ids = pgq.send_batch(queue, [{"n": n} for n in range(40)])
    first = pgq.read(queue, qty=20)
    second = pgq.read(queue, qty=20)
    assert [m.msg_id for m in first + second] == ids
    assert pgq.delete(queue, [m.receipt for m in first + second]) == ids
    assert pgq.read(queue) == []
    assert pgq.send(queue, {"n": 40}) > ids[-1]
    [last] = pgq.read(queue, qty=20)
    assert last.message == {"n": 40}


# -- the plan of the hot-path read ----------------------------------------------------------


def _ready_indexes() -> set[str]:
    """The ready index (queue_id, priority, msg_id) and its copies on every partition."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "WHERE i.inhparent = 'pgq_message_ready'::regclass"
        )
        return {"pgq_message_ready"} | {name for (name,) in cursor.fetchall()}


def _nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from _nodes(child)


def _candidate_scans(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The scans feeding ``plan``'s rows, not those of its sub-plans (a FIFO group check)."""
    if "Relation Name" in plan:
        yield plan
    for child in plan.get("Plans", []):
        if child.get("Parent Relationship") not in ("SubPlan", "InitPlan"):
            yield from _candidate_scans(child)


def _fill(queue: Any, other: Any) -> None:
    """Enough messages in two queues that a sequential scan would look attractive."""
    for q in (queue, other):
        for _ in range(3):
            pgq.send_batch(q, [{"n": i} for i in range(1000)])
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE pgq_message")


_PARAMS = {"queue": None, "qty": 10, "vt": None, "max_bytes": 1024 * 1024}


def _assert_leases_through_the_ready_index(plan: dict[str, Any]) -> None:
    """The rows locked FOR UPDATE SKIP LOCKED (the candidates) come from the ready index of
    every partition, in its order: no sequential scan, no sort of the queue."""
    shown = json.dumps(plan, indent=1)
    [locking] = [node for node in _nodes(plan) if node["Node Type"] == "LockRows"]
    scans = list(_candidate_scans(locking))
    assert scans, shown
    ready = _ready_indexes()
    for scan in scans:
        assert scan["Relation Name"].startswith("pgq_message"), shown
        assert scan["Node Type"] in ("Index Scan", "Index Only Scan"), shown
        assert scan["Index Name"] in ready, shown
    assert not [node for node in _nodes(locking) if node["Node Type"] == "Sort"], shown


@pytest.mark.parametrize("fifo", [False, True], ids=["plain", "fifo"])
def test_read_uses_the_ready_index(make_queue: Any, fifo: bool) -> None:
    """The read's candidates come from the ready index, as the statement is planned for
    one call (values known)."""
    queue, other = make_queue(fifo=fifo), make_queue(fifo=fifo)
    _fill(queue, other)
    with connection.cursor() as cursor:
        cursor.execute(
            "EXPLAIN (FORMAT JSON) " + messages.READ[fifo].format(filters=""),
            {**_PARAMS, "queue": queue.name},
        )
        [[document]] = cursor.fetchall()
    _assert_leases_through_the_ready_index(document[0]["Plan"])


@pytest.mark.parametrize("fifo", [False, True], ids=["plain", "fifo"])
def test_prepared_read_uses_the_ready_index_with_a_generic_plan(
    make_queue: Any, fifo: bool
) -> None:
    """The read is a prepared statement; once PostgreSQL switches it to a generic plan (no
    values known) the candidates must still come from the ready index."""
    queue, other = make_queue(fifo=fifo), make_queue(fifo=fifo)
    _fill(queue, other)
    order: list[str] = []

    def positional(match: re.Match[str]) -> str:
        if match.group(1) not in order:
            order.append(match.group(1))
        return f"${order.index(match.group(1)) + 1}"

    text = re.sub(r"%\((\w+)\)s", positional, messages.READ[fifo].format(filters=""))
    values = {**_PARAMS, "queue": queue.name}
    with connection.cursor() as cursor:
        cursor.execute(f"PREPARE pgq_read_probe AS {text}")
        try:
            cursor.execute("SET LOCAL plan_cache_mode = force_generic_plan")
            placeholders = ", ".join(["%s"] * len(order))
            cursor.execute(
                f"EXPLAIN (FORMAT JSON) EXECUTE pgq_read_probe({placeholders})",
                [values[name] for name in order],
            )
            [[document]] = cursor.fetchall()
        finally:
            cursor.execute("DEALLOCATE pgq_read_probe")
    _assert_leases_through_the_ready_index(document[0]["Plan"])
