"""Mistakes of a new user's first hour, made through the API: the error says what to do.

A junk receipt says it is not a receipt (not "msg_id must be an integer"), and a batch with
one body that cannot be encoded names that entry. Each refused call changes nothing.
"""

from __future__ import annotations

from typing import Any

import pytest

import pgq_django as pgq

pytestmark = pytest.mark.django_db

# What a user may hold instead of one of our receipts: an SQS receipt handle, a receipt
# mangled by a template, a message id in another script's digits, an id with spaces.
JUNK = ["AQEBwJnKyrHigUMZj6rYigCgxlaS3SLy0a" + "x" * 300, "12:abc", "12:3:4", "\u0661", " 12"]


@pytest.mark.parametrize("junk", JUNK)
@pytest.mark.parametrize("operation", ["delete", "archive", "nack", "set_vt"])
def test_a_junk_receipt_is_refused_as_not_a_receipt_and_changes_nothing(
    queue: Any, junk: str, operation: str
) -> None:
    pgq.send(queue, {"n": 1})
    (leased,) = pgq.read(queue, vt=60)
    args: tuple[Any, ...] = (queue, junk, 0) if operation == "set_vt" else (queue, junk)
    with pytest.raises(pgq.InvalidArgument) as caught:
        getattr(pgq, operation)(*args)
    message = caught.value.message
    assert "must be an integer" not in message
    assert "not a receipt" in message or "neither a receipt nor a message id" in message
    assert "message.receipt" in message  # what to pass instead
    assert "x" * 100 not in message  # a pasted blob is not echoed whole
    # Nothing changed: the lease holds, and the message is still there for its receipt.
    assert pgq.read(queue) == []
    assert pgq.metrics(queue).in_flight == 1
    assert pgq.delete(queue, leased.receipt) is True


def test_a_junk_receipt_in_a_list_is_refused_before_any_id_is_acted_on(queue: Any) -> None:
    pgq.send_batch(queue, [1, 2])
    first, second = pgq.read(queue, qty=2, vt=60)
    with pytest.raises(pgq.InvalidArgument, match="neither a receipt nor a message id"):
        pgq.delete(queue, [first.receipt, "not-a-receipt"])
    assert pgq.metrics(queue).in_flight == 2
    assert pgq.delete(queue, [first.receipt, second.receipt]) == [first.msg_id, second.msg_id]


@pytest.mark.parametrize(
    ("bad", "says"),
    [
        ({1, 2}, "Cannot encode the message body as JSON"),
        (float("nan"), "Cannot encode the message body as JSON"),
        ("a\ud800", "lone surrogate"),
        ("nul \x00 here", "NUL character"),
    ],
    ids=["set", "nan", "surrogate", "nul"],
)
def test_send_batch_names_the_entry_that_cannot_be_encoded(queue: Any, bad: Any, says: str) -> None:
    bodies = [{"n": i} for i in range(5)]
    bodies.insert(3, bad)
    with pytest.raises(pgq.InvalidMessage) as caught:
        pgq.send_batch(queue, bodies)
    assert caught.value.message.startswith("messages[3]: ")
    assert says in caught.value.message
    assert caught.value.details["index"] == 3
    assert pgq.metrics(queue).queue_length == 0  # nothing of the batch was sent
