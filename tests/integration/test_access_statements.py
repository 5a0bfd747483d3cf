"""access.may answers with named statements exactly what the ORM rule answers.

:func:`pgq_django.access.may` runs ``QUEUE_RIGHT`` / ``EXCHANGE_RIGHT``
(:mod:`pgq_django.store.sql.access`); :func:`pgq_django.access.queues_for` and
:func:`pgq_django.access.exchanges_for` state the same rule as querysets, for listings.
These tests ask both on every kind of user, right and target, and compare.
"""

from __future__ import annotations

import itertools

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AnonymousUser, Group
from django.db import connection
from django.test.utils import CaptureQueriesContext

import pgq_django as pgq
from pgq_django import access
from pgq_django.models import Exchange, ExchangeGrant
from tests.conftest import statements_run


def _user(name: str, **flags):
    return get_user_model().objects.create_user(name, **flags)


@pytest.fixture
def world(db):
    """Users holding (or lacking) every kind of right, on two queues and two exchanges."""
    owner, admin, reader, writer, manager, member, stranger = (
        _user("owner"),
        _user("admin", is_superuser=True),
        _user("reader"),
        _user("writer"),
        _user("manager"),
        _user("member"),
        _user("stranger"),
    )
    idle, idle_admin = _user("idle", is_active=False), _user("idle_admin", is_active=False)
    idle_admin.is_superuser = True
    idle_admin.save()
    team = Group.objects.create(name="team")
    member.groups.add(team)
    idle.groups.add(team)
    queue = pgq.create_queue("ruled", owner=owner)
    other = pgq.create_queue("unowned")
    pgq.grant_queue_access(queue, reader, read=True, write=False)
    pgq.grant_queue_access(queue, writer, read=False, write=True)
    pgq.grant_queue_access(queue, manager, read=False, write=False, manage=True)
    pgq.grant_queue_access(queue, team, read=True, write=True)
    pgq.grant_queue_access(other, team, read=False, write=False, manage=True)
    exchange = pgq.create_exchange("routed", owner=owner)
    open_exchange = pgq.create_exchange("open")
    ExchangeGrant.objects.create(exchange=exchange, user=writer, can_publish=True)
    ExchangeGrant.objects.create(exchange=exchange, user=reader, can_publish=False)
    ExchangeGrant.objects.create(exchange=open_exchange, group=team, can_publish=True)
    users = [owner, admin, reader, writer, manager, member, stranger, idle, idle_admin, None]
    users.append(AnonymousUser())
    return users, [queue, other], [exchange, open_exchange]


def _orm_answer(user, right, target) -> bool:
    if isinstance(target, Exchange) or (isinstance(target, str) and right == "publish"):
        found = access.exchanges_for(user, right)
    else:
        found = access.queues_for(user, right)
    if isinstance(target, str):
        return found.filter(name=target).exists()
    return found.filter(pk=target.pk).exists()


def _name(user) -> str:
    return getattr(user, "username", None) or "anonymous"


def test_every_user_right_and_queue_gets_the_orm_rule_s_answer(world):
    users, queues, _exchanges = world
    targets = [*queues, *(q.name for q in queues), "absent", "RULED"]
    for user, right, target in itertools.product(users, access.QUEUE_RIGHTS, targets):
        want = _orm_answer(user, right, target)
        assert access.may(user, right, target) is want, (_name(user), right, str(target))


def test_every_user_right_and_exchange_gets_the_orm_rule_s_answer(world):
    users, _queues, exchanges = world
    by_object = itertools.product(users, access.EXCHANGE_RIGHTS, exchanges)
    by_name = itertools.product(users, ["publish"], [*(e.name for e in exchanges), "absent"])
    for user, right, target in itertools.chain(by_object, by_name):
        want = _orm_answer(user, right, target)
        assert access.may(user, right, target) is want, (_name(user), right, str(target))


def test_the_answers_cover_both_yes_and_no_for_each_way_of_holding_a_right(world):
    """The comparisons above are not all-False: each way of holding a right says yes."""
    users, (queue, other), (exchange, open_exchange) = world
    owner, admin, reader, writer, manager, member, stranger, idle = users[:8]
    assert access.may(reader, "read", "ruled") and not access.may(reader, "write", "ruled")
    assert access.may(writer, "write", queue) and not access.may(writer, "read", queue)
    assert access.may(manager, "manage", "ruled") and not access.may(manager, "read", "ruled")
    assert access.may(member, "write", queue) and access.may(member, "manage", other)
    assert access.may(admin, "manage", "unowned") and not access.may(admin, "read", "absent")
    assert access.may(writer, "publish", "routed") and not access.may(reader, "publish", "routed")
    assert access.may(member, "publish", open_exchange)
    assert not access.may(member, "manage", open_exchange)
    assert not access.may(idle, "publish", "open") and not access.may(stranger, "read", queue)
    assert access.may(owner, "manage", exchange)


def test_a_grant_change_is_seen_by_the_next_question(world):
    """Nothing is cached between two questions: the statement reads the grants each time."""
    users, (queue, _other), _exchanges = world
    stranger = users[6]
    team = Group.objects.get(name="team")
    assert not access.may(stranger, "read", "ruled")
    stranger.groups.add(team)
    assert access.may(stranger, "read", "ruled")
    stranger.groups.remove(team)
    pgq.grant_queue_access(queue, stranger, read=True, write=False)
    assert access.may(stranger, "read", queue)
    pgq.revoke_queue_access(queue, stranger)
    assert not access.may(stranger, "read", queue)


def test_one_named_statement_per_question(world):
    users, (queue, _other), _exchanges = world
    member = users[5]
    with CaptureQueriesContext(connection) as queries, statements_run() as statements:
        assert access.may(member, "write", queue)
        assert access.may(member, "publish", "open")
    assert len(queries) == 2
    assert "pgq_queue_grant" in statements[0] and "auth_user_groups" in statements[0]
    assert "pgq_exchange_grant" in statements[1]
