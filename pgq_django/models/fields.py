"""Database expressions shared by the message models."""

from __future__ import annotations

from django.db import models

from ..store.sql.fragments import MSG_ID_SEQUENCE

__all__ = ["MSG_ID_SEQUENCE", "NextMessageId"]


class NextMessageId(models.Func):
    """``nextval`` of the one global msg_id sequence, used as the column's database default."""

    template = f"nextval('{MSG_ID_SEQUENCE}'::regclass)"
    output_field = models.BigIntegerField()

    def __init__(self) -> None:
        super().__init__()
