"""Messages returned by read/pop/set_vt are ordinary, fully loaded model instances."""

from __future__ import annotations

from typing import Any

import pgq_django as pgq
from pgq_django.models import Message


def test_read_returns_instances_equal_to_what_the_orm_loads(queue: Any) -> None:
    msg_id = pgq.send(queue, {"k": [1, 2]}, headers={"h": "v"}, attributes={"a": 1}, label="x")
    [message] = pgq.read(queue, vt=60)
    loaded = Message.objects.get(pk=msg_id)
    assert message == loaded
    assert message._state.adding is False and message._state.db == "default"
    for field in Message._meta.concrete_fields:
        assert getattr(message, field.attname) == getattr(loaded, field.attname), field.name
    assert message.message == {"k": [1, 2]} and message.headers == {"h": "v"}
    assert message.attributes == {"a": 1} and message.label == "x"
    assert message.queue.name == queue.name  # the foreign key resolves like any other
    assert message.receipt == (msg_id, 1)


def test_returned_instances_refresh_and_save_through_the_orm(queue: Any) -> None:
    pgq.send(queue, {"n": 1})
    [message] = pgq.read(queue)
    message.label = "edited"
    message.save(update_fields=["label"])
    assert Message.objects.get(pk=message.msg_id).label == "edited"
    pgq.nack(queue, message.msg_id, delay=0)
    message.refresh_from_db()
    assert message.read_ct == 1 and message.label == "edited"
