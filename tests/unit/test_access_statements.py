"""The rights statements of pgq_django.store.sql.access, read without a database."""

from __future__ import annotations

from pgq_django.models import Queue
from pgq_django.store.managers.users import with_user_tables
from pgq_django.store.sql import access as rights

FILLED = [
    rights.QUEUE_RIGHT[False],
    rights.QUEUE_RIGHT[True],
    rights.EXCHANGE_RIGHT[False],
    rights.EXCHANGE_RIGHT[True],
    rights.QUEUE_FOR_CALLER,
]


def test_the_caller_s_queue_row_has_every_field_of_the_queue_in_order() -> None:
    """A row of QUEUE_FOR_CALLER becomes a Queue as the ORM loads one: every concrete
    field, by attname, so no field is left to load later with a query of its own."""
    selected = rights.QUEUE_FOR_CALLER.split("SELECT", 1)[1].split("FROM", 1)[0]
    columns = [c.strip().removeprefix("q.") for c in selected.split(",")]
    assert columns == [f.attname for f in Queue._meta.concrete_fields]


def test_the_user_model_s_tables_are_filled_in_quoted() -> None:
    for template in FILLED:
        text = with_user_tables(template, "default")
        assert "{" not in text and "}" not in text
        assert '"auth_user_groups" ug' in text
        assert 'ug."user_id" = %(user_id)s' in text and 'SELECT ug."group_id"' in text
    caller = with_user_tables(rights.QUEUE_FOR_CALLER, "default")
    assert 'JOIN "auth_user" u ON u."id" = k.user_id' in caller
    assert 'u."is_active"' in caller and 'u."is_superuser" = %(superuser)s' in caller


def test_a_filled_in_statement_is_the_same_text_each_time() -> None:
    """The same string object: the runner keys its prepared statements by the text."""
    first = with_user_tables(rights.QUEUE_FOR_CALLER, "default")
    assert with_user_tables(rights.QUEUE_FOR_CALLER, "default") is first


def test_a_target_is_found_by_id_or_by_name() -> None:
    assert "WHERE q.id = %(target)s" in rights.QUEUE_RIGHT[False]
    assert "WHERE q.name = %(target)s" in rights.QUEUE_RIGHT[True]
    assert "WHERE e.id = %(target)s" in rights.EXCHANGE_RIGHT[False]
    assert "WHERE e.name = %(target)s" in rights.EXCHANGE_RIGHT[True]
