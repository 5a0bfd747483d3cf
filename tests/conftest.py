"""Shared fixtures: a real PostgreSQL (see tests/settings.py), queues, and subprocess helpers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest
from django.conf import settings
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

ROOT = Path(__file__).resolve().parent.parent

# Fixtures of the REST tests: a live uvicorn server, users and HTTP sessions.
pytest_plugins = ["tests.http_server", "tests.parallel"]

# The three layers (tests/unit, tests/integration, tests/acceptance) and the fixtures each
# may not use, directly or through other fixtures: a unit test that asks for the database,
# or an integration test that starts a server, belongs one layer up.
_DATABASE = frozenset({"db", "transactional_db", "django_db_setup", "fresh_database"})
_PROCESSES = frozenset({"spawn", "live_url", "live_server", "sqs_endpoint"})
LAYERS = {"unit": _DATABASE | _PROCESSES, "integration": _PROCESSES, "acceptance": frozenset()}


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test belongs to a layer: a test file added outside the three directories (a
    branch written before the split, say) stops the run instead of escaping ``-m unit``."""
    stray = sorted(
        {str(item.path) for item in items if not any(item.get_closest_marker(n) for n in LAYERS)}
    )
    if stray:
        raise pytest.UsageError(
            "move these test files into tests/unit, tests/integration or tests/acceptance"
            " (CONTRIBUTING.md says which):\n" + "\n".join(stray)
        )


def assign_layer(items: list[pytest.Item], directory: Path, layer: str) -> None:
    """Mark the items under ``directory`` with ``layer``; refuse one that uses too much.

    Each layer's conftest calls this, so ``pytest -m unit`` selects what ``pytest
    tests/unit`` runs, and a test in the wrong directory stops the run at collection.
    """
    misplaced = []
    for item in items:
        if directory not in item.path.parents:
            continue
        item.add_marker(getattr(pytest.mark, layer))
        used = sorted(LAYERS[layer] & set(getattr(item, "fixturenames", ())))
        if layer == "unit" and item.get_closest_marker("django_db"):
            used.append("django_db mark")
        if used:
            misplaced.append(f"{item.nodeid} uses {', '.join(used)}")
    if misplaced:
        raise pytest.UsageError(
            f"{layer} tests may not use these (move them to a higher layer):\n"
            + "\n".join(misplaced)
        )


def _keep_pinned_settings(*, setting: str, value: Any, **kwargs: Any) -> None:
    """Keep the run's pinned settings (a pooler's, fast paths off) under every test's own
    ``PGQ`` override.

    A project behind PgBouncer keeps them in its settings whatever else it sets; a test that
    overrides ``PGQ`` with, say, a partition size only means to change that. An explicit
    value in the override (``PREPARED_STATEMENTS: True``) wins.
    """
    if setting == "PGQ" and isinstance(value, dict):
        for key, pinned in settings.PINNED_PGQ.items():
            value.setdefault(key, pinned)


if getattr(settings, "PINNED_PGQ", None):
    from django.core.signals import setting_changed

    setting_changed.connect(_keep_pinned_settings)

if os.environ.get("DIRECT_DATABASE_URL"):

    @pytest.fixture(scope="session")
    def django_db_setup(django_db_setup: Any) -> Iterator[None]:
        """pytest-django's, and before the test database is dropped, end the pooler's idle
        server connections to it (PgBouncer keeps them for reuse, and PostgreSQL refuses to
        drop a database that has sessions). Not autouse: unit tests never set up a database."""
        yield
        name = settings.DATABASES["default"]["NAME"]
        with psycopg.connect(os.environ["DIRECT_DATABASE_URL"], autocommit=True) as direct:
            direct.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = %s AND pid <> pg_backend_pid()",
                [name],
            )


# A test that counts or ends PostgreSQL's backends of a process reads what a pooler hides:
# behind PgBouncer (.ci/test-pgbouncer) the server connections are the pooler's, kept and
# reused whatever the client did. Such a test runs on a direct connection (make test).
needs_direct_server = pytest.mark.skipif(
    bool(os.environ.get("DIRECT_DATABASE_URL")),
    reason="counts or ends the server's backends, which a pooler keeps and reuses",
)


@pytest.fixture(autouse=True)
def _close_listeners(django_db_blocker: Any) -> Iterator[None]:
    """LISTEN connections are cached per thread; close them so test databases can be dropped."""
    yield
    from pgq_django.store import tallies
    from pgq_django.store.notify import close_all

    close_all()
    # Counts of this test's autocommit sends and acks go to this test's database, not to
    # whichever database is current when the process exits. The test's database fixture is
    # torn down by now and blocks access again: this flush is let through.
    with django_db_blocker.unblock():
        tallies.flush()


@pytest.fixture
def queue_name() -> str:
    return "q_" + uuid.uuid4().hex[:12]


@pytest.fixture
def queue(db: Any, queue_name: str) -> Any:
    import pgq_django as pgq

    return pgq.create_queue(queue_name)


@pytest.fixture
def make_queue(db: Any) -> Callable[..., Any]:
    import pgq_django as pgq

    def make(**options: Any) -> Any:
        return pgq.create_queue("q_" + uuid.uuid4().hex[:12], **options)

    return make


def subprocess_env(**extra: str) -> dict[str, str]:
    """Environment for a child Python process that uses this run's test database."""
    env = dict(os.environ)
    env.update(
        DJANGO_SETTINGS_MODULE="tests.settings",
        PGQ_USE_TEST_DB="1",
        PYTHONPATH=str(ROOT) + os.pathsep + env.get("PYTHONPATH", ""),
        **extra,
    )
    return env


def run_django(
    *args: str, database_url: str | None = None, **extra_env: str
) -> subprocess.CompletedProcess[str]:
    """``python -m django <args>`` with the test settings and ``extra_env``: on the database
    ``database_url`` names when given (not this run's test database), else on the test
    database. ``extra_env`` may replace the settings module and path too. The caller checks
    the outcome."""
    env = {**subprocess_env(), **extra_env}
    if database_url is not None:
        env["DATABASE_URL"] = database_url
        env.pop("PGQ_USE_TEST_DB")
    return subprocess.run(
        [sys.executable, "-m", "django", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )


def manage_on(database_url: str, *args: str, **extra_env: str) -> str:
    """:func:`run_django` on ``database_url``'s database that must succeed; its output."""
    done = run_django(*args, database_url=database_url, **extra_env)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


class Child(subprocess.Popen[str]):
    """A child process whose output goes to files instead of pipes.

    A chatty child (a worker logging every message at -v 2) fills a 64 KiB pipe long before
    a test reads it and then blocks mid-handler, holding its leases: files never block.
    ``communicate`` waits and returns what the child wrote, as with pipes.
    """

    def __init__(self, args: list[str], *, workdir: Path, **kwargs: Any) -> None:
        self.out_path = workdir / f"child-{uuid.uuid4().hex[:8]}.out"
        self.err_path = self.out_path.with_suffix(".err")
        with self.out_path.open("w") as out, self.err_path.open("w") as err:
            super().__init__(args, stdout=out, stderr=err, text=True, **kwargs)

    def communicate(self, input: Any = None, timeout: float | None = None) -> tuple[str, str]:
        self.wait(timeout=timeout)
        return self.out_path.read_text(), self.err_path.read_text()

    def logged(self, text: str) -> bool:
        """Whether the child has written ``text`` to its standard error so far."""
        return text in self.err_path.read_text()


def wait_for_workers(*procs: Child) -> None:
    """Until every worker child has started (its signal handlers are in place once it logs
    ``event=worker_started``): a SIGTERM before that kills it instead of stopping it."""
    wait_until(
        lambda: all(p.logged("event=worker_started") for p in procs), what="the workers to start"
    )


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[Callable[..., Child]]:
    """Start ``python -c CODE`` (or ``-m``) children on the test database; killed at teardown."""
    children: list[Child] = []

    def start(*args: str, **extra: str) -> Child:
        proc = Child(
            [sys.executable, *args], workdir=tmp_path, cwd=ROOT, env=subprocess_env(**extra)
        )
        children.append(proc)
        return proc

    yield start
    for proc in children:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)


def _conninfo(dbname: str) -> str:
    db: dict[str, Any] = settings.DATABASES["default"]
    params = {
        "dbname": dbname,
        "user": db.get("USER") or None,
        "password": db.get("PASSWORD") or None,
        "host": db.get("HOST") or None,
        "port": str(db["PORT"]) if db.get("PORT") else None,
        **db.get("OPTIONS", {}),
    }
    return make_conninfo(**{k: v for k, v in params.items() if v is not None})


@pytest.fixture
def fresh_database() -> Iterator[str]:
    """A new, empty database on the test server; its conninfo. Dropped at teardown."""
    name = "pgq_fresh_" + uuid.uuid4().hex[:10]
    admin_db = settings.DATABASES["default"]["NAME"]
    with psycopg.connect(_conninfo(admin_db), autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield _conninfo(name)
    finally:
        with psycopg.connect(_conninfo(admin_db), autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


@contextmanager
def statements_run() -> Iterator[list[str]]:
    """Every statement this thread's default connection runs meanwhile (Django's
    ``execute_wrapper``); behind a pooler a hot statement runs as a call of its function,
    recorded as the statement it runs."""
    from django.db import connection

    from pgq_django.store.server_functions import statement_run_by

    seen: list[str] = []

    def record(execute: Any, sql: Any, params: Any, many: bool, context: Any) -> Any:
        seen.append(statement_run_by(str(sql)))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record):
        yield seen


def wait_until(
    condition: Callable[[], object], *, timeout: float = 60.0, what: str = "condition"
) -> None:
    """Poll ``condition`` until it is true; the timeout only guards against a hang.

    Tests wait for an observable state this way instead of sleeping a guessed time, so a slow
    machine makes them slower, never flaky.
    """
    import time

    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.02)


def time_passes(queue: Any, seconds: float) -> int:
    """Make ``seconds`` pass for the messages of ``queue``: every clock on their rows moves back.

    Visibility timeouts, delays and expiry are comparisons with ``now()``, so shifting a
    message's ``vt``, ``enqueued_at`` and ``expires_at`` into the past is the same, for the
    database, as waiting; tests stay exact and fast instead of sleeping past a deadline.
    Returns how many messages moved.
    """
    from django.db import connection

    name = queue if isinstance(queue, str) else queue.name
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE pgq_message SET vt = vt - make_interval(secs => %s),"
            " enqueued_at = enqueued_at - make_interval(secs => %s),"
            " expires_at = expires_at - make_interval(secs => %s)"
            " WHERE queue_id = (SELECT id FROM pgq_queue WHERE name = %s)",
            [seconds, seconds, seconds, name],
        )
        return int(cursor.rowcount)


def missing_extra(extra: str) -> list[str]:
    """The requirements of pgq-django's ``extra`` that are not installed in this environment."""
    from importlib.metadata import PackageNotFoundError, requires, version

    from packaging.requirements import Requirement

    missing = []
    for line in requires("pgq-django") or []:
        requirement = Requirement(line)
        if requirement.marker is None or not requirement.marker.evaluate({"extra": extra}):
            continue
        try:
            installed = version(requirement.name)
        except PackageNotFoundError:
            missing.append(str(requirement.name))
            continue
        if not requirement.specifier.contains(installed, prereleases=True):
            missing.append(f"{requirement.name} {installed} (wants {requirement.specifier})")
    return missing


def needs_extra(extra: str) -> pytest.MarkDecorator:
    """Skip, saying why, when the ``extra`` is not installed (``make test`` installs it).

    The benchmarks compare pgq_django with its peers from the bench extra; a plain
    ``pip install -e '.[dev]'`` checkout skips their smoke tests instead of failing in a child.
    """
    missing = missing_extra(extra)
    return pytest.mark.skipif(
        bool(missing),
        reason=f"the {extra} extra is not installed (missing {', '.join(missing)}):"
        f" pip install -e '.[{extra}]'",
    )


def direct_dsn(dsn: str) -> str:
    """``dsn``'s database on the server itself, past the pooler when this run goes through
    one (.ci/test-pgbouncer), for benchmarks: they configure Django themselves, with
    prepared statements, and bench.pooler measures the pooler."""
    direct = os.environ.get("DIRECT_DATABASE_URL")
    if not direct:
        return dsn
    return make_conninfo(direct, dbname=conninfo_to_dict(dsn)["dbname"])


def run_quick_bench(module: str, *args: str) -> str:
    """Run ``python -m <module> --quick [args]`` on the test database; its standard output.

    The benchmark smoke tests check that a benchmark runs end to end and prints numbers,
    never how fast anything was.
    """
    env = subprocess_env()
    direct = env.pop("DIRECT_DATABASE_URL", None)
    if direct:
        # Behind a pooler (.ci/test-pgbouncer) the benchmarks still run direct: they compare
        # contenders that prepare statements, and bench.pooler starts its own PgBouncer.
        env["DATABASE_URL"] = direct
    proc = subprocess.run(
        [sys.executable, "-m", module, "--quick", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    _drop_benchmarks_pgmq()
    return proc.stdout


def _drop_benchmarks_pgmq() -> None:
    """Drop the real PGMQ a benchmark installed in the test database (schema ``pgmq``, its
    peer), so the PGMQ SQL interface's tests find the schema name free, as on a new
    database. The interface's own schema (its comment carries our mark) is left alone."""
    from django.db import connection

    from pgq_django.pgmq.sql import OWN_SCHEMA_MARK

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT coalesce(obj_description(oid, 'pg_namespace'), '') FROM pg_namespace"
            " WHERE nspname = 'pgmq'"
        )
        found = cursor.fetchone()
        if found is not None and not found[0].startswith(OWN_SCHEMA_MARK):
            cursor.execute("DROP SCHEMA pgmq CASCADE")


# -- moving a msg_id sequence ----------------------------------------------------------------
# Partition tests move a sequence to reach a range boundary. setval is not transactional:
# the test's rows and DDL roll back with its transaction, the sequence does not, so each
# test puts it back where it was (no committed id can be at or above that point).


def set_sequence(value: int, space: Any = None) -> None:
    """Point ``space``'s msg_id sequence (the durable one by default) at ``value``."""
    from django.db import connection

    from pgq_django import partitions

    name = (space or partitions.DURABLE).sequence
    with connection.cursor() as cursor:
        cursor.execute("SELECT setval(%s::regclass, %s)", [name, value])


def top_of_ranges(space: Any = None) -> int:
    """The end of the highest range of ``space`` in either table (its first id if none)."""
    from pgq_django import partitions

    space = space or partitions.DURABLE
    uppers = (p.upper for t in partitions.TABLES for p in partitions.list_partitions(t, space))
    return max(uppers, default=space.first)


@contextmanager
def sequence_kept(space: Any = None) -> Iterator[None]:
    """Put ``space``'s sequence back as it was when the block ends."""
    from django.db import connection

    from pgq_django import partitions

    name = (space or partitions.DURABLE).sequence
    with connection.cursor() as cursor:
        cursor.execute(sql.SQL("SELECT last_value, is_called FROM {}").format(sql.Identifier(name)))
        saved = cursor.fetchone()
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SELECT setval(%s::regclass, %s, %s)", [name, *saved])


# -- plans: what PostgreSQL makes of a statement ---------------------------------------------


def plan_relations(plan: dict[str, Any]) -> list[str]:
    """Every relation a plan node scans, depth first."""
    found = [plan["Relation Name"]] if "Relation Name" in plan else []
    for child in plan.get("Plans", []):
        found += plan_relations(child)
    return found


def custom_plan(statement: str, params: dict[str, Any]) -> dict[str, Any]:
    """EXPLAIN with the parameter values bound: what a one-off execution plans."""
    from django.db import connection

    connection.ensure_connection()
    with connection.connection.cursor() as cursor:  # server-side binding
        cursor.execute("EXPLAIN (FORMAT JSON) " + statement, params)
        return cursor.fetchone()[0][0]["Plan"]


def generic_plan(statement: str, params: dict[str, Any]) -> dict[str, Any]:
    """EXPLAIN ANALYZE of the statement prepared with a generic plan (rolled back after)."""
    from django.db import connection

    from pgq_django.store.server_functions import Placeholders

    placeholders = Placeholders(statement)  # numbered as psycopg binds them
    text = placeholders.body
    names = [spelled[2 : spelled.index(")")] for spelled in placeholders.spelled]
    connection.ensure_connection()
    raw = connection.connection
    args = sql.SQL(", ").join(sql.Literal(params[n]) for n in names)
    with raw.cursor() as cursor:
        cursor.execute("SAVEPOINT explain")
        cursor.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        cursor.execute(f"PREPARE pgq_explained AS {text}")
        try:
            cursor.execute(
                sql.SQL("EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE pgq_explained ({})").format(args)
            )
            plan = cursor.fetchone()[0]
            return (json.loads(plan) if isinstance(plan, str) else plan)[0]["Plan"]
        finally:
            cursor.execute("DEALLOCATE pgq_explained")
            cursor.execute("ROLLBACK TO SAVEPOINT explain")
