"""The managers: one method per named statement of :mod:`pgq_django.store.sql`, no SQL text.

- :class:`MessageManager` (``Message.objects``): send, lease, pop, ack, archive, set_vt,
  nack, purge (:mod:`.messages`), the delivery methods (:mod:`.delivery`) and counters
  (:mod:`.counters`); its queryset (:class:`MessageQuerySet`, :mod:`.queryset`) leases with
  any Django lookup.
- :class:`ArchivedMessageManager`, :class:`QueueManager`, :class:`ExchangeManager`.

Every statement runs through :mod:`pgq_django.store.db` and comes back as named rows; the managers
turn them into model instances or plain values for the functional API (:mod:`pgq_django.api`),
which is the only caller.
"""

from __future__ import annotations

from .archive import ArchivedMessageManager
from .base import MessageRef
from .exchanges import ExchangeManager
from .messages import MessageManager
from .queryset import MessageQuerySet
from .queues import QueueManager

__all__ = [
    "ArchivedMessageManager",
    "ExchangeManager",
    "MessageManager",
    "MessageQuerySet",
    "MessageRef",
    "QueueManager",
]
