"""Dependants are released by the acknowledgement itself, whichever door it comes through,
with no worker and no leader running: the Python API, REST, the PGMQ functions (SQS is in
tests/acceptance/sqs/test_sqs_workflows.py). After each ack the dependant is readable at once;
a refused or rolled-back ack releases nothing; two members of a group acknowledged at once
in two transactions release its follow-up exactly once."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from django.contrib.auth import get_user_model
from django.db import connection, transaction
from rest_framework.test import APIClient

import pgq_django as pgq
from pgq_django.models import ArchivedMessage, Dependency, Message
from tests.conftest import _conninfo, direct_dsn, wait_until
from tests.pgmq_support import pgmq_sql  # noqa: F401  (a fixture)


def chain(queue: Any) -> tuple[int, int]:
    """A message and one that waits for it (``after=``); both in ``queue``."""
    first = pgq.send(queue, {"step": 1})
    return first, pgq.send(queue, {"step": 2}, after=[first])


def group(queue: Any, then_queue: Any) -> tuple[list[int], int]:
    """A group of two in ``queue`` with a follow-up in ``then_queue``: (members, follow-up)."""
    gid = pgq.group(queue, ["a", "b"], then=(then_queue.name, "after"))
    members = list(
        Dependency.objects.filter(group_id=gid).order_by("msg_id").values_list("msg_id", flat=True)
    )
    status = pgq.group_status(gid)
    assert status.then_msg_id is not None
    return members, status.then_msg_id


def readable(queue: Any) -> list[int]:
    """What a consumer of ``queue`` gets now (leased, so a second call sees it no more)."""
    return [m.msg_id for m in pgq.read(queue, qty=10)]


def take(queue: Any, msg_id: int) -> Any:
    """Lease ``msg_id`` of ``queue`` (the only visible message there) and return it."""
    (m,) = pgq.read(queue)
    assert m.msg_id == msg_id
    return m


ACKS: dict[str, Callable[[Any, Any], Any]] = {
    "delete": lambda q, m: pgq.delete(q, m.receipt),
    "delete_many": lambda q, m: pgq.delete(q, [m.receipt]),
    "archive": lambda q, m: pgq.archive(q, m.receipt),
    "archive_many": lambda q, m: pgq.archive(q, [m.receipt]),
    "complete": lambda q, m: pgq.complete(q, m.receipt, result={"ok": True}),
}


@pytest.mark.parametrize("ack", sorted(ACKS))
def test_a_chain_acked_through_the_python_api_releases_its_dependant_at_once(make_queue, ack):
    q = make_queue()
    first, second = chain(q)
    assert ACKS[ack](q, take(q, first))
    assert readable(q) == [second]
    assert Dependency.objects.get(msg_id=first, dependant_id=second).outcome in (
        "acked",
        "archived",
    )


@pytest.mark.parametrize("ack", sorted(ACKS))
def test_a_group_acked_through_the_python_api_releases_its_follow_up_once(make_queue, ack):
    q, done = make_queue(), make_queue()
    (a, b), follow_up = group(q, done)
    assert ACKS[ack](q, take_one_of(q, a))
    assert readable(done) == []  # one member left
    assert ACKS[ack](q, take_one_of(q, b))
    assert readable(done) == [follow_up]


def take_one_of(queue: Any, msg_id: int) -> Any:
    """Lease ``msg_id`` from a queue whose other visible messages go back at once."""
    found = pgq.read(queue, qty=10)
    chosen = next(m for m in found if m.msg_id == msg_id)
    for other in found:
        if other.msg_id != msg_id:
            pgq.set_vt(queue, other.receipt, 0)
    return chosen


def test_an_archive_on_ack_queue_releases_as_its_ack_archives(make_queue):
    q = make_queue(archive_on_ack=True)
    first, second = chain(q)
    assert pgq.delete(q, take(q, first).receipt)
    assert ArchivedMessage.objects.get(msg_id=first).outcome == "acked"
    assert readable(q) == [second]


def test_a_pop_releases_what_waits_for_the_popped_message(make_queue):
    q = make_queue()
    first, second = chain(q)
    assert [m.msg_id for m in pgq.pop(q)] == [first]
    assert readable(q) == [second]


def test_a_refused_ack_releases_nothing(make_queue):
    q = make_queue()
    first, second = chain(q)
    stale = take(q, first).receipt
    pgq.set_vt(q, first, 0)
    take(q, first)  # leased again: the first receipt is stale
    assert pgq.delete(q, stale) is False
    assert readable(q) == []
    assert Message.objects.get(msg_id=second).vt.year >= 9000
    assert Dependency.objects.get(msg_id=first).outcome is None


def test_an_ack_rolled_back_rolls_its_release_back(make_queue):
    q = make_queue()
    first, second = chain(q)
    m = take(q, first)
    with pytest.raises(RuntimeError), transaction.atomic():
        assert pgq.delete(q, m.receipt)
        assert Message.objects.get(msg_id=second).vt.year < 9000  # released in the ack
        raise RuntimeError("the handler's transaction fails after its ack")
    assert Message.objects.filter(msg_id=first).exists()
    assert Message.objects.get(msg_id=second).vt.year >= 9000
    assert Dependency.objects.get(msg_id=first).outcome is None


def test_a_dependency_dead_lettered_by_a_nack_fails_its_dependant_at_once(make_queue):
    dlq = make_queue()
    q = make_queue(dead_letter_queue=dlq.name, max_retries=0)
    first, second = chain(q)
    assert pgq.nack(q, take(q, first).receipt)
    assert Message.objects.get(msg_id=first).queue_id == dlq.pk
    moved = Message.objects.get(msg_id=second)
    assert moved.queue_id == dlq.pk
    assert f"dependency {first} ended dead" in moved.headers["pgq_dead_letter"]["last_error"]


def test_a_chain_of_failures_is_followed_to_its_end_in_one_ack(make_queue):
    q = make_queue()
    a = pgq.send(q, "a")
    b = pgq.send(q, "b", after=[a])
    c = pgq.send(q, "c", after=[b])
    d = pgq.send(q, "d", after=[c])
    assert pgq.cancel(q, a)
    outcomes = dict(
        ArchivedMessage.objects.filter(msg_id__in=[b, c, d]).values_list("msg_id", "outcome")
    )
    assert outcomes == {b: "dead", c: "dead", d: "dead"}
    assert f"dependency {c} ended dead" in ArchivedMessage.objects.get(msg_id=d).error


def _trigger_calls(statement: str, params: list[Any]) -> dict[str, int]:
    """Run ``statement`` under EXPLAIN ANALYZE: how often each trigger's function ran."""
    with connection.cursor() as cur:
        cur.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + statement, params)
        (plan,) = cur.fetchone()[0]
    return {t["Trigger Name"]: t["Calls"] for t in plan.get("Triggers", [])}


def test_a_plain_ack_runs_no_trigger_function_and_an_awaited_one_runs_it_once(make_queue):
    q = make_queue()
    plain = pgq.send(q, "nothing waits for me")
    first, _second = chain(q)
    delete = "DELETE FROM pgq_message WHERE msg_id = %s"
    assert _trigger_calls(delete, [plain]).get("pgq_awaited_deleted", 0) == 0
    assert _trigger_calls(delete, [first]) == {"pgq_awaited_deleted": 1}


def _api(user: Any) -> APIClient:
    api = APIClient()
    api.force_authenticate(user)
    return api


def test_a_chain_and_a_group_acked_over_rest_release_at_once(make_queue):
    owner = get_user_model().objects.create_user("release_rest_owner")
    q, done = make_queue(owner=owner), make_queue(owner=owner)
    api = _api(owner)
    first, second = chain(q)
    m = take(q, first)
    answer = api.put(f"/v1/queues/{q.name}/messages/{m.msg_id}:{m.read_ct}/ack")
    assert answer.status_code == 204, answer.content
    assert readable(q) == [second]
    pgq.delete(q, second)
    (a, b), follow_up = group(q, done)
    leased = {m.msg_id: m for m in pgq.read(q, qty=10)}
    assert set(leased) == {a, b}
    refused = _api(get_user_model().objects.create_user("release_rest_stranger")).put(
        f"/v1/queues/{q.name}/messages/{a}/ack"
    )
    assert refused.status_code in (403, 404)
    assert Dependency.objects.get(msg_id=a).outcome is None  # the refusal changed nothing
    answer = api.put(
        f"/v1/queues/{q.name}/messages/ack",
        {"ids": [f"{m.msg_id}:{m.read_ct}" for m in leased.values()]},
        format="json",
    )
    assert answer.status_code in (200, 204), answer.content
    assert readable(done) == [follow_up]


def _pgmq(dsn: str, text: str, *params: Any) -> Any:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(text, params).fetchone()
        return row[0] if row else None


@pytest.mark.parametrize("function", ["delete", "archive"])
def test_a_chain_and_a_group_acked_by_the_pgmq_functions_release_at_once(
    pgmq_sql,  # noqa: F811
    make_queue,
    function,
):
    q, done = make_queue(), make_queue()
    first, second = chain(q)
    assert _pgmq(pgmq_sql, f"SELECT pgmq.{function}(%s, %s::bigint)", q.name, first) is True
    assert readable(q) == [second]
    (a, b), follow_up = group(q, done)
    assert _pgmq(pgmq_sql, f"SELECT pgmq.{function}(%s, %s::bigint)", q.name, a) is True
    assert readable(done) == []
    taken = _pgmq(
        pgmq_sql, f"SELECT array_agg(x) FROM pgmq.{function}(%s, %s::bigint[]) x", q.name, [b]
    )
    assert taken == [b]
    assert readable(done) == [follow_up]


def _locked_waiters() -> int:
    """Sessions of the test database waiting for a row or other lock now."""
    with connection.cursor() as cur:
        cur.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )
        return int(cur.fetchone()[0])


@pytest.mark.django_db(transaction=True)
def test_two_members_acked_at_once_in_two_transactions_release_the_follow_up_once(make_queue):
    q, done = make_queue(), make_queue()
    (a, b), follow_up = group(q, done)
    leased = {m.msg_id: m for m in pgq.read(q, qty=10)}
    first_acked, commit_first = threading.Event(), threading.Event()
    second_done = threading.Event()
    errors: list[BaseException] = []

    def ack(msg_id: int, acked: threading.Event, commit: threading.Event | None) -> None:
        try:
            with transaction.atomic():
                assert pgq.delete(q.name, leased[msg_id].receipt)
                acked.set()
                if commit is not None:
                    assert commit.wait(60)
        except BaseException as exc:  # reported by the test
            errors.append(exc)
        finally:
            connection.close()

    first = threading.Thread(target=ack, args=(a, first_acked, commit_first))
    second = threading.Thread(target=ack, args=(b, second_done, None))
    first.start()
    assert first_acked.wait(60)
    # The first ack has resolved its member and holds the follow-up's row; the second
    # resolves the other member, then waits for that row until the first commits.
    second.start()
    wait_until(lambda: _locked_waiters() > 0 or second_done.is_set(), what="the second ack")
    commit_first.set()
    first.join(60)
    second.join(60)
    assert not errors, errors
    assert readable(done) == [follow_up]
    assert readable(done) == []
    assert set(Dependency.objects.filter(msg_id__in=[a, b]).values_list("outcome", flat=True)) == {
        "acked"
    }
    assert not ArchivedMessage.objects.filter(msg_id=follow_up).exists()


@pytest.mark.django_db(transaction=True)
def test_the_release_wakes_the_dependants_queue_on_the_configured_channel(make_queue):
    from django.conf import settings

    from pgq_django.conf import settings as pgq_settings

    q, then = make_queue(), make_queue()
    first = pgq.send(q, "first")
    pgq.send(then, "second", after=[first])
    # LISTEN past any pooler: behind a transaction-mode PgBouncer a pooled session's LISTEN
    # hears nothing (docs/howto/pgbouncer.md), which is why projects listen directly too.
    dsn = direct_dsn(_conninfo(settings.DATABASES["default"]["NAME"]))
    with psycopg.connect(dsn, autocommit=True) as listener, psycopg.connect(dsn) as acker:
        listener.execute(f'LISTEN "{pgq_settings.NOTIFY_CHANNEL}"')
        acker.execute("DELETE FROM pgq_message WHERE msg_id = %s", [first])
        acker.commit()
        woken = [n.payload for n in listener.notifies(timeout=30, stop_after=1)]
    assert woken == [then.name]
