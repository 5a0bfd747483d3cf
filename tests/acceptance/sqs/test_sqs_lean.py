"""The lean ASGI path answers exactly what the Django view answers, and hands Django what
only Django may decide.

Every live SQS test runs against both paths (tests/sqs/conftest.py); these add what is
particular to the lean one: that each server path is what it claims (the test middleware
marks what went through Django), that a body over ``DATA_UPLOAD_MAX_MEMORY_SIZE`` is refused
on both paths without being read whole, that a Host outside ``ALLOWED_HOSTS`` and plain HTTP
under ``SECURE_SSL_REDIRECT`` go to Django's request cycle, which URLs the lean path serves,
and that a long poll whose client goes away stops waiting and leases nothing.
"""

from __future__ import annotations

import json
import socket
import time
import types
from collections.abc import Iterator
from typing import Any

import pytest
import requests
import urllib3
from django.http import HttpResponse
from django.test import override_settings
from django.urls import include, path

import pgq_django as pgq
from pgq_django.models import AccessKey
from pgq_django.sqs.asgi import LeanEndpoint
from tests.conftest import wait_until
from tests.http_server import (
    app_name_of,
    start_uvicorn,
    stop,
    wait_for_server_connections_to_close,
)
from tests.middleware import MARK

from .test_sqs_security import _post, _signed

pytestmark = pytest.mark.slow

LIMIT = 2_621_440  # Django's default DATA_UPLOAD_MAX_MEMORY_SIZE, which the test settings keep


@pytest.fixture
def raw_key(user: Any) -> tuple[AccessKey, str]:
    return AccessKey.objects.create_key(user)


@pytest.fixture
def queue_url(sqs: Any, new_name: Any) -> str:
    url = str(sqs.create_queue(QueueName=new_name())["QueueUrl"])
    sqs.send_message(QueueUrl=url, MessageBody="kept")
    return url


def _name(url: str) -> str:
    return url.rsplit("/", 1)[1]


def _kept(queue_url: str) -> list[Any]:
    return [m.message for m in pgq.read(_name(queue_url), vt=0, qty=10)]


def test_each_server_path_is_what_it_claims(sqs_endpoint: str, sqs_server_path: str) -> None:
    answer = urllib3.request("GET", sqs_endpoint, retries=False)
    assert answer.status == 400
    assert json.loads(answer.data)["__type"].endswith("#InvalidAction")
    assert (MARK in answer.headers) == (sqs_server_path == "django")
    # What is not the SQS endpoint goes through Django's request cycle on both.
    other = urllib3.request("GET", sqs_endpoint.replace("/sqs/", "/_test/waiters"))
    assert other.status == 200
    assert MARK in other.headers


def _oversize_send(queue_url: str) -> bytes:
    return json.dumps({"QueueUrl": queue_url, "MessageBody": "x" * (LIMIT + 1)}).encode()


def test_a_body_over_the_upload_limit_is_refused_and_changes_nothing(
    sqs_endpoint: str, raw_key: tuple[AccessKey, str], queue_url: str
) -> None:
    key, secret = raw_key
    url, headers, body = _signed(
        sqs_endpoint, key, secret, "AmazonSQS.SendMessage", _oversize_send(queue_url)
    )
    status, answer_headers, answer = _post(url, headers, body)
    assert status == 400
    assert answer_headers["x-amzn-query-error"] == "InvalidParameterValue;Sender"
    assert "DATA_UPLOAD_MAX_MEMORY_SIZE" in answer["message"]
    assert _kept(queue_url) == ["kept"]
    key.refresh_from_db()
    assert key.last_used_at is None  # refused before the signature was even looked at


def test_a_chunked_body_over_the_upload_limit_is_refused_and_changes_nothing(
    sqs_endpoint: str, sqs_server_path: str, raw_key: tuple[AccessKey, str], queue_url: str
) -> None:
    """Without a Content-Length, the lean path stops reading at the limit. (Django checks
    only the Content-Length and reads the rest; the view then refuses the message as larger
    than the queue allows.)"""
    key, secret = raw_key
    url, headers, body = _signed(
        sqs_endpoint, key, secret, "AmazonSQS.SendMessage", _oversize_send(queue_url)
    )
    headers = {k: v for k, v in headers.items() if k.lower() != "content-length"}
    chunks = (body[i : i + 65536] for i in range(0, len(body), 65536))
    answer = urllib3.PoolManager().request(
        "POST", url, body=chunks, headers=headers, chunked=True, retries=False
    )
    assert answer.status == 400
    assert answer.headers["x-amzn-query-error"] == "InvalidParameterValue;Sender"
    if sqs_server_path == "lean":
        assert "DATA_UPLOAD_MAX_MEMORY_SIZE" in json.loads(answer.data)["message"]
    assert _kept(queue_url) == ["kept"]


def test_a_long_poll_whose_client_goes_away_stops_and_leases_nothing(
    sqs_endpoint: str, raw_key: tuple[AccessKey, str], queue_url: str
) -> None:
    key, secret = raw_key
    name = _name(queue_url)
    pgq.purge_queue(name)
    base = sqs_endpoint.removesuffix("/sqs/")

    def waiters() -> int:  # this queue's only: another test's poll may still be ending
        answer = requests.get(base + "/_test/waiters", params={"queue": name}, timeout=30)
        return int(answer.json()["waiters"])

    wait = 20  # SQS's longest: the poll ends long before unless the disconnect ends it
    url, headers, body = _signed(
        sqs_endpoint,
        key,
        secret,
        "AmazonSQS.ReceiveMessage",
        json.dumps({"QueueUrl": queue_url, "WaitTimeSeconds": wait}).encode(),
    )
    host, port = url.split("//", 1)[1].split("/", 1)[0].split(":")
    head = "".join(f"{k}: {v}\r\n" for k, v in headers.items() if k.lower() != "content-length")
    raw = (
        f"POST /sqs/ HTTP/1.1\r\nHost: {host}:{port}\r\n{head}Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    before = waiters()
    client = socket.create_connection((host, int(port)))
    try:
        client.sendall(raw)
        wait_until(lambda: waiters() == before + 1, what="the long poll to wait")
    finally:
        client.close()
    gone_at = time.monotonic()
    wait_until(lambda: waiters() == before, what="the abandoned poll to stop")
    # Ended by the disconnect, not by its own end (which would come 20 seconds after it
    # started; stopping takes milliseconds, the margin is for a loaded machine).
    assert time.monotonic() - gone_at < wait
    pgq.send(name, "after")
    assert [m.read_ct for m in pgq.read(name, vt=0, qty=10)] == [1]  # only this read's lease


# -- which URLs the lean path serves (in this process, no server) -------------------------


@pytest.mark.parametrize(
    ("path", "root_path", "served"),
    [
        ("/sqs/", "", True),
        ("/sqs/000000000000/orders", "", True),
        ("/sqs/000000000000/orders.fifo", "", True),
        ("/sqs/000000000000/orders/more", "", False),
        ("/sqs/000000000000", "", False),
        ("/sqs/000000000000/", "", False),
        ("/sqs", "", False),
        ("/sqsx/", "", False),
        ("/v1/queues", "", False),
        ("/site/sqs/", "/site", True),
        ("/site/sqs/000000000000/orders", "/site", True),
        ("/sqs/", "/site", True),  # as Django: a path outside the root is taken as it is
    ],
)
def test_the_lean_path_serves_the_endpoint_and_queue_urls_only(
    path: str, root_path: str, served: bool
) -> None:
    scope = {"type": "http", "path": path, "root_path": root_path}
    assert LeanEndpoint().serves(scope) is served


def _urlconf(urlpatterns: list[Any]) -> types.ModuleType:
    module = types.ModuleType("urls_for_this_test")
    module.urlpatterns = urlpatterns  # type: ignore[attr-defined]
    return module


def _elsewhere(request: Any) -> HttpResponse:
    return HttpResponse("not the SQS endpoint")


@pytest.mark.parametrize(
    "urlpatterns",
    [
        [path("v1/", include("pgq_django.rest.urls"))],  # the endpoint not mounted
        [path("sqs/", _elsewhere), path("sqs/", include("pgq_django.sqs.urls"))],  # shadowed
        [
            path("sqs/<str:a>/<str:b>", _elsewhere),  # queue URLs shadowed
            path("sqs/", include("pgq_django.sqs.urls")),
        ],
    ],
    ids=["not-mounted", "endpoint-shadowed", "queue-urls-shadowed"],
)
def test_the_lean_path_serves_nothing_the_urlconf_routes_elsewhere(urlpatterns: list[Any]) -> None:
    with override_settings(ROOT_URLCONF=_urlconf(urlpatterns)):
        lean = LeanEndpoint()
        assert lean.mount() is None
        assert not lean.serves({"type": "http", "path": "/sqs/", "root_path": ""})


def test_the_lean_path_finds_the_endpoint_where_it_is_mounted() -> None:
    mounted = [path("aws/sqs-compatible/", include("pgq_django.sqs.urls"))]
    with override_settings(ROOT_URLCONF=_urlconf(mounted)):
        lean = LeanEndpoint()
        assert lean.mount() == "/aws/sqs-compatible/"
        assert lean.serves({"type": "http", "path": "/aws/sqs-compatible/", "root_path": ""})
        assert not lean.serves({"type": "http", "path": "/sqs/", "root_path": ""})


# -- what the lean path leaves to Django ---------------------------------------------------


@pytest.fixture(scope="module")
def strict_endpoint(django_db_setup: Any, django_db_blocker: Any) -> Iterator[str]:
    """A lean server whose settings allow only the Host 127.0.0.1 and require HTTPS
    (SECURE_SSL_REDIRECT behind a proxy that sets X-Forwarded-Proto)."""
    proc, base, sock = start_uvicorn(PGQ_TEST_SQS_LEAN="1", PGQ_TEST_STRICT_HOSTS="1")
    try:
        yield base + "/sqs/"
    finally:
        stop(proc, sock)
        with django_db_blocker.unblock():
            wait_for_server_connections_to_close(app_name_of(proc))


def _send_kept(endpoint: str, queue_url: str, raw_key: tuple[AccessKey, str], **headers: str):
    key, secret = raw_key
    body = json.dumps({"QueueUrl": queue_url, "MessageBody": "intruder"}).encode()
    url, signed, body = _signed(endpoint, key, secret, "AmazonSQS.SendMessage", body)
    return urllib3.request(
        "POST", url, body=body, headers={**signed, **headers}, retries=False, redirect=False
    )


def test_over_https_behind_the_proxy_the_lean_path_answers(
    strict_endpoint: str, raw_key: tuple[AccessKey, str], queue_url: str
) -> None:
    answer = _send_kept(strict_endpoint, queue_url, raw_key, **{"X-Forwarded-Proto": "https"})
    assert answer.status == 200, answer.data
    assert MARK not in answer.headers
    assert sorted(_kept(queue_url)) == ["intruder", "kept"]


def test_plain_http_goes_to_django_which_redirects_and_changes_nothing(
    strict_endpoint: str, raw_key: tuple[AccessKey, str], queue_url: str
) -> None:
    answer = _send_kept(strict_endpoint, queue_url, raw_key)
    assert answer.status == 301
    assert answer.headers["Location"].startswith("https://")
    assert _kept(queue_url) == ["kept"]


def test_a_host_outside_allowed_hosts_goes_to_django_and_changes_nothing(
    strict_endpoint: str, raw_key: tuple[AccessKey, str], queue_url: str
) -> None:
    port = strict_endpoint.split(":")[2].split("/")[0]
    forged = f"http://evil.example:{port}/sqs/"
    key, secret = raw_key
    body = json.dumps({"QueueUrl": queue_url, "MessageBody": "intruder"}).encode()
    _url, signed, body = _signed(forged, key, secret, "AmazonSQS.SendMessage", body)
    answer = urllib3.request(
        "POST",
        strict_endpoint,
        body=body,
        headers={**signed, "Host": f"evil.example:{port}", "X-Forwarded-Proto": "https"},
        retries=False,
        redirect=False,
    )
    assert answer.status == 400
    assert _kept(queue_url) == ["kept"]
