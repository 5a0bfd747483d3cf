"""``Exchange.objects``: the ORM manager, plus the one-statement publish and the right on an
exchange (:mod:`pgq_django.store.sql.access`)."""

from __future__ import annotations

from typing import Any

from ...conf import settings
from ..sql import access as rights
from ..sql.params import publish_params
from .base import SqlManager
from .users import with_user_tables


class ExchangeManager(SqlManager):
    """``Exchange.objects``: adds the one-statement publish."""

    def publish_body(self, exchange: str, body: str, *, size: int, **options: Any) -> Any:
        """Route one JSON-encoded body; returns (exchange_id or None, [msg_id …], too_large,
        full).

        ``too_large`` names a matched queue whose max_message_size the body exceeds and
        ``full`` one that holds its max_length messages; nothing is inserted then. With a
        ``dedup_id`` each routed queue deduplicates the copy as a send would.
        """
        key = options.pop("routing_key")
        params = publish_params(
            exchange,
            body,
            size=size,
            routing_key=key,
            channel=settings.NOTIFY_CHANNEL,
            options=options,
        )
        if params.get("dedup_id") is None:
            [row] = self._ops().publish([params])
        else:
            [row] = self._ops().publish_deduplicated([params])
        return row.exchange_id, list(row.msg_ids or []), row.too_large, row.queue_full

    def has_right(
        self, right: str, target: Any, *, by_name: bool, user_id: Any, superuser: bool
    ) -> bool:
        """Whether active user ``user_id`` has ``right`` on the exchange named (``by_name``)
        or with id ``target``; False when there is no such exchange. The caller
        (:func:`pgq_django.access.may`) has checked the right's name and the user's state."""
        statement = with_user_tables(rights.EXCHANGE_RIGHT[by_name], self._db_alias())
        params = {"target": target, "right": right, "user_id": user_id, "superuser": superuser}
        return self._one(statement, params) is not None
