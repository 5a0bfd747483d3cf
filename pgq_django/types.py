"""Type aliases of the public API: what a function means by "a queue", "a message", "seconds".

They are exported by ``pgq_django`` (``pgq.QueueRef`` …) so code that wraps the API can
annotate its own parameters the same way. Models are named as strings, so importing this
module does not import models before Django's app registry is ready.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta
from typing import TYPE_CHECKING, TypeAlias, Union

from .receipts import Receipt

if TYPE_CHECKING:
    from .models import Exchange, Message, Queue

QueueRef: TypeAlias = Union[str, "Queue"]
"""A queue by name or as its model instance."""
ExchangeRef: TypeAlias = Union[str, "Exchange"]
"""An exchange by name or as its model instance."""
MessageRef: TypeAlias = Union[int, str, Receipt, "Message"]
"""One message: its msg_id (an int or a string of digits), a :class:`Receipt`, a receipt
string ``"<msg_id>:<read_ct>"``, or a leased :class:`Message`. Receipts and messages
fence: the call acts only if the message was not leased again since."""
MessageRefs: TypeAlias = MessageRef | Iterable[MessageRef]
"""One message reference, or an iterable of them."""
Duration: TypeAlias = float | int | timedelta
"""A duration in seconds, or a timedelta."""

__all__ = ["Duration", "ExchangeRef", "MessageRef", "MessageRefs", "QueueRef"]
