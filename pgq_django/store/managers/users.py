"""The project's user model, as the rights statements of :mod:`pgq_django.store.sql.access` name it.

Those statements join the user table and the table linking users to groups, whose names
depend on ``AUTH_USER_MODEL``; they are template fields (``{user.table}``, …) filled in here
from the model's ``_meta`` (Django's documented Model _meta API), quoted, once per statement
and process. The filled-in text is then a fixed string: the runner prepares it once per
connection like any module constant.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from django.contrib.auth import get_user_model
from django.db import connections

# (template, alias) -> the template with the user model's names filled in. Bounded by the
# rights statements' few texts times the database aliases.
_filled: dict[tuple[str, str], str] = {}


def with_user_tables(template: str, alias: str) -> str:
    """``template`` with its ``{user.…}`` fields named for ``AUTH_USER_MODEL`` on ``alias``."""
    key = (template, alias)
    found = _filled.get(key)
    if found is None:
        found = _filled[key] = template.format(user=_user_names(alias))
    return found


def _user_names(alias: str) -> SimpleNamespace:
    """The quoted table and column names of the user model and of its link to groups."""
    quote = connections[alias].ops.quote_name
    model = get_user_model()
    meta: Any = model._meta
    groups = meta.get_field("groups")
    link: Any = groups.remote_field.through
    group_model = groups.related_model

    def link_column(target: Any) -> str:
        [column] = [
            f.column
            for f in link._meta.concrete_fields
            if f.is_relation and f.related_model is target
        ]
        return quote(column)

    return SimpleNamespace(
        table=quote(meta.db_table),
        pk=quote(meta.pk.column),
        is_active=quote(meta.get_field("is_active").column),
        is_superuser=quote(meta.get_field("is_superuser").column),
        groups=quote(link._meta.db_table),
        groups_user=link_column(model),
        groups_group=link_column(group_model),
    )
