"""``Queue.objects``: the ORM manager, plus the lock on the dead-letter graph and the rights
statements over queues (:mod:`pgq_django.store.sql.access`)."""

from __future__ import annotations

from typing import Any

from django.db.models.functions import Lower

from ... import seams
from .. import db
from ..sql import access as rights
from ..sql.queues import LOCK_DEAD_LETTER_GRAPH, RESET_LIMIT
from .base import SqlManager
from .users import with_user_tables


class QueueManager(SqlManager):
    """``Queue.objects``."""

    def name_folded_as(self, name: str) -> str | None:
        """The name of the queue whose name, folded to lower case as PGMQ folds it, is
        ``name``'s (at most one: the table's unique index on ``lower(name)``)."""
        found: str | None = (
            self.annotate(folded=Lower("name"))
            .filter(folded=name.lower())
            .values_list("name", flat=True)
            .first()
        )
        return found

    def visibility_timeouts(self, names: list[str]) -> dict[str, float]:
        """Queue name -> its visibility timeout, for the named queues that exist."""
        rows = self.using(self._db_alias()).filter(name__in=names)
        return {name: float(vt) for name, vt in rows.values_list("name", "visibility_timeout")}

    def limits(self, names: list[str]) -> list[tuple[str, float | None, int | None]]:
        """(name, rate_limit, concurrency_limit) of each named queue that exists."""
        rows = self.using(self._db_alias()).filter(name__in=names)
        return list(rows.values_list("name", "rate_limit", "concurrency_limit"))

    def paused_among(self, names: list[str]) -> set[str]:
        """Which of the named queues are paused."""
        rows = self.using(self._db_alias()).filter(name__in=names, paused=True)
        return set(rows.values_list("name", flat=True))

    def lock_dead_letter_graph(self) -> None:
        """Take turns (until commit) with other changes of dead-letter queues, so two of
        them cannot each pass the cycle check and together close a cycle."""
        self._one(LOCK_DEAD_LETTER_GRAPH, {})

    def reset_limit(self, queue_id: int) -> None:
        """Forget the queue's limit row (its limits changed): the next limited read makes it
        again from the queue's current leases."""
        db.run_rowcount(RESET_LIMIT, {"queue_id": queue_id}, self._db_alias())

    def has_right(
        self, right: str, target: Any, *, by_name: bool, user_id: Any, superuser: bool
    ) -> bool:
        """Whether active user ``user_id`` has ``right`` on the queue named (``by_name``)
        or with id ``target``; False when there is no such queue. The caller
        (:func:`pgq_django.access.may`) has checked the right's name and the user's state."""
        statement = with_user_tables(rights.QUEUE_RIGHT[by_name], self._db_alias())
        params = {"target": target, "right": right, "user_id": user_id, "superuser": superuser}
        return self._one(statement, params) is not None

    def for_caller(
        self,
        name: str,
        right: str,
        *,
        user_id: Any,
        superuser: bool,
        key_id: Any,
        check_key: bool,
    ) -> Any:
        """Queue ``name`` if active user ``user_id`` has ``right`` on it and, with
        ``check_key``, access key ``key_id`` is still live for that user (unrevoked, owner
        active, the same superuser flag); None otherwise. One statement: the SQS endpoint
        asks it before each hot action (:mod:`pgq_django.sqs.lookup`).

        The queue is built from the row as ``Model.from_db`` would
        (:func:`pgq_django.seams.instance_loader`); the row's jsonb and timestamps arrive
        decoded by psycopg (binary results), as the ORM's converters would leave them.
        """
        alias = self._db_alias()
        params = {
            "name": name,
            "right": right,
            "user_id": user_id,
            "superuser": superuser,
            "key_id": key_id,
            "check_key": check_key,
        }
        row = self._one(with_user_tables(rights.QUEUE_FOR_CALLER, alias), params)
        if row is None:
            return None
        return seams.instance_loader(self.model, alias, row._fields)(row)
