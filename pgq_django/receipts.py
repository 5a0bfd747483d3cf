"""Receipts: which delivery of a message a consumer holds."""

from __future__ import annotations

from typing import NamedTuple

from .exceptions import InvalidArgument


class Receipt(NamedTuple):
    """Proof of one lease: the message id and the delivery count it was read with.

    delete/archive/set_vt/nack accept a receipt instead of an id; they then act only if the
    message has not been leased again since, which fences out a consumer whose lease expired.
    ``str(receipt)`` is ``"<msg_id>:<read_ct>"`` and :meth:`parse` reads it back.
    """

    msg_id: int
    read_ct: int

    def __str__(self) -> str:
        return f"{self.msg_id}:{self.read_ct}"

    @classmethod
    def parse(cls, text: str) -> Receipt:
        """The receipt ``str(receipt)`` wrote: two whole numbers in ASCII digits, one colon."""
        parts = text.split(":") if isinstance(text, str) else []
        if len(parts) != 2 or not all(p.isascii() and p.isdigit() for p in parts):
            raise InvalidArgument(
                f"{_shown(text)} is not a receipt that pgq_django issued: a receipt is "
                "'<msg_id>:<read_ct>', two whole numbers (the text of message.receipt).",
                field="receipt",
            )
        return cls(int(parts[0]), int(parts[1]))


def not_a_message_reference(value: object) -> InvalidArgument:
    """The error for a value given as a message that is neither a receipt nor a msg_id.

    Says what is accepted rather than "msg_id must be an integer": the value is usually a
    receipt of another system or a mangled one, not a mistyped id.
    """
    return InvalidArgument(
        f"{_shown(value)} is neither a receipt nor a message id: pass message.receipt (or "
        "its text '<msg_id>:<read_ct>'), the Message itself, or its msg_id.",
        field="msg_id",
    )


def _shown(value: object) -> str:
    """``repr(value)``, shortened: an error message need not echo a whole pasted blob."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
