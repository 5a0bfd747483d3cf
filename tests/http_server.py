"""A live uvicorn server on a loopback port serving the test settings, and HTTP helpers.

The server is a real process on the test database (started once per session, on a socket
this process binds to an ephemeral port and hands over), so REST tests go through real
sockets, real ASGI and real authentication. Tests that use it need ``transactional_db``:
the server sees only committed rows.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import requests

from pgq_django.testing import LiveServer, start_asgi_server
from tests.conftest import ROOT, subprocess_env

PASSWORD = "pw-" + uuid.uuid4().hex[:8]
# The start of libpq's application_name of every live server's connections (the server's
# own follows it), so tests tell them from their own and teardown can wait for them.
SERVER_APP_NAME = "pgq-test-server"
# Each live server's own application_name, by process id.
_app_names: dict[int, str] = {}


def server_app_name() -> str:
    """An application_name for one live server: the shared start, then a part of its own,
    so a teardown waits for the backends of the server it stopped, not for another's that
    is still running (a session's server outlives a module's)."""
    return f"{SERVER_APP_NAME}-{uuid.uuid4().hex[:8]}"


def start_uvicorn(app: str = "tests.asgi:application", **env: str) -> tuple[Any, str, Any]:
    """(process, base URL, listening socket) of a uvicorn child on 127.0.0.1:<ephemeral>,
    serving the test settings on the test database (pgq_django.testing.start_asgi_server)."""
    name = server_app_name()
    server = start_asgi_server(
        app,
        env=subprocess_env(**{"PGAPPNAME": name, **env}),
        cwd=ROOT,
        ready_path="/v1/queues",
        options=["--timeout-keep-alive", "30"],
    )
    _app_names[server.process.pid] = name
    return server.process, server.url, server.listener


def stop(proc: Any, sock: Any) -> None:
    LiveServer(proc, "", sock).stop()


def app_name_of(proc: Any) -> str:
    """The application_name of a server :func:`start_uvicorn` started."""
    return _app_names[proc.pid]


def wait_for_server_connections_to_close(app_name: str, timeout: float = 20.0) -> None:
    """PostgreSQL ends a backend shortly after its client goes; the test database can be
    dropped only once the backends of the server named ``app_name`` are gone."""
    from django.db import connection

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s"
                " AND datname = current_database()",
                [app_name],
            )
            if cursor.fetchone()[0] == 0:
                return
        time.sleep(0.05)


@pytest.fixture(scope="session")
def live_url(django_db_setup: Any, django_db_blocker: Any) -> Iterator[str]:
    proc, base, sock = start_uvicorn()
    yield base
    stop(proc, sock)
    with django_db_blocker.unblock():
        wait_for_server_connections_to_close(app_name_of(proc))


@pytest.fixture
def make_user(transactional_db: Any) -> Callable[..., Any]:
    from django.contrib.auth import get_user_model

    def make(name: str | None = None, **flags: Any) -> Any:
        user_model = get_user_model()
        user = user_model(username=name or "u_" + uuid.uuid4().hex[:8], **flags)
        user.set_password(PASSWORD)
        user.save()
        return user

    return make


@pytest.fixture
def client_for(live_url: str) -> Iterator[Callable[[Any], requests.Session]]:
    """``client_for(user)``: a keep-alive requests session logged in with HTTP basic."""
    sessions: list[requests.Session] = []

    def make(user: Any = None) -> requests.Session:
        session = Api(live_url)
        if user is not None:
            session.auth = (user.get_username(), PASSWORD)
        sessions.append(session)
        return session

    yield make
    for session in sessions:
        session.close()


class Api(requests.Session):
    """A requests session whose paths are relative to the live server."""

    def __init__(self, base: str) -> None:
        super().__init__()
        self.base = base

    def request(self, method: str | bytes, url: str | bytes, *args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("timeout", 60)
        return super().request(method, self.base + str(url), *args, **kwargs)


@pytest.fixture
def admin_api(make_user: Callable[..., Any], client_for: Any) -> requests.Session:
    return client_for(make_user(is_staff=True, is_superuser=True))
