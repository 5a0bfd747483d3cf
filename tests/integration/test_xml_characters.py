"""Text XML 1.0 cannot carry (which SQS refuses, and which an SQS Query-protocol answer could
not hold) is refused by the Python API as by every door, in bodies, headers, attributes,
labels and groups, and the refused send stores nothing."""

from __future__ import annotations

from typing import Any

import pytest

import pgq_django as pgq
from pgq_django.exceptions import InvalidArgument, InvalidMessage

BAD = ["\x01", "\x0b", "\ufffe", "\\\x08"]


@pytest.mark.parametrize("bad", BAD)
@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"message": "{}"}, InvalidMessage),
        ({"message": {"k": ["{}"]}}, InvalidMessage),
        ({"message": "ok", "headers": {"note": "{}"}}, InvalidMessage),
        ({"message": "ok", "attributes": {"{}": "v"}}, InvalidMessage),
        ({"message": "ok", "label": "{}"}, InvalidArgument),
        ({"message": "ok", "group": "{}"}, InvalidArgument),
    ],
)
def test_send_refuses_text_xml_cannot_carry_and_stores_nothing(
    queue: Any, bad: str, options: dict[str, Any], error: type[Exception]
) -> None:
    def poison(value: Any) -> Any:
        if isinstance(value, str):
            return value.replace("{}", f"x{bad}y")
        if isinstance(value, dict):
            return {poison(k): poison(v) for k, v in value.items()}
        if isinstance(value, list):
            return [poison(v) for v in value]
        return value

    poisoned = {k: poison(v) for k, v in options.items()}
    message = poisoned.pop("message")
    with pytest.raises(error, match="XML cannot carry"):
        pgq.send(queue.name, message, **poisoned)
    with pytest.raises(error, match="XML cannot carry"):
        pgq.send_batch(queue.name, ["fine", message], **poisoned)
    assert pgq.metrics(queue.name).total_messages == 0


def test_publish_refuses_text_xml_cannot_carry(queue: Any) -> None:
    pgq.create_exchange(queue.name + "_x")
    pgq.bind_queue(queue, queue.name + "_x")
    with pytest.raises(InvalidMessage, match="XML cannot carry"):
        pgq.publish(queue.name + "_x", "a\x01b")
    assert pgq.metrics(queue.name).total_messages == 0


def test_text_xml_can_carry_is_sent_as_it_is(queue: Any) -> None:
    body = {"tab": "\t", "esc": "\\b \\u0001", "last": "\ufffd \U0001fffe \x7f"}
    pgq.send(queue.name, body, headers={"h": "\\f"}, label="l\\u000b", group="g\t")
    (read,) = pgq.read(queue.name)
    assert (read.message, read.headers, read.label) == (body, {"h": "\\f"}, "l\\u000b")
