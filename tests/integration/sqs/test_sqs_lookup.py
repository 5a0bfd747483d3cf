"""The lookup of the hot SQS actions answers exactly what the ORM rule answers.

:func:`pgq_django.sqs.lookup.queue_for` runs the named statement ``QUEUE_FOR_CALLER``
(:mod:`pgq_django.store.sql.access`); these tests run both it and the ORM queryset stating the
same rule (:func:`pgq_django.access.queues_for` and :func:`pgq_django.sqs.auth.still_valid`)
on every kind of caller, right and key state, and compare the answers and the Queue they
build, field by field.
"""

from __future__ import annotations

import datetime
import itertools
from dataclasses import replace
from types import SimpleNamespace

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import connection
from django.test.utils import CaptureQueriesContext

import pgq_django as pgq
from pgq_django import access
from pgq_django.models import AccessKey, Queue
from pgq_django.sqs import auth, lookup
from pgq_django.sqs.auth import Caller
from pgq_django.store.sql import access as rights
from tests.conftest import statements_run


def _user(name: str, **flags):
    return get_user_model().objects.create_user(name, **flags)


def _caller(user, key, *, confirmed: bool) -> Caller:
    return Caller(
        key_id=key.key_id, user=user, region="us-east-1", key_pk=key.pk, confirmed=confirmed
    )


@pytest.fixture
def world(db):
    """Queues and users covering every way to hold (or lack) a right."""
    owner, admin, reader, writer, member, stranger, idle = (
        _user("owner"),
        _user("admin", is_superuser=True),
        _user("reader"),
        _user("writer"),
        _user("member"),
        _user("stranger"),
        _user("idle", is_active=False),
    )
    team = Group.objects.create(name="team")
    member.groups.add(team)
    queue = pgq.create_queue("looked_up", owner=owner, max_message_size=4096)
    Queue.objects.filter(pk=queue.pk).update(tags={"team": "a", "n": 1})
    pgq.create_queue("other", owner=stranger)
    pgq.grant_queue_access(queue, reader, read=True, write=False)
    pgq.grant_queue_access(queue, writer, read=False, write=True)
    pgq.grant_queue_access(queue, team, read=True, write=True)
    users = [owner, admin, reader, writer, member, stranger, idle]
    keys = {user.pk: AccessKey.objects.create_key(user)[0] for user in users}
    return users, keys


def _rule_queryset(user, right: str, name: str, key_pk, check_key: bool):
    """The lookup as the ORM states it (access.py's rule and auth.py's key check)."""
    found = access.queues_for(user, right).filter(name=name)
    if check_key:
        found = found.filter(auth.still_valid(key_pk, user))
    return found


def _expected(caller: Caller, right: str, name: str) -> Queue | None:
    found = _rule_queryset(caller.user, right, name, caller.key_pk, not caller.confirmed)
    return next(iter(found), None) if caller.user.is_active else None


def _same(a: Queue | None, b: Queue | None) -> bool:
    if a is None or b is None:
        return a is b
    return all(getattr(a, f.attname) == getattr(b, f.attname) for f in Queue._meta.concrete_fields)


def test_every_caller_right_and_name_gets_the_orm_rule_s_answer(world):
    users, keys = world
    for user, right, name, confirmed in itertools.product(
        users, ("read", "write"), ("looked_up", "other", "absent", "LOOKED_UP"), (True, False)
    ):
        caller = _caller(user, keys[user.pk], confirmed=confirmed)
        got, want = lookup.queue_for(caller, right, name), _expected(caller, right, name)
        assert _same(got, want), (user.username, right, name, confirmed)
        allowed = (
            user.is_active and name in ("looked_up", "other") and access.may(user, right, name)
        )
        assert (got is not None) == allowed, (user.username, right, name, confirmed)


def test_the_queue_it_builds_is_the_one_the_orm_loads(world):
    users, keys = world
    owner = users[0]
    got = lookup.queue_for(_caller(owner, keys[owner.pk], confirmed=False), "write", "looked_up")
    loaded = Queue.objects.get(name="looked_up")
    assert got is not None and got.pk == loaded.pk and not got._state.adding
    for field in Queue._meta.concrete_fields:
        assert getattr(got, field.attname) == getattr(loaded, field.attname), field.name
    assert got.tags == {"team": "a", "n": 1} and got.max_message_size == 4096
    assert isinstance(got.created_at, datetime.datetime) and got.created_at.tzinfo is not None


def test_an_unconfirmed_caller_is_refused_once_its_key_or_owner_changes(world):
    users, keys = world
    owner, admin = users[0], users[1]
    owner_caller = _caller(owner, keys[owner.pk], confirmed=False)
    admin_caller = _caller(admin, keys[admin.pk], confirmed=False)
    assert lookup.queue_for(owner_caller, "read", "looked_up") is not None
    assert lookup.queue_for(admin_caller, "read", "looked_up") is not None

    # The superuser flag the caller was built with no longer holds.
    get_user_model().objects.filter(pk=admin.pk).update(is_superuser=False)
    assert lookup.queue_for(admin_caller, "read", "looked_up") is None
    # A confirmed caller (its row read in this request) is not re-checked here.
    assert lookup.queue_for(replace(admin_caller, confirmed=True), "read", "looked_up") is not None

    keys[owner.pk].revoke()
    assert lookup.queue_for(owner_caller, "read", "looked_up") is None
    other_key = AccessKey.objects.create_key(owner)[0]
    assert lookup.queue_for(replace(owner_caller, key_pk=other_key.pk), "read", "looked_up")
    get_user_model().objects.filter(pk=owner.pk).update(is_active=False)
    assert lookup.queue_for(replace(owner_caller, key_pk=other_key.pk), "read", "looked_up") is None


def test_one_query_and_no_orm_compilation_per_call(world):
    users, keys = world
    member = users[4]
    caller = _caller(member, keys[member.pk], confirmed=False)
    lookup.queue_for(caller, "write", "looked_up")  # compiles this shape
    with CaptureQueriesContext(connection) as queries, statements_run() as statements:
        assert lookup.queue_for(caller, "write", "looked_up") is not None
    assert len(queries) == 1
    assert len(statements) == 1
    assert "pgq_queue_grant" in statements[0] and "pgq_access_key" in statements[0]
    # The named statement, not SQL compiled from a queryset.
    assert statements[0] == rights.QUEUE_FOR_CALLER.format(
        user=_quoted_user_names("auth_user", "id", "auth_user_groups", "user_id", "group_id")
    )


def _quoted_user_names(table, pk, groups, groups_user, groups_group):
    return SimpleNamespace(
        table=f'"{table}"',
        pk=f'"{pk}"',
        is_active='"is_active"',
        is_superuser='"is_superuser"',
        groups=f'"{groups}"',
        groups_user=f'"{groups_user}"',
        groups_group=f'"{groups_group}"',
    )


def test_the_lookup_is_prepared_once_per_connection(world):
    """PostgreSQL plans the lookup (its EXISTS subqueries) once per connection, not per
    request: the statement is among the connection's prepared statements after two calls,
    once. With ``PREPARED_STATEMENTS`` off (behind a transaction pooler) it is never prepared:
    the next transaction may run on a server connection that does not have it."""
    from pgq_django.conf import settings as pgq_settings

    expected = 1 if pgq_settings.PREPARED_STATEMENTS else 0
    users, keys = world
    member = users[4]
    caller = _caller(member, keys[member.pk], confirmed=False)
    for _ in range(3):
        assert lookup.queue_for(caller, "write", "looked_up") is not None
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_prepared_statements "
            "WHERE statement LIKE %s AND statement LIKE %s",
            ["%pgq_queue_grant%", "%pgq_access_key%"],
        )
        assert cursor.fetchone()[0] == expected
