"""``ArchivedMessage.objects``: ORM access, plus retention of archived rows.

Rows arrive in the archive through the live manager's statements (the archive move).
"""

from __future__ import annotations

from datetime import datetime

from django.db import models

from ..sql.delivery import PRUNE_ARCHIVE
from .base import SqlManager


class ArchivedMessageManager(SqlManager):
    """``ArchivedMessage.objects``."""

    def for_queue(self, name: str) -> models.QuerySet:
        return self.filter(queue__name=name)

    def prune(self, *, before: datetime) -> int:
        """Delete archived messages older than their queue's retention and archived before
        ``before``; returns how many."""
        return int(self._one(PRUNE_ARCHIVE, {"before": before}).pruned)
