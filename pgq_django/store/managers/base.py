"""What every manager shares: the database it runs on, the runner, and row → model."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import models

from ... import seams
from ...conf import settings
from .. import db
from ..connection import DjangoConnection
from ..sql.fragments import MESSAGE_COLUMNS
from ..sql.params import Receipt
from .operations import Operations

# A reference to one message: (msg_id, read_ct or None). read_ct fences stale receipts.
MessageRef = Receipt


class SqlManager(models.Manager):
    """Runs named statements of :mod:`pgq_django.store.sql` on the manager's database.

    The database is the one the manager was bound to (``db_manager(alias)``), else
    ``PGQ["DATABASE"]``. Every statement goes through :mod:`pgq_django.store.db`.
    """

    def _db_alias(self) -> str:
        return self.db if self._db else settings.DATABASE

    def _ops(self) -> Operations:
        """The operations shared with the Spark pipeline, on this manager's database."""
        alias = self._db_alias()
        found = _OPERATIONS.get(alias)
        if found is None:
            found = _OPERATIONS[alias] = Operations(DjangoConnection(alias))
        return found

    def _one(self, statement: Any, params: Any = None, *, prepare: bool = True) -> Any:
        """The statement's first row (named fields), or None."""
        return db.run_one(statement, params, self._db_alias(), prepare=prepare)

    def _all(
        self, statement: Any, params: Any = None, *, prepare: bool = True, named: bool = True
    ) -> list[Any]:
        """Every row of the statement (named fields; plain tuples with ``named=False``)."""
        return db.run_all(statement, params, self._db_alias(), prepare=prepare, named=named)

    def _instances(
        self, rows: Sequence[Sequence[Any]], offset: int = 0, queue_name: str | None = None
    ) -> list[Any]:
        """Turn RETURNING rows into model instances (jsonb arrives decoded: binary results).

        The rows carry every column of MESSAGE_COLUMNS from ``offset`` on; a field after
        them, such as ``Message.dead_letter_origin``, is deferred: it loads on first access.
        A row whose first column is NULL (no message) is skipped. The instances are what
        ``Model.from_db`` makes (:func:`pgq_django.seams.instance_loader` may build them
        without ``Model.__init__``); a model whose fields do not start with MESSAGE_COLUMNS
        always goes through ``from_db``. ``queue_name``, when given, is what
        ``Message.queue_name`` answers without a query.
        """
        model = self.model
        alias = self._db_alias()
        width = len(MESSAGE_COLUMNS)
        end = offset + width
        if _plain_columns(model):
            load = seams.instance_loader(model, alias, MESSAGE_COLUMNS)
        else:
            from_db = model.from_db

            def load(values: Any) -> Any:
                return from_db(alias, MESSAGE_COLUMNS, list(values))

        objs = []
        for row in rows:
            if row[offset] is None:
                continue
            obj = load(row if offset == 0 and len(row) == width else row[offset:end])
            if queue_name is not None:
                obj.__dict__["_queue_name"] = queue_name
            objs.append(obj)
        return objs


_PLAIN: dict[type, bool] = {}
# Database alias -> the shared operations on its Django connection (few aliases, kept).
_OPERATIONS: dict[str, Operations] = {}


def _plain_columns(model: type[models.Model]) -> bool:
    """Whether the model's concrete fields start with MESSAGE_COLUMNS, in order.

    Columns after them (``Message.dead_letter_origin``) are left out of the statements'
    rows and load on first access, like a deferred field.
    """
    if model not in _PLAIN:
        attnames = tuple(f.attname for f in model._meta.concrete_fields)
        _PLAIN[model] = attnames[: len(MESSAGE_COLUMNS)] == MESSAGE_COLUMNS
    return _PLAIN[model]
