"""The managers: one method per named statement of :mod:`pgq_django.store.sql`, no SQL text.

- :class:`MessageManager` (``Message.objects``): send, lease, pop, ack, archive, set_vt,
  nack, purge (:mod:`.messages`), the delivery methods (:mod:`.delivery`) and counters
  (:mod:`.counters`); its queryset (:class:`MessageQuerySet`, :mod:`.queryset`) leases with
  any Django lookup.
- :class:`ArchivedMessageManager`, :class:`QueueManager`, :class:`ExchangeManager`.
- :class:`WorkflowManager` (``Dependency.objects``), :class:`GroupManager`
  (``WorkflowGroup.objects``) and :class:`ScheduleManager` (``Schedule.objects``, with the
  leader's claim on a due schedule).
- :class:`Operations` (:mod:`.operations`): what the managers share with the Spark
  pipeline (:class:`Pipeline`, :mod:`.pipeline`), on any connection of
  :mod:`pgq_django.store.connection`.

Every statement runs through :mod:`pgq_django.store.db` (or, for :class:`Operations`, the
connection it is given) and comes back as named rows; the managers turn them into model
instances or plain values for the functional API (:mod:`pgq_django.api`) and the worker.
"""

from __future__ import annotations

from .archive import ArchivedMessageManager
from .base import MessageRef
from .exchanges import ExchangeManager
from .messages import MessageManager
from .operations import Operations
from .pipeline import Pipeline
from .queryset import MessageQuerySet
from .queues import QueueManager
from .schedules import ScheduleManager
from .workflows import GroupManager, WorkflowManager

__all__ = [
    "ArchivedMessageManager",
    "ExchangeManager",
    "GroupManager",
    "MessageManager",
    "MessageQuerySet",
    "MessageRef",
    "Operations",
    "Pipeline",
    "QueueManager",
    "ScheduleManager",
    "WorkflowManager",
]
