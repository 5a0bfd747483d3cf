"""``Queue.objects``: the ORM manager, plus the lock on the dead-letter graph."""

from __future__ import annotations

from ..sql.queues import LOCK_DEAD_LETTER_GRAPH
from .base import SqlManager


class QueueManager(SqlManager):
    """``Queue.objects``."""

    def lock_dead_letter_graph(self) -> None:
        """Take turns (until commit) with other changes of dead-letter queues, so two of
        them cannot each pass the cycle check and together close a cycle."""
        self._one(LOCK_DEAD_LETTER_GRAPH, {})
