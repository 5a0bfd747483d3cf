"""Periodic schedules: the API that keeps them, and the leader's duty that sends their ticks.

The duty (:func:`pgq_django.api.schedules.enqueue_due`) takes the time it runs at, so each
test moves time by passing it instead of waiting for the clock. Real worker processes and a
leader change are in tests/acceptance/test_workflow_processes.py.
"""

from __future__ import annotations

import threading
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from django.contrib.auth import get_user_model
from django.db import connection, connections, transaction
from rest_framework.test import APIClient

import pgq_django as pgq
from pgq_django.api.schedules import MAX_TICKS_PER_RUN, MISFIRE_GRACE, enqueue_due
from pgq_django.models import Message, Schedule
from pgq_django.worker.loop import Worker
from pgq_django.worker.registry import registered, unregister

pytestmark = pytest.mark.django_db(transaction=True)


def sent(queue: Any) -> list[Any]:
    return list(Message.objects.filter(queue=queue).order_by("msg_id"))


def scheduled_at(queue: Any) -> list[datetime]:
    return [datetime.fromisoformat(m.headers["pgq_scheduled_at"]) for m in sent(queue)]


@pytest.mark.parametrize(
    ("cron", "timezone", "field"),
    [
        ("not a cron", "UTC", "cron"),
        ("61 * * * *", "UTC", "cron"),
        ("* * *", "UTC", "cron"),
        ("* * * * * * * *", "UTC", "cron"),
        ("", "UTC", "cron"),
        ("* * * * *", "Mars/Olympus_Mons", "timezone"),
        ("* * * * *", "../../etc/passwd", "timezone"),
        ("* * * * *", "", "timezone"),
    ],
)
def test_an_invalid_cron_or_timezone_is_a_clear_error_and_changes_nothing(
    queue, cron, timezone, field
):
    pgq.schedule("kept", "0 * * * *", queue, {"v": 1})
    before = list(Schedule.objects.values_list("name", "cron", "timezone", "message"))
    with pytest.raises(pgq.InvalidArgument) as caught:
        pgq.schedule("kept", cron, queue, {"v": 2}, timezone=timezone)
    assert caught.value.details["field"] == field
    assert list(Schedule.objects.values_list("name", "cron", "timezone", "message")) == before


def test_a_bad_name_unknown_queue_or_reserved_header_is_refused(queue):
    with pytest.raises(pgq.InvalidName):
        pgq.schedule("no spaces allowed", "* * * * *", queue, 1)
    with pytest.raises(pgq.QueueNotFound):
        pgq.schedule("nightly", "* * * * *", "no_such_queue", 1)
    with pytest.raises(pgq.InvalidMessage):
        pgq.schedule("nightly", "* * * * *", queue, 1, headers={"pgq_scheduled_at": "forged"})
    with pytest.raises(pgq.InvalidArgument):
        pgq.schedule("nightly", "* * * * *", queue, 1, catch_up="yes")
    assert not Schedule.objects.exists()


def test_schedule_creates_then_updates_by_name_and_unschedule_removes_it(queue, make_queue):
    other = make_queue()
    first = pgq.schedule("report", "*/5 * * * *", queue, {"kind": "report"})
    assert first.next_tick > first.last_tick
    assert first.next_tick.minute % 5 == 0 and first.next_tick.second == 0
    second = pgq.schedule(
        "report", "0 9 * * 1-5", other, {"kind": "r2"}, timezone="Europe/Paris", catch_up=True
    )
    assert second.pk == first.pk
    assert [s.name for s in pgq.list_schedules()] == ["report"]
    (listed,) = pgq.list_schedules()
    assert (listed.queue.name, listed.message, listed.timezone, listed.catch_up) == (
        other.name,
        {"kind": "r2"},
        "Europe/Paris",
        True,
    )
    # 09:00 in Paris, whatever UTC offset daylight saving gives it.
    local = listed.next_tick.astimezone(ZoneInfo("Europe/Paris"))
    assert (local.hour, local.minute, local.weekday() < 5) == (9, 0, True)
    assert pgq.unschedule("report") is True
    assert pgq.unschedule("report") is False
    assert pgq.list_schedules() == []


def test_each_due_tick_is_sent_once_with_its_time_in_a_reserved_header(queue):
    s = pgq.schedule("every-second", "* * * * * *", queue, {"ping": True}, headers={"k": "v"})
    start = s.next_tick
    assert enqueue_due(start + timedelta(seconds=2.5)) == 3
    assert scheduled_at(queue) == [start + timedelta(seconds=i) for i in range(3)]
    first = sent(queue)[0]
    assert first.message == {"ping": True}
    assert first.headers["k"] == "v" and first.headers["pgq_schedule"] == "every-second"
    # The same moment again, or an earlier one: nothing more.
    assert enqueue_due(start + timedelta(seconds=2.5)) == 0
    assert enqueue_due(start) == 0
    assert enqueue_due(start + timedelta(seconds=3)) == 1
    assert len(sent(queue)) == 4
    s.refresh_from_db()
    assert s.last_tick == start + timedelta(seconds=3)


def test_a_tick_sent_again_is_deduplicated(queue):
    s = pgq.schedule("dedup", "* * * * * *", queue, "tick")
    start = s.next_tick
    assert enqueue_due(start) == 1
    # As if a leader had sent the tick but its row update were lost: the tick runs again.
    Schedule.objects.filter(pk=s.pk).update(next_tick=start)
    enqueue_due(start)
    assert len(sent(queue)) == 1


def test_missed_ticks_collapse_into_one_unless_catch_up(queue, make_queue):
    eager = make_queue()
    lazy = pgq.schedule("lazy", "* * * * * *", queue, "x")
    keen = pgq.schedule("keen", "* * * * * *", eager, "x", catch_up=True)
    later = max(lazy.next_tick, keen.next_tick) + timedelta(
        seconds=MISFIRE_GRACE + MAX_TICKS_PER_RUN + 30
    )
    enqueue_due(later)
    # Down for more than the grace: one message, for the latest tick.
    assert scheduled_at(queue) == [later.replace(microsecond=0)]
    # catch_up: every tick, MAX_TICKS_PER_RUN at a time, oldest first.
    assert len(sent(eager)) == MAX_TICKS_PER_RUN
    while enqueue_due(later):
        pass
    ticks = scheduled_at(eager)
    assert ticks == sorted(set(ticks))
    assert ticks[0] == keen.next_tick and ticks[-1] == later.replace(microsecond=0)
    assert len(ticks) == (ticks[-1] - ticks[0]).total_seconds() + 1


def test_a_late_leader_within_the_grace_still_sends_every_tick(queue):
    s = pgq.schedule("late", "* * * * * *", queue, "x")
    enqueue_due(s.next_tick + timedelta(seconds=5))
    assert len(sent(queue)) == 6


def test_a_failing_send_leaves_the_tick_due_and_other_schedules_run(make_queue):
    full = make_queue(max_length=1)
    fine = make_queue()
    pgq.send(full, "filler")
    a = pgq.schedule("a-full", "* * * * * *", full, "x")
    b = pgq.schedule("b-fine", "* * * * * *", fine, "x")
    b_start = b.next_tick  # a second after a's when the clock turned between the two
    enqueue_due(a.next_tick + timedelta(seconds=1))
    assert len(sent(fine)) == 2 - (b_start - a.next_tick).seconds
    assert len(sent(full)) == 1  # only the filler
    a_after = Schedule.objects.get(pk=a.pk)
    assert a_after.next_tick == a.next_tick  # tried again next time
    pgq.purge_queue(full)
    pgq.alter_queue(full, max_length=None)
    enqueue_due(a.next_tick + timedelta(seconds=1))
    assert len(sent(full)) == 2


def test_a_locked_schedule_is_skipped_not_sent_twice(queue):
    """A second leader (during an election) meets the first's row lock and skips it."""
    s = pgq.schedule("contended", "* * * * * *", queue, "x")
    other = connections.create_connection("default")
    try:
        with other.cursor() as cur:
            cur.execute("BEGIN")
            cur.execute("SELECT 1 FROM pgq_schedule WHERE id = %s FOR UPDATE", [s.pk])
            assert enqueue_due(s.next_tick) == 0
            cur.execute("ROLLBACK")
    finally:
        other.close()
    assert enqueue_due(s.next_tick) == 1


def test_dropping_the_queue_removes_its_schedules(make_queue):
    q = make_queue()
    pgq.schedule("gone-with-queue", "* * * * *", q, 1)
    pgq.drop_queue(q)
    assert pgq.list_schedules() == []


def test_a_schedule_sends_in_the_leaders_transaction(queue):
    """The sends and the row update commit together: a rollback undoes both."""
    s = pgq.schedule("rolled-back", "* * * * * *", queue, "x")
    with pytest.raises(RuntimeError), transaction.atomic():
        enqueue_due(s.next_tick)
        raise RuntimeError
    assert sent(queue) == []
    assert Schedule.objects.get(pk=s.pk).next_tick == s.next_tick


# -- REST --------------------------------------------------------------------------------


def _api(user: Any) -> APIClient:
    """A REST client authenticated as ``user``."""
    api = APIClient()
    api.force_authenticate(user)
    api.default_format = "json"
    return api


def test_rest_keeps_schedules_for_managers_of_their_queue_only(make_queue):
    users = get_user_model().objects
    owner = users.create_user("s_owner")
    writer, stranger = users.create_user("s_writer"), users.create_user("s_stranger")
    q = make_queue(owner=owner)
    pgq.grant_queue_access(q, writer, read=True, write=True)
    body = {"name": "nightly", "cron": "0 3 * * *", "queue": q.name, "message": {"job": 1}}
    # Writing to the queue is not managing it: 403, and a stranger learns nothing (404).
    assert _api(writer).post("/v1/schedules", body).status_code == 403
    assert _api(stranger).post("/v1/schedules", body).status_code == 404
    assert not Schedule.objects.exists()
    made = _api(owner).post("/v1/schedules", {**body, "timezone": "Europe/Paris"})
    assert made.status_code == 201, made.content
    assert made.json()["queue"] == q.name and made.json()["timezone"] == "Europe/Paris"
    assert _api(owner).get("/v1/schedules").json()["data"][0]["name"] == "nightly"
    assert _api(writer).get("/v1/schedules").json()["data"] == []
    assert _api(owner).get("/v1/schedules/nightly").json()["cron"] == "0 3 * * *"
    assert _api(writer).get("/v1/schedules/nightly").status_code == 403
    hidden = _api(stranger).delete("/v1/schedules/nightly")
    assert hidden.status_code == 404
    assert hidden.json()["error"]["code"] == "schedule_not_found"
    assert Schedule.objects.filter(name="nightly").exists()
    assert _api(owner).delete("/v1/schedules/nightly").status_code == 204
    assert _api(owner).delete("/v1/schedules/nightly").status_code == 404
    assert not Schedule.objects.exists()


@pytest.mark.parametrize(
    "change",
    [
        {"cron": "every day"},
        {"timezone": "Nowhere/Else"},
        {"cron": 5},
        {"headers": {"pgq_scheduled_at": "x"}},
        {"catch_up": "yes"},
        {"name": "has space"},
        {"unknown": 1},
    ],
)
def test_rest_refuses_a_bad_schedule_with_a_json_400_and_changes_nothing(make_queue, change):
    owner = get_user_model().objects.create_user("s_owner2")
    q = make_queue(owner=owner)
    body = {"name": "ok", "cron": "* * * * *", "queue": q.name, "message": 1, **change}
    answer = _api(owner).post("/v1/schedules", body)
    assert answer.status_code == 400, answer.content
    assert answer.json()["error"]["code"] in ("invalid_argument", "invalid_name", "invalid_message")
    assert not Schedule.objects.exists()


def test_rest_names_the_wrong_field_of_a_cron_expression_and_changes_nothing(make_queue):
    owner = get_user_model().objects.create_user("s_owner3")
    q = make_queue(owner=owner)
    pgq.schedule("kept", "0 9 * * mon-fri", q, 1)
    body = {"name": "kept", "cron": "0 9 * * mon-fir", "queue": q.name, "message": 2}
    answer = _api(owner).post("/v1/schedules", body)
    assert answer.status_code == 400, answer.content
    error = answer.json()["error"]
    assert error["code"] == "invalid_argument"
    assert error["message"].startswith("day-of-week field 'mon-fir' of '0 9 * * mon-fir'")
    assert error["details"] == {"field": "cron", "cron_field": "day-of-week"}
    kept = Schedule.objects.get(name="kept")
    assert (kept.cron, kept.message) == ("0 9 * * mon-fri", 1)


# -- admin -------------------------------------------------------------------------------


def _form(q: Any, **change: Any) -> dict[str, Any]:
    return {
        "name": "admin-made",
        "cron": "*/10 * * * *",
        "timezone": "UTC",
        "queue": str(q.pk),
        "message": '{"from": "admin"}',
        "headers": "{}",
        **change,
    }


def test_the_admin_adds_and_edits_a_schedule_through_the_api(client, make_queue):
    users = get_user_model().objects
    owner = users.create_user("adm_owner", is_staff=True)
    q = make_queue(owner=owner)
    client.force_login(owner)
    added = client.post("/admin/pgq_django/schedule/add/", _form(q))
    assert added.status_code == 302, added.content[:2000]
    made = Schedule.objects.get(name="admin-made")
    assert made.message == {"from": "admin"} and made.next_tick.minute % 10 == 0
    changed = client.post(
        f"/admin/pgq_django/schedule/{made.pk}/change/", _form(q, cron="0 * * * *")
    )
    assert changed.status_code == 302
    assert Schedule.objects.get(name="admin-made").next_tick.minute == 0
    listing = client.get("/admin/pgq_django/schedule/")
    assert "admin-made" in listing.text


@pytest.mark.parametrize(
    ("change", "error"),
    [
        ({"cron": "whenever"}, "a cron expression has five"),
        ({"cron": "61 * * * *"}, "minute field &#x27;61&#x27;"),
        ({"cron": "0 9 * * mon-fir"}, "day-of-week field &#x27;mon-fir&#x27;"),
        ({"cron": "60 * * * * *"}, "second field &#x27;60&#x27;"),
        ({"timezone": "Atlantis/Capital"}, "not a known IANA time zone"),
        ({"headers": '{"pgq_schedule": "forged"}'}, "reserved"),
    ],
)
def test_the_admin_shows_a_bad_schedule_as_a_form_error_and_saves_nothing(
    client, make_queue, change, error
):
    owner = get_user_model().objects.create_user("adm_owner2", is_staff=True)
    q = make_queue(owner=owner)
    client.force_login(owner)
    answer = client.post("/admin/pgq_django/schedule/add/", _form(q, **change))
    assert answer.status_code == 200
    assert error in answer.text
    assert not Schedule.objects.exists()


def test_the_admin_hides_schedules_of_queues_the_user_cannot_manage(client, make_queue):
    users = get_user_model().objects
    reader = users.create_user("adm_reader", is_staff=True)
    q = make_queue()
    pgq.grant_queue_access(q, reader, read=True, write=True)
    s = pgq.schedule("secret-sched", "* * * * *", q, 1)
    client.force_login(reader)
    assert "secret-sched" not in client.get("/admin/pgq_django/schedule/").text
    assert client.get(f"/admin/pgq_django/schedule/{s.pk}/change/").status_code in (302, 403)
    deleted = client.post(f"/admin/pgq_django/schedule/{s.pk}/delete/", {"post": "yes"})
    assert deleted.status_code in (302, 403)
    assert Schedule.objects.filter(name="secret-sched").exists()


# -- @pgq.periodic -----------------------------------------------------------------------


def test_periodic_registers_a_handler_whose_schedule_a_starting_worker_makes(queue_name):
    @pgq.periodic("*/5 * * * * *", queue=queue_name, message={"beat": True}, batch=1)
    def beat(message: Any) -> None:
        pass

    name = "tests.integration.test_schedules.test_periodic_registers_a_handler_whose_schedule_a_starting_worker_makes._locals_.beat"  # noqa: E501
    try:
        assert registered()[queue_name].func is beat
        assert registered()[queue_name].batch == 1
        worker = Worker([queue_name], lead=False, listen=False)
        worker.start()
        assert worker.shutdown() == 0
        made = pgq.get_schedule(name)
        assert (made.queue.name, made.cron, made.message) == (
            queue_name,
            "*/5 * * * * *",
            {"beat": True},
        )
        worker = Worker([queue_name], lead=False, listen=False)
        worker.start()  # a second start updates the same schedule
        assert worker.shutdown() == 0
        assert [s.name for s in pgq.list_schedules()] == [name]
    finally:
        unregister(queue_name)


def test_periodic_refuses_a_bad_expression_when_the_module_is_imported(queue_name):
    with pytest.raises(pgq.InvalidArgument):
        pgq.periodic("every minute", queue=queue_name)
    with pytest.raises(pgq.InvalidArgument):
        pgq.periodic("* * * * *", queue=queue_name, timezone="Moon/Base")
    with pytest.raises(pgq.InvalidName):
        pgq.periodic("* * * * *", queue="bad name")
    assert queue_name not in registered()


def test_two_callers_creating_one_name_at_once_end_with_one_schedule(make_queue):
    q = make_queue()
    errors: list[BaseException] = []

    def make(start: threading.Barrier, name: str, message: int) -> None:
        try:
            start.wait()
            pgq.schedule(name, "* * * * *", q, message)
        except BaseException as exc:  # reported below, in the test's thread
            errors.append(exc)
        finally:
            connections.close_all()

    for round_ in range(5):
        start = threading.Barrier(2)
        threads = [
            threading.Thread(target=make, args=(start, f"raced-{round_}", n)) for n in (1, 2)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert errors == []
    assert sorted(Schedule.objects.values_list("name", flat=True)) == [
        f"raced-{n}" for n in range(5)
    ]


def test_rest_will_not_take_over_a_schedule_of_a_queue_the_caller_cannot_manage(make_queue):
    users = get_user_model().objects
    owner, other = users.create_user("take_owner"), users.create_user("take_other")
    theirs, mine = make_queue(owner=owner), make_queue(owner=other)
    pgq.schedule("payroll", "0 9 * * 1", theirs, {"run": "payroll"})
    body = {"name": "payroll", "cron": "* * * * * *", "queue": mine.name, "message": "mine"}
    refused = _api(other).post("/v1/schedules", body)
    assert refused.status_code == 403, refused.content
    assert theirs.name not in refused.content.decode()
    kept = pgq.get_schedule("payroll")
    assert (kept.queue.name, kept.cron, kept.message) == (
        theirs.name,
        "0 9 * * 1",
        {"run": "payroll"},
    )


def test_a_raw_delete_of_the_queue_takes_its_schedules_along(make_queue):
    """As drop_queue does: the schedule's key cascades in the database, so a DELETE that
    does not go through the ORM (PGMQ's drop_queue) is not refused by it."""
    q = make_queue()
    pgq.schedule("raw-drop", "* * * * *", q, 1)
    with connection.cursor() as cur:
        cur.execute("DELETE FROM pgq_queue WHERE id = %s", [q.pk])
    assert not Schedule.objects.filter(name="raw-drop").exists()
