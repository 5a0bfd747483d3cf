"""The REST API's one table of HTTP statuses for PgqErrors (the core errors know no
transport)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import pgq_django as pgq
from pgq_django import exceptions
from pgq_django.rest.exceptions import NotFound, RequestTooLarge, http_status

DOCS = Path(__file__).resolve().parents[2] / "docs" / "reference" / "exceptions.md"


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (exceptions.PgqError, 400),
        (exceptions.InvalidName, 400),
        (exceptions.InvalidArgument, 400),
        (exceptions.InvalidMessage, 400),
        (exceptions.RejectMessage, 400),
        (exceptions.MessageTooLarge, 413),
        (RequestTooLarge, 413),
        (exceptions.QueueNotFound, 404),
        (exceptions.ExchangeNotFound, 404),
        (exceptions.MessageNotFound, 404),
        (exceptions.SubscriptionNotFound, 404),
        (NotFound, 404),
        (exceptions.PermissionDenied, 403),
        (exceptions.QueueAlreadyExists, 409),
        (exceptions.ExchangeAlreadyExists, 409),
        (exceptions.ExchangeInUse, 409),
        (exceptions.StaleReceipt, 409),
        (exceptions.SubscriptionAlreadyExists, 409),
        (exceptions.QueuePaused, 409),
        (exceptions.QueueFull, 409),
        (exceptions.ConnectionLost, 503),
        (exceptions.NotMigrated, 503),
    ],
)
def test_each_error_answers_its_status_as_a_class_and_as_an_instance(error, status) -> None:
    assert http_status(error) == status
    assert http_status(error("x")) == status


def test_a_subclass_answers_its_nearest_listed_ancestors_status() -> None:
    class ProjectQueueMissing(pgq.QueueNotFound):
        pass

    class ProjectError(pgq.PgqError):
        pass

    assert http_status(ProjectQueueMissing()) == 404
    assert http_status(ProjectError()) == 400  # listed nowhere: bad input


def test_the_core_errors_carry_no_http_status() -> None:
    assert not hasattr(exceptions.PgqError, "status_code")
    assert not any(hasattr(cls, "status_code") for cls in vars(exceptions).values())


def test_the_exceptions_page_shows_the_status_each_error_answers() -> None:
    rows = re.findall(r"^\| `(\w+)` \| [^|]+ \| `\w+` \| (\d{3}) \|", DOCS.read_text(), re.M)
    assert len(rows) >= 16
    for name, status in rows:
        assert http_status(getattr(exceptions, name)) == int(status), name
