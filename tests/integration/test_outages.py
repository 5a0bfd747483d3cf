"""A database this process cannot reach: calls fail at once, saying nothing was sent, and
the readiness answer and the Prometheus gauge say so, without asking the database.

The connection settings are pointed, for the test, at a local port nothing listens on, so
every connection attempt really fails (the suite's shared server is never stopped: see
tests/acceptance/test_outage.py for a real outage of a server of the test's own)."""

from __future__ import annotations

import base64
import socket
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.db import connection
from django.test import override_settings
from rest_framework.test import APIClient

import pgq_django as pgq
from pgq_django.readiness import database_status
from pgq_django.store import availability

pytestmark = pytest.mark.django_db(transaction=True)


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])  # closed again when this returns


@pytest.fixture
def unreachable() -> Iterator[Callable[[], None]]:
    """The default connection's settings name a port nothing listens on, until the test
    calls what this yields (or ends)."""
    saved = {key: connection.settings_dict.get(key) for key in ("HOST", "PORT")}

    def reachable_again() -> None:
        connection.close()
        connection.settings_dict.update(saved)

    connection.close()
    connection.settings_dict.update(HOST="127.0.0.1", PORT=str(_closed_port()))
    try:
        yield reachable_again
    finally:
        reachable_again()
        availability.of(connection.alias).back()  # no outage left to the next test


def test_a_call_that_cannot_connect_raises_database_unavailable_and_the_next_fails_at_once(
    queue: Any, unreachable: Callable[[], None]
) -> None:
    with pytest.raises(pgq.DatabaseUnavailable) as first:
        pgq.send(queue, {"n": 1})
    assert first.value.code == "database_unavailable"
    assert "sent nothing" in first.value.message
    assert isinstance(first.value, pgq.ConnectionLost)  # callers catching that still do
    state = database_status()
    assert not state.up and state.attempts == 0 and state.next_attempt_in > 0

    # Before the next round is due, no connection is even attempted: nothing is counted.
    with pytest.raises(pgq.DatabaseUnavailable):
        pgq.read(queue)
    assert database_status().attempts == 0


def test_readiness_and_the_gauge_answer_during_an_outage_and_after_it(
    queue: Any, unreachable: Callable[[], None]
) -> None:
    client = APIClient()
    with override_settings(PGQ={"METRICS_TOKEN": "s3cret"}):
        assert client.get("/v1/ready").status_code == 200
        with pytest.raises(pgq.DatabaseUnavailable):
            pgq.send(queue, {"n": 1})

        ready = client.get("/v1/ready")
        assert ready.status_code == 503
        assert ready.json()["ready"] is False
        assert ready.json()["database"]["up"] is False
        assert ready.json()["database"]["outages"] >= 1
        scraped = client.get("/metrics", HTTP_AUTHORIZATION="Bearer s3cret")
        assert scraped.status_code == 200
        assert 'pgq_database_up{database="default"} 0.0' in scraped.content.decode()

        unreachable()  # the server can be reached again
        record = availability.of(connection.alias)
        record.wait_turn()  # the next round is due: the first call may connect
        assert pgq.send(queue, {"n": 2})
        assert client.get("/v1/ready").status_code == 200
        scraped = client.get("/metrics", HTTP_AUTHORIZATION="Bearer s3cret").content.decode()
        assert 'pgq_database_up{database="default"} 1.0' in scraped
        assert f'pgq_queue_length{{queue="{queue.name}"}} 1.0' in scraped
    # The refused send changed nothing: only the second message is there.
    assert [m.message for m in pgq.read(queue, qty=10)] == [{"n": 2}]


def test_only_one_thread_per_round_tries_to_connect() -> None:
    record = availability.Availability("outage-test")
    assert record.may_try() and record.may_try()  # up: everyone may
    record.lost(OSError("connection refused"))
    assert not record.may_try()  # not due yet
    record.wait_turn()
    assert record.may_try()  # this round's attempt
    assert not record.may_try()  # the others wait for the next round
    record.lost(OSError("connection refused"))
    assert record.status().attempts == 1
    record.back()
    assert record.up and record.may_try() and record.status().outages == 1


def test_the_rest_api_answers_503_when_authentication_cannot_reach_the_database(
    queue: Any, unreachable: Callable[[], None], django_user_model: Any
) -> None:
    """Authentication queries the database before any API call does: during an outage its
    error gets the API's answer, 503 with a Retry-After, not a 500."""
    unreachable()  # reachable for the user to be made
    django_user_model.objects.create_user("outage", password="pw-outage-1", is_staff=True)
    connection.close()
    connection.settings_dict.update(HOST="127.0.0.1", PORT=str(_closed_port()))
    client = APIClient()
    login = base64.b64encode(b"outage:pw-outage-1").decode()
    client.credentials(HTTP_AUTHORIZATION=f"Basic {login}")
    answer = client.get("/v1/queues")
    assert answer.status_code == 503
    assert answer.json()["error"]["code"] == "database_unavailable"
    assert int(answer["Retry-After"]) > 0
