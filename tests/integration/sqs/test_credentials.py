"""``manage.py pgq_credentials``: keys printed once, stored encrypted, listed, revoked; and the
queue settings the SQS endpoint added to the functional API."""

from __future__ import annotations

import io
import logging

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command

import pgq_django as pgq
from pgq_django.models import AccessKey


def _run(*args: str) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command("pgq_credentials", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


@pytest.fixture
def alice(db):
    return get_user_model().objects.create_user("alice")


def _printed(out: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in out.splitlines())


def test_create_prints_the_key_pair_once_and_stores_only_its_encrypted_form(alice, caplog):
    caplog.set_level(logging.DEBUG)
    out, _err = _run("create", "alice", "--description", "orders service")
    printed = _printed(out)
    assert set(printed) == {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}
    key = AccessKey.objects.get(key_id=printed["AWS_ACCESS_KEY_ID"])
    secret = printed["AWS_SECRET_ACCESS_KEY"]
    assert key.user == alice and key.description == "orders service"
    assert secret not in key.encrypted_secret
    assert key.secret == secret
    assert key.secret_hint == secret[-4:]
    assert secret not in caplog.text

    listed, _ = _run("list", "alice")
    assert key.key_id in listed and f"…{secret[-4:]}" in listed
    assert secret not in listed and "active" in listed


def test_revoke_stops_every_key_or_one(alice):
    first = _printed(_run("create", "alice")[0])["AWS_ACCESS_KEY_ID"]
    second = _printed(_run("create", "alice")[0])["AWS_ACCESS_KEY_ID"]
    out, _ = _run("revoke", "alice", "--key", first)
    assert "revoked 1 key" in out
    assert not AccessKey.objects.get(key_id=first).is_active
    assert AccessKey.objects.get(key_id=second).is_active
    _run("revoke", "alice")
    assert not AccessKey.objects.filter(user=alice, revoked_at__isnull=True).exists()
    assert "revoked" in _run("list")[0]


def test_unknown_users_and_keys_are_command_errors(alice):
    with pytest.raises(CommandError, match="no user 'bob'"):
        _run("create", "bob")
    with pytest.raises(CommandError, match="no active key"):
        _run("revoke", "alice", "--key", "PGQNOPE")
    assert not AccessKey.objects.exists()


def test_queue_settings_for_sqs_are_checked_by_the_functional_api(db, queue_name):
    queue = pgq.create_queue(
        queue_name, tags={"team": "shop"}, receive_wait_time=5, content_based_deduplication=True
    )
    assert (queue.tags, queue.receive_wait_time, queue.content_based_deduplication) == (
        {"team": "shop"},
        5,
        True,
    )
    for bad in (
        {"tags": {"k": 1}},
        {"tags": {"": "v"}},
        {"tags": {f"k{i}": "v" for i in range(51)}},
        {"tags": "team"},
        {"receive_wait_time": -1},
        {"content_based_deduplication": "yes"},
    ):
        with pytest.raises(pgq.InvalidArgument):
            pgq.alter_queue(queue_name, **bad)
    reloaded = pgq.get_queue(queue_name)
    assert (reloaded.tags, reloaded.receive_wait_time) == ({"team": "shop"}, 5)


def test_metrics_count_delayed_messages_apart(db, queue):
    pgq.send(queue, "now")
    pgq.send(queue, "later", delay=300)
    metrics = pgq.metrics(queue)
    assert (metrics.queue_length, metrics.delayed, metrics.in_flight) == (2, 1, 0)


def test_sqs_settings_are_checked():
    from django.test import override_settings

    from pgq_django.checks import check_settings

    for bad in ({"SQS_ACCOUNT_ID": 123}, {"SQS_ACCOUNT_ID": "12ab"}, {"SQS_ACCOUNT_ID": ""}):
        with override_settings(PGQ=bad):
            assert [e.id for e in check_settings()] == ["pgq_django.E006"]
    for bad in ({"SQS_CLOCK_SKEW": 0}, {"SQS_CLOCK_SKEW": "900"}, {"SQS_CLOCK_SKEW": True}):
        with override_settings(PGQ=bad):
            assert [e.id for e in check_settings()] == ["pgq_django.E007"]
    for bad in ({"SQS_ASGI_LEAN": 1}, {"SQS_ASGI_LEAN": "yes"}, {"SQS_ASGI_LEAN": None}):
        with override_settings(PGQ=bad):
            assert [e.id for e in check_settings()] == ["pgq_django.E008"]
    good = {"SQS_ACCOUNT_ID": "123456789012", "SQS_CLOCK_SKEW": 60, "SQS_ASGI_LEAN": True}
    with override_settings(PGQ=good):
        assert check_settings() == []


def test_owners_and_superusers_need_no_query_for_a_right(db, queue_name, django_assert_num_queries):
    from pgq_django import access

    owner = get_user_model().objects.create_user("owner")
    boss = get_user_model().objects.create_superuser("boss")
    stranger = get_user_model().objects.create_user("stranger")
    queue = pgq.create_queue(queue_name, owner=owner)
    with django_assert_num_queries(0):
        assert access.may(owner, "manage", queue)
        assert access.may(boss, "manage", queue)
    with django_assert_num_queries(1):
        assert not access.may(stranger, "read", queue)
    with pytest.raises(pgq.InvalidArgument):
        access.may(owner, "fly", queue)


def test_the_endpoint_can_be_switched_off(client):
    from django.test import override_settings

    with override_settings(PGQ={"SQS_ENABLED": False}):
        assert client.post("/sqs/", data=b"{}", content_type="application/json").status_code == 404
    answer = client.post("/sqs/", data=b"{}", content_type="application/json")
    assert answer.status_code == 403
    assert answer["x-amzn-query-error"] == "MissingAuthenticationToken;Sender"
