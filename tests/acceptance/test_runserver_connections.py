"""The example project under Django's runserver keeps no database connection past a request.

runserver gives every client connection a thread of its own, which lives as long as the
client keeps its HTTP connection open. A database connection kept for reuse there
(``CONN_MAX_AGE``) stays with that idle thread, and with a hundred clients that is a hundred
idle PostgreSQL backends. The test serves the example project, settings as shipped, with
runserver, sends it many concurrent long polls from a client that keeps its connections,
and counts the PostgreSQL backends the process still holds once every poll has answered.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
import requests
import requests.adapters

from tests.conftest import ROOT, direct_dsn, manage_on, needs_direct_server, wait_until

POLLS = 120


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class Site:
    url: str
    token: str
    database_url: str
    app_name: str

    def backends(self) -> int:
        """The server process's backends other than its one LISTEN connection."""
        with psycopg.connect(self.database_url, autocommit=True) as conn:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s"
                " AND query NOT ILIKE 'LISTEN%%'",
                [self.app_name],
            ).fetchone()
        assert row is not None
        return int(row[0])


@pytest.fixture
def example_site(fresh_database: str, tmp_path: Path) -> Iterator[Site]:
    """runserver serving example_project.settings on a fresh, migrated database."""
    dsn = direct_dsn(fresh_database)
    env = {"DJANGO_SETTINGS_MODULE": "example_project.settings"}
    manage_on(dsn, "migrate", "-v", "0", **env)
    token = manage_on(
        dsn,
        "shell",
        "-c",
        "from django.contrib.auth.models import User\n"
        "from rest_framework.authtoken.models import Token\n"
        "import pgq_django as pgq\n"
        "pgq.create_queue('idle')\n"
        "user = User.objects.create_superuser('ops', 'ops@example.com', 'pw')\n"
        "print(Token.objects.create(user=user).key)\n",
        **env,
    ).split()[-1]
    app_name = "pgq-runserver-" + uuid.uuid4().hex[:8]
    port = _free_port()
    log = (tmp_path / "runserver.log").open("w")
    child = subprocess.Popen(
        [sys.executable, "-m", "django", "runserver", "--noreload", f"127.0.0.1:{port}"],
        cwd=ROOT,
        env={**_site_env(dsn), **env, "PGAPPNAME": app_name},
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    site = Site(f"http://127.0.0.1:{port}", token, dsn, app_name)

    def answers() -> bool:
        assert child.poll() is None, (tmp_path / "runserver.log").read_text()
        try:
            return requests.get(site.url + "/v1/queues", timeout=5).status_code == 401
        except requests.ConnectionError:
            return False

    try:
        wait_until(answers, what="runserver to answer")
        yield site
    finally:
        child.kill()
        child.wait(timeout=30)
        log.close()


def _site_env(dsn: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("DJANGO_SETTINGS_MODULE", "PGQ_USE_TEST_DB", "DIRECT_DATABASE_URL")
    }
    env["DATABASE_URL"] = dsn
    env["PYTHONPATH"] = str(ROOT)
    return env


@needs_direct_server
def test_long_polls_under_runserver_leave_no_connection_open(example_site: Site) -> None:
    http = requests.Session()
    # The client keeps its HTTP connections open for the next request, as browsers and SDKs
    # do; runserver's thread for each stays with it, idle.
    http.mount("http://", requests.adapters.HTTPAdapter(pool_maxsize=POLLS))
    http.headers["Authorization"] = f"Token {example_site.token}"
    consume = f"{example_site.url}/v1/queues/idle/messages?limit=1&wait_seconds=1"
    try:
        with ThreadPoolExecutor(POLLS) as pool:
            answers = list(pool.map(lambda _: http.get(consume, timeout=120), range(POLLS)))
        statuses = {a.status_code for a in answers}
        # Past PGQ["REST_MAX_THREAD_WAITS"] a long poll is refused with 503, at once.
        assert 200 in statuses and statuses <= {200, 503}, statuses
        # Every request has answered: none of them keeps a database connection, though the
        # HTTP connections (and runserver's threads) are still open.
        wait_until(lambda: example_site.backends() == 0, what="the requests' connections")
    finally:
        http.close()
