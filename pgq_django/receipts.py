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
        try:
            msg_id, read_ct = text.split(":")
            return cls(int(msg_id), int(read_ct))
        except (ValueError, AttributeError):
            raise InvalidArgument(
                f"{text!r} is not a receipt; expected '<msg_id>:<read_ct>'."
            ) from None
