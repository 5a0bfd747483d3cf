"""REST long-polls on a WSGI server (Django's runserver in a child process): a waiting
request holds its thread but no database connection, and waits beyond
``PGQ["REST_MAX_THREAD_WAITS"]`` answer 503 instead of taking more threads."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import requests
from django.db import connection

import pgq_django as pgq
from tests.conftest import needs_direct_server, wait_until

APP_NAME = "pgq-test-wsgi"
MAX_WAITS = 10


def server_backends(*, listen: bool | None = None) -> int:
    """The runserver child's PostgreSQL backends (only its LISTEN one, or all but it)."""
    query = (
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s"
        " AND datname = current_database()"
    )
    if listen is not None:
        query += " AND query ILIKE 'LISTEN%%'" if listen else " AND query NOT ILIKE 'LISTEN%%'"
    with connection.cursor() as cursor:
        cursor.execute(query, [APP_NAME])
        return int(cursor.fetchone()[0])


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def wsgi_url(spawn: Any, transactional_db: Any) -> Iterator[str]:
    """Django's runserver (threaded WSGI) on the test database, with a small wait cap."""
    port = free_port()
    child = spawn(
        "-m",
        "django",
        "runserver",
        "--noreload",
        f"127.0.0.1:{port}",
        PGAPPNAME=APP_NAME,
        PGQ_TEST_PGQ=json.dumps({"REST_MAX_THREAD_WAITS": MAX_WAITS}),
    )
    url = f"http://127.0.0.1:{port}"

    def answers() -> bool:
        assert child.poll() is None, child.communicate()
        try:
            return requests.get(url + "/_test/waiters", timeout=5).status_code == 200
        except requests.ConnectionError:
            return False

    wait_until(answers, what="runserver to answer")
    yield url
    child.kill()
    child.wait(timeout=10)
    wait_until(lambda: server_backends() == 0, what="runserver's backends to end")


@needs_direct_server
def test_waiting_long_polls_hold_no_connection_and_the_cap_answers_503(wsgi_url, make_user):
    from rest_framework.authtoken.models import Token

    user = make_user(is_staff=True, is_superuser=True)
    http = requests.Session()
    http.headers["Authorization"] = f"Token {Token.objects.create(user=user).key}"
    pgq.create_queue("q_wsgi")
    pgq.send("q_wsgi", "later", delay=3600)  # there, but not for these waits
    consume = f"{wsgi_url}/v1/queues/q_wsgi/messages?limit=1&wait_seconds=20"

    def waiting() -> int:
        return int(http.get(wsgi_url + "/_test/waiters", timeout=10).json()["waiters"])

    with ThreadPoolExecutor(MAX_WAITS) as pool:
        polls = [pool.submit(http.get, consume, timeout=60) for _ in range(MAX_WAITS)]
        wait_until(lambda: waiting() == MAX_WAITS, what="every long-poll to wait")
        # Ten requests wait; each closed its connection. What remains is the process's
        # LISTEN connection and at most the head's lease of the moment.
        # (Polled: on a loaded machine two waits' leases may overlap for a moment.)
        assert server_backends(listen=True) == 1
        wait_until(lambda: server_backends(listen=False) <= 1, what="one lease at most")

        refused = http.get(consume, timeout=60)
        assert refused.status_code == 503, refused.text
        assert refused.json()["error"]["code"] == "too_many_waits"
        assert int(refused.headers["Retry-After"]) >= 1
        numbers = pgq.metrics("q_wsgi")
        assert (numbers.queue_length, numbers.in_flight, numbers.delayed) == (1, 0, 1)
        assert waiting() == MAX_WAITS

        sent = pgq.send_batch("q_wsgi", [f"m{n}" for n in range(MAX_WAITS)])
        answers = [poll.result(timeout=60) for poll in polls]
    assert all(answer.status_code == 200 for answer in answers)
    assert sorted(m["id"] for a in answers for m in a.json()["data"]) == sorted(sent)
    wait_until(lambda: waiting() == 0, what="the waits to end")
    wait_until(lambda: server_backends(listen=False) == 0, what="no connection held after")
    # A place freed: the next long-poll waits again rather than answering 503.
    short = consume.replace("wait_seconds=20", "wait_seconds=0.2")
    assert http.get(short, timeout=60).json()["data"] == []
    http.close()
