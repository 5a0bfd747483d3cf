"""Bad input anywhere gets a clear PgqError and changes nothing (DESIGN.md section 9)."""

from __future__ import annotations

import pytest

import pgq_django as pgq
from pgq_django.models import Message, QueueCounter


@pytest.fixture
def snapshot(queue):
    """The queue's rows before the bad call, to prove nothing changed after it."""
    pgq.send_batch(queue, ["keep-1", "keep-2"])

    def take():
        return (
            list(
                Message.objects.filter(queue=queue)
                .order_by("msg_id")
                .values_list("msg_id", "read_ct", "vt", "message")
            ),
            QueueCounter.objects.filter(queue=queue).count(),
        )

    return take


BAD_CALLS = [
    ("send to a bad name", lambda q: pgq.send("bad name!", 1), pgq.InvalidName),
    ("send to a missing queue", lambda q: pgq.send("missing", 1), pgq.QueueNotFound),
    ("body not JSON", lambda q: pgq.send(q, {1, 2}), pgq.InvalidMessage),
    ("body with NaN", lambda q: pgq.send(q, float("nan")), pgq.InvalidMessage),
    ("body with NUL", lambda q: pgq.send(q, "a\x00b"), pgq.InvalidMessage),
    ("headers not a dict", lambda q: pgq.send(q, 1, headers=["x"]), pgq.InvalidMessage),
    ("attributes with int keys", lambda q: pgq.send(q, 1, attributes={1: "x"}), pgq.InvalidMessage),
    ("negative delay", lambda q: pgq.send(q, 1, delay=-1), pgq.InvalidArgument),
    ("priority as str", lambda q: pgq.send(q, 1, priority="high"), pgq.InvalidArgument),
    ("priority overflow", lambda q: pgq.send(q, 1, priority=2**40), pgq.InvalidArgument),
    ("label not text", lambda q: pgq.send(q, 1, label=5), pgq.InvalidArgument),
    ("too large", lambda q: pgq.send(q, "x" * (1024 * 1024 + 1)), pgq.MessageTooLarge),
    ("batch one bad body", lambda q: pgq.send_batch(q, [1, {2}]), pgq.InvalidMessage),
    ("batch is a dict", lambda q: pgq.send_batch(q, {"a": 1}), pgq.InvalidArgument),
    ("read qty 0", lambda q: pgq.read(q, qty=0), pgq.InvalidArgument),
    ("read negative vt", lambda q: pgq.read(q, vt=-5), pgq.InvalidArgument),
    ("read bad filter key", lambda q: pgq.read(q, filters={"body": 1}), pgq.InvalidArgument),
    (
        "read headers filter not a dict",
        lambda q: pgq.read(q, filters={"headers": ["a"]}),
        pgq.InvalidArgument,
    ),
    ("read missing queue", lambda q: pgq.read("missing"), pgq.QueueNotFound),
    ("pop missing queue", lambda q: pgq.pop("missing"), pgq.QueueNotFound),
    ("delete id not int", lambda q: pgq.delete(q, 1.5), pgq.InvalidArgument),
    ("delete missing queue", lambda q: pgq.delete("missing", 1), pgq.QueueNotFound),
    ("archive negative id", lambda q: pgq.archive(q, -3), pgq.InvalidArgument),
    ("set_vt negative", lambda q: pgq.set_vt(q, 1, -1), pgq.InvalidArgument),
    ("nack bad delay", lambda q: pgq.nack(q, 1, delay="soon"), pgq.InvalidArgument),
    ("read_by_id missing queue", lambda q: pgq.read_by_id("missing", 1), pgq.QueueNotFound),
    (
        "poll negative wait",
        lambda q: pgq.read_with_poll(q, max_poll_seconds=-1),
        pgq.InvalidArgument,
    ),
]


@pytest.mark.parametrize("call, error", [c[1:] for c in BAD_CALLS], ids=[c[0] for c in BAD_CALLS])
def test_bad_input_raises_a_clear_error_and_changes_nothing(queue, snapshot, call, error):
    before = snapshot()
    with pytest.raises(error) as caught:
        call(queue)
    assert isinstance(caught.value, pgq.PgqError)
    assert len(caught.value.message) > 10
    assert snapshot() == before


def test_errors_carry_codes_for_http_and_sqs():
    err = pgq.QueueNotFound("Queue 'x' does not exist.", queue="x")
    assert err.status_code == 404
    assert err.sqs_code == "AWS.SimpleQueueService.NonExistentQueue"
    assert err.as_dict() == {
        "code": "queue_not_found",
        "message": "Queue 'x' does not exist.",
        "details": {"queue": "x"},
    }
    assert pgq.MessageTooLarge().status_code == 413
    assert issubclass(pgq.MessageTooLarge, pgq.InvalidMessage)
