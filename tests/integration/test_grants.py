"""Grants: who may read, write, manage a queue and publish through an exchange."""

from __future__ import annotations

import itertools

import pytest
from django.contrib.auth.models import AnonymousUser, Group, User

import pgq_django as pgq
from pgq_django import access
from pgq_django.models import AccessKey, ExchangeGrant, QueueGrant
from pgq_django.rest.exceptions import http_status


@pytest.fixture
def users(db):
    return {
        "owner": User.objects.create_user("owner"),
        "alice": User.objects.create_user("alice"),
        "bob": User.objects.create_user("bob"),
        "root": User.objects.create_superuser("root", password="x"),
    }


@pytest.fixture
def owned_queue(users, make_queue):
    return make_queue(owner=users["owner"])


@pytest.mark.parametrize(
    ("read", "write", "manage"), list(itertools.product([False, True], repeat=3))
)
def test_a_user_grant_gives_exactly_its_rights(users, owned_queue, read, write, manage):
    alice = users["alice"]
    pgq.grant_queue_access(owned_queue, alice, read=read, write=write, manage=manage)
    assert access.may(alice, "read", owned_queue) is read
    assert access.may(alice, "write", owned_queue) is write
    assert access.may(alice, "manage", owned_queue) is manage
    assert access.may(users["bob"], "read", owned_queue) is False


@pytest.mark.parametrize("right", access.QUEUE_RIGHTS)
def test_owners_and_superusers_have_every_right_without_a_grant(users, owned_queue, right):
    assert access.may(users["owner"], right, owned_queue)
    assert access.may(users["root"], right, owned_queue)
    assert access.may(users["owner"], right, owned_queue.name)
    assert not access.may(users["alice"], right, owned_queue)


@pytest.mark.parametrize("right", access.QUEUE_RIGHTS)
def test_anonymous_and_inactive_users_have_no_rights(users, owned_queue, right):
    assert not access.may(None, right, owned_queue)
    assert not access.may(AnonymousUser(), right, owned_queue)
    owner = users["owner"]
    owner.is_active = False
    owner.save()
    assert not access.may(owner, right, owned_queue)
    root = users["root"]
    root.is_active = False
    root.save()
    assert not access.may(root, right, owned_queue)


def test_group_grants_reach_every_member_and_add_up_with_user_grants(users, owned_queue):
    readers = Group.objects.create(name="readers")
    users["alice"].groups.add(readers)
    pgq.grant_queue_access(owned_queue, readers, read=True, write=False)
    pgq.grant_queue_access(owned_queue, users["alice"], read=False, write=True)
    alice = users["alice"]
    assert access.may(alice, "read", owned_queue)  # through the group
    assert access.may(alice, "write", owned_queue)  # through her own grant
    assert not access.may(alice, "manage", owned_queue)
    assert not access.may(users["bob"], "read", owned_queue)


def test_granting_again_replaces_rather_than_adds(users, owned_queue):
    alice = users["alice"]
    pgq.grant_queue_access(owned_queue, alice, manage=True)
    pgq.grant_queue_access(owned_queue, "alice", read=True, write=False, manage=False)
    assert QueueGrant.objects.filter(queue=owned_queue).count() == 1
    assert not access.may(alice, "manage", owned_queue)
    assert not access.may(alice, "write", owned_queue)


def test_revoke_removes_one_grantee_and_reports_whether_it_had_one(users, owned_queue):
    pgq.grant_queue_access(owned_queue, users["alice"])
    pgq.grant_queue_access(owned_queue, users["bob"])
    assert pgq.revoke_queue_access(owned_queue, users["alice"]) is True
    assert pgq.revoke_queue_access(owned_queue, users["alice"]) is False
    assert not access.may(users["alice"], "read", owned_queue)
    assert access.may(users["bob"], "read", owned_queue)


def test_reset_leaves_only_the_owner(users, owned_queue):
    group = Group.objects.create(name="g")
    pgq.grant_queue_access(owned_queue, users["alice"], manage=True)
    pgq.grant_queue_access(owned_queue, group)
    assert pgq.reset_queue_access(owned_queue) == 2
    assert not access.may(users["alice"], "read", owned_queue)
    assert access.may(users["owner"], "manage", owned_queue)


@pytest.mark.parametrize(
    "to", [None, 42, "", "no_such_user", object()], ids=["none", "int", "empty", "unknown", "obj"]
)
def test_a_grant_to_something_that_is_not_a_grantee_changes_nothing(users, owned_queue, to):
    with pytest.raises(pgq.InvalidArgument):
        pgq.grant_queue_access(owned_queue, to)
    assert not QueueGrant.objects.exists()


def test_rights_must_be_booleans(users, owned_queue):
    with pytest.raises(pgq.InvalidArgument):
        pgq.grant_queue_access(owned_queue, users["alice"], read="yes")
    assert not QueueGrant.objects.exists()


def test_grants_on_unknown_queues_and_exchanges_raise(users):
    with pytest.raises(pgq.QueueNotFound):
        pgq.grant_queue_access("nope", users["alice"])
    with pytest.raises(pgq.ExchangeNotFound):
        pgq.grant_publish_access("nope", users["alice"])


def test_dropping_a_queue_drops_its_grants(users, owned_queue):
    pgq.grant_queue_access(owned_queue, users["alice"])
    pgq.drop_queue(owned_queue)
    assert not QueueGrant.objects.exists()


def test_publish_rights(users, db):
    x = pgq.create_exchange("events", owner=users["owner"])
    team = Group.objects.create(name="team")
    users["bob"].groups.add(team)
    assert access.may(users["owner"], "publish", x)
    assert access.may(users["root"], "publish", "events")
    assert not access.may(users["alice"], "publish", x)
    pgq.grant_publish_access(x, users["alice"])
    pgq.grant_publish_access(x, team)
    pgq.grant_publish_access(x, users["alice"])  # again: still one row
    assert ExchangeGrant.objects.filter(exchange=x).count() == 2
    assert access.may(users["alice"], "publish", "events")
    assert access.may(users["bob"], "publish", x)
    assert not access.may(users["alice"], "manage", x)  # only owners manage exchanges
    assert access.may(users["owner"], "manage", x)
    assert pgq.revoke_publish_access(x, users["alice"]) is True
    assert pgq.revoke_publish_access(x, users["alice"]) is False
    assert not access.may(users["alice"], "publish", x)
    pgq.drop_exchange(x)
    assert not ExchangeGrant.objects.exists()


def test_queue_and_exchange_listings_follow_the_same_rule(users, make_queue):
    alice = users["alice"]
    mine = make_queue(owner=alice)
    granted = make_queue()
    read_only = make_queue()
    hidden = make_queue()
    pgq.grant_queue_access(granted, alice, manage=True)
    pgq.grant_queue_access(read_only, alice, write=False)
    group = Group.objects.create(name="g")
    alice.groups.add(group)
    pgq.grant_queue_access(granted, group)  # a second path to the same queue
    readable = list(access.queues_for(alice, "read").values_list("name", flat=True))
    assert sorted(readable) == sorted([mine.name, granted.name, read_only.name])
    managed = set(access.queues_for(alice, "manage").values_list("name", flat=True))
    assert managed == {mine.name, granted.name}
    assert hidden.name not in readable
    assert access.queues_for(users["root"], "read").count() == 4


def test_unknown_rights_and_names_are_refused(users, owned_queue):
    with pytest.raises(pgq.InvalidArgument):
        access.may(users["owner"], "delete", owned_queue)
    assert access.may(users["root"], "read", "no_such_queue") is False


def test_require_raises_permission_denied_with_details(users, owned_queue):
    access.require(users["owner"], "manage", owned_queue)
    with pytest.raises(pgq.PermissionDenied) as caught:
        access.require(users["alice"], "write", owned_queue)
    assert http_status(caught.value) == 403  # what the REST API answers
    assert caught.value.details == {"right": "write", "target": owned_queue.name, "kind": "queue"}


# -- access keys ------------------------------------------------------------------------------


def test_access_key_secret_is_stored_encrypted_and_recoverable(users, settings):
    key, secret = AccessKey.objects.create_key(users["alice"])
    stored = AccessKey.objects.get(pk=key.pk)
    assert secret not in stored.encrypted_secret
    assert stored.secret == secret
    assert stored.secret_hint == secret[-4:]
    assert key.key_id.startswith("PGQ") and len(key.key_id) == 20


def test_access_keys_survive_secret_key_rotation_through_fallbacks(users, settings):
    key, secret = AccessKey.objects.create_key(users["alice"])
    old = settings.SECRET_KEY
    settings.SECRET_KEY = "rotated-" + old
    settings.SECRET_KEY_FALLBACKS = [old]
    assert AccessKey.objects.get(pk=key.pk).secret == secret
    settings.SECRET_KEY_FALLBACKS = []
    from cryptography.fernet import InvalidToken

    with pytest.raises(InvalidToken):
        _ = AccessKey.objects.get(pk=key.pk).secret


def test_revoked_keys_and_keys_of_inactive_users_are_not_active(users):
    k1, _ = AccessKey.objects.create_key(users["alice"])
    AccessKey.objects.create_key(users["bob"])
    k3, _ = AccessKey.objects.create_key(users["owner"])
    k1.revoke()
    users["bob"].is_active = False
    users["bob"].save()
    assert list(AccessKey.objects.active()) == [k3]
    assert not AccessKey.objects.get(pk=k1.pk).is_active
