"""A live SQS endpoint for the tests: uvicorn serving the test settings on a loopback port.

The server is a real child process on the test database (``subprocess_env``), listening on a
socket this process bound to an ephemeral port and handed over (``uvicorn --fd``), so there
is no port race. Tests use the real boto3 client against it; they run with
``transactional_db`` so what they create is committed and the server sees it.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.http_server import app_name_of, start_uvicorn, stop, wait_for_server_connections_to_close

# The two ways pgq_django.asgi serves the endpoint: through Django's request cycle (the
# view, as any server running Django's handler does) and through the lean ASGI path.
SERVER_PATHS = {"django": "0", "lean": "1"}


@pytest.fixture(scope="session", params=sorted(SERVER_PATHS))
def sqs_server_path(request: Any) -> str:
    return str(request.param)


@pytest.fixture(scope="session")
def sqs_endpoint(
    sqs_server_path: str, django_db_setup: Any, django_db_blocker: Any
) -> Iterator[str]:
    """The endpoint URL of a live uvicorn serving tests.asgi, for the whole session, once
    for each server path: every test that talks to it runs against both.

    The same harness as the REST tests (tests/http_server.py): a socket bound here and handed
    over, so there is no port race, and server connections tagged so tests can tell them
    from their own.
    """
    proc, base, sock = start_uvicorn(PGQ_TEST_SQS_LEAN=SERVER_PATHS[sqs_server_path])
    try:
        yield base + "/sqs/"
    finally:
        stop(proc, sock)
        with django_db_blocker.unblock():
            wait_for_server_connections_to_close(app_name_of(proc))


@pytest.fixture
def make_user(transactional_db: Any) -> Callable[..., Any]:
    """Users with a username unique to the test; ``creator=True`` may create queues."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Permission

    def make(*, creator: bool = True, superuser: bool = False) -> Any:
        user = get_user_model().objects.create_user(
            "u_" + uuid.uuid4().hex[:10], is_superuser=superuser
        )
        if creator:
            user.user_permissions.add(Permission.objects.get(codename="add_queue"))
        return user

    return make


@pytest.fixture
def client_for(sqs_endpoint: str) -> Callable[..., Any]:
    """A real boto3 SQS client signing with a fresh access key of ``user``."""
    import boto3
    from botocore.config import Config

    from pgq_django.models import AccessKey

    def make(user: Any, **overrides: Any) -> Any:
        key, secret = AccessKey.objects.create_key(user)
        options = {
            "endpoint_url": sqs_endpoint,
            "region_name": "eu-west-1",
            "aws_access_key_id": key.key_id,
            "aws_secret_access_key": secret,
            "config": Config(retries={"total_max_attempts": 1}, read_timeout=60),
        }
        options.update(overrides)
        return boto3.client("sqs", **options)

    return make


@pytest.fixture
def user(make_user: Callable[..., Any]) -> Any:
    return make_user()


@pytest.fixture
def sqs(client_for: Callable[..., Any], user: Any) -> Any:
    """A client of a user who may create queues (and so owns the ones they create)."""
    return client_for(user)


@pytest.fixture
def new_name() -> Callable[..., str]:
    def make(fifo: bool = False) -> str:
        return "sqs_" + uuid.uuid4().hex[:12] + (".fifo" if fifo else "")

    return make
