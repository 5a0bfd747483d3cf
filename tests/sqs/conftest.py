"""A live SQS endpoint for the tests: uvicorn serving the test settings on a loopback port.

The server is a real child process on the test database (``subprocess_env``), listening on a
socket this process bound to an ephemeral port and handed over (``uvicorn --fd``), so there
is no port race. Tests use the real boto3 client against it; they run with
``transactional_db`` so what they create is committed and the server sees it.
"""

from __future__ import annotations

import json
import socket
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ..conftest import ROOT, Child, subprocess_env

STARTUP_TIMEOUT = 60.0


def _wait_until_serving(url: str, server: Child) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while True:
        if server.poll() is not None:
            _out, err = server.communicate()
            raise RuntimeError(f"uvicorn exited with {server.returncode}: {err[-2000:]}")
        try:
            urllib.request.urlopen(urllib.request.Request(url, data=b"{}"), timeout=5)
        except urllib.error.HTTPError as exc:  # an SQS error answer: it is serving
            json.loads(exc.read())
            return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{url} did not answer within {STARTUP_TIMEOUT:.0f} s") from None
            time.sleep(0.1)


@pytest.fixture(scope="session")
def sqs_endpoint(
    django_db_setup: Any, django_db_blocker: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """The endpoint URL of a live uvicorn serving tests.asgi, for the whole session."""
    import sys

    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # Accepted sockets inherit TCP_NODELAY; uvicorn takes an --fd socket for a Unix one and
    # would not set it (Nagle's algorithm would add ~40 ms to every answer).
    listener.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(128)
    port = listener.getsockname()[1]
    server = Child(
        [
            sys.executable,
            "-m",
            "uvicorn",
            "tests.asgi:application",
            "--fd",
            str(listener.fileno()),
            "--log-level",
            "warning",
            "--lifespan",
            "off",
        ],
        workdir=Path(tmp_path_factory.mktemp("sqs_server")),
        cwd=ROOT,
        env=subprocess_env(),
        pass_fds=[listener.fileno()],
    )
    listener.close()
    url = f"http://127.0.0.1:{port}/sqs/"
    try:
        _wait_until_serving(url, server)
        yield url
    finally:
        server.terminate()
        try:
            server.wait(timeout=15)
        except Exception:
            server.kill()
            server.wait(timeout=10)


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
