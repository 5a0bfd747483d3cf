"""Schedules cannot starve the leader: a cap per queue, a frequency floor, a time budget.

A user who may manage one queue may create schedules; the leader sends every schedule's
ticks before it rescues leases, expires messages and releases dependants. So a queue holds
at most ``PGQ["SCHEDULES_PER_QUEUE"]`` schedules, none ticking more often than
``PGQ["SCHEDULE_MIN_INTERVAL"]``, and the leader's schedule duty stops after
``PGQ["SCHEDULE_TURN_BUDGET"]`` seconds of a turn, leaving the rest for the next turn. The
budget tests set it to a nanosecond, which any schedule's transaction outlasts: each turn
then runs exactly one schedule, whatever the machine's speed.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.contrib.auth import get_user_model
from django.db import connections
from django.test import override_settings
from django.utils import timezone
from rest_framework.test import APIClient

import pgq_django as pgq
from pgq_django.api.schedules import enqueue_due
from pgq_django.checks import check_settings
from pgq_django.models import ArchivedMessage, Message, Schedule
from pgq_django.worker import maintenance
from tests.conftest import time_passes

pytestmark = pytest.mark.django_db(transaction=True)

A_NANOSECOND = 1e-9


@contextmanager
def pgq_settings(**values: Any) -> Iterator[None]:
    with override_settings(PGQ={**django_settings.PGQ, **values}):
        yield


def _api(user: Any) -> APIClient:
    api = APIClient()
    api.force_authenticate(user)
    api.default_format = "json"
    return api


def _rows() -> list[tuple[Any, ...]]:
    return list(
        Schedule.objects.order_by("name").values_list("name", "queue_id", "cron", "message")
    )


# -- the cap ------------------------------------------------------------------------------


def test_a_queue_refuses_the_schedule_past_its_cap_and_nothing_changes(make_queue):
    q, other = make_queue(), make_queue()
    with pgq_settings(SCHEDULES_PER_QUEUE=3):
        for n in range(3):
            pgq.schedule(f"cap-{n}", "* * * * * *", q, n)
        before = _rows()
        with pytest.raises(pgq.TooManySchedules) as caught:
            pgq.schedule("cap-3", "* * * * * *", q, 3)
        assert isinstance(caught.value, pgq.PgqError)
        assert "SCHEDULES_PER_QUEUE" in caught.value.message and q.name in caught.value.message
        assert caught.value.details == {"queue": q.name, "limit": 3}
        assert _rows() == before
        # Moving a schedule of another queue onto the full one is a new schedule there too.
        pgq.schedule("elsewhere", "0 * * * *", other, "x")
        with pytest.raises(pgq.TooManySchedules):
            pgq.schedule("elsewhere", "0 * * * *", q, "x")
        assert pgq.get_schedule("elsewhere").queue.name == other.name
        # A schedule the queue has already may still be changed; another queue has room.
        pgq.schedule("cap-0", "*/5 * * * * *", q, "changed")
        assert pgq.get_schedule("cap-0").message == "changed"
        pgq.schedule("cap-3", "* * * * * *", other, 3)
        # Removing one makes room for one.
        pgq.unschedule("cap-1")
        pgq.schedule("cap-4", "* * * * * *", q, 4)
        assert Schedule.objects.filter(queue=q).count() == 3


def test_callers_racing_for_the_last_place_leave_the_queue_at_its_cap(make_queue):
    def make(start: threading.Barrier, q: Any, name: str, outcomes: list[str]) -> None:
        try:
            start.wait()
            pgq.schedule(name, "* * * * *", q, name)
            outcomes.append("made")
        except pgq.TooManySchedules:
            outcomes.append("refused")
        finally:
            connections.close_all()

    with pgq_settings(SCHEDULES_PER_QUEUE=2):
        for round_ in range(5):
            q, outcomes = make_queue(), []
            pgq.schedule(f"first-{round_}", "* * * * *", q, 0)
            start = threading.Barrier(4)
            threads = [
                threading.Thread(target=make, args=(start, q, f"racer-{round_}-{n}", outcomes))
                for n in range(4)
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert sorted(outcomes) == ["made", "refused", "refused", "refused"]
            assert Schedule.objects.filter(queue=q).count() == 2


def test_rest_answers_the_cap_with_a_json_409_and_changes_nothing(make_queue):
    owner = get_user_model().objects.create_user("cap_owner")
    q = make_queue(owner=owner)
    with pgq_settings(SCHEDULES_PER_QUEUE=1):
        pgq.schedule("only", "0 * * * *", q, 1)
        before = _rows()
        body = {"name": "second", "cron": "* * * * * *", "queue": q.name, "message": 2}
        answer = _api(owner).post("/v1/schedules", body)
        assert answer.status_code == 409, answer.content
        assert answer.json()["error"]["code"] == "too_many_schedules"
        assert _rows() == before


def test_the_admin_shows_the_cap_as_a_form_error_and_saves_nothing(client, make_queue):
    owner = get_user_model().objects.create_user("cap_staff", is_staff=True)
    q = make_queue(owner=owner)
    client.force_login(owner)
    form = {
        "name": "admin-second",
        "cron": "*/10 * * * *",
        "timezone": "UTC",
        "queue": str(q.pk),
        "message": "1",
        "headers": "{}",
    }
    with pgq_settings(SCHEDULES_PER_QUEUE=1):
        made = pgq.schedule("admin-first", "0 * * * *", q, 1)
        before = _rows()
        answer = client.post("/admin/pgq_django/schedule/add/", form)
        assert answer.status_code == 200
        assert "SCHEDULES_PER_QUEUE" in answer.text
        assert _rows() == before
        # The one schedule the queue has may still be edited.
        edited = client.post(
            f"/admin/pgq_django/schedule/{made.pk}/change/", {**form, "name": "admin-first"}
        )
        assert edited.status_code == 302, edited.content[:2000]
        assert pgq.get_schedule("admin-first").cron == "*/10 * * * *"


# -- the frequency floor ------------------------------------------------------------------


def test_a_schedule_may_not_tick_more_often_than_the_floor(make_queue):
    owner = get_user_model().objects.create_user("floor_owner")
    q = make_queue(owner=owner)
    # The default floor is one second: cron counts whole seconds, so every expression passes.
    pgq.schedule("every-second", "* * * * * *", q, 0)
    with pgq_settings(SCHEDULE_MIN_INTERVAL=10):
        before = _rows()
        for cron in ("*/5 * * * * *", "0,5 * * * * *", "* * * * * *"):
            with pytest.raises(pgq.InvalidArgument, match="SCHEDULE_MIN_INTERVAL") as caught:
                pgq.schedule("too-often", cron, q, 1)
            assert caught.value.details == {"field": "cron"}
        body = {"name": "too-often", "cron": "*/5 * * * * *", "queue": q.name, "message": 1}
        answer = _api(owner).post("/v1/schedules", body)
        assert answer.status_code == 400 and "SCHEDULE_MIN_INTERVAL" in answer.text
        assert _rows() == before
        pgq.schedule("every-ten", "*/10 * * * * *", q, 1)
        pgq.schedule("every-minute", "* * * * *", q, 1)


# -- the time budget ----------------------------------------------------------------------


def _every_second(make_queue: Any, count: int) -> tuple[list[Any], datetime]:
    """``count`` every-second schedules, each on a queue of its own, all due since ``start``."""
    queues = [make_queue() for _ in range(count)]
    for n, q in enumerate(queues):
        pgq.schedule(f"budget-{n}", "* * * * * *", q, n)
    start = timezone.now().replace(microsecond=0) - timedelta(seconds=3)
    Schedule.objects.filter(name__startswith="budget-").update(next_tick=start)
    return queues, start


def test_one_leader_turn_stops_at_the_budget_and_the_other_duties_still_run(make_queue):
    queues, start = _every_second(make_queue, 3)
    expiring = make_queue()
    old = pgq.send(expiring, "stale", expires_in=5)
    time_passes(expiring, 10)
    duties = maintenance.default_duties(60)
    with pgq_settings(SCHEDULE_TURN_BUDGET=A_NANOSECOND):
        done = maintenance.run_due(duties, force=True)
    # The schedule duty ran one schedule and stopped: the two others are still due.
    sent = [Message.objects.filter(queue=q).count() for q in queues]
    assert sent[0] >= 4 and sent[1:] == [0, 0], sent
    assert Schedule.objects.filter(next_tick=start).count() == 2
    # Every other duty ran in the same turn, after it: the expired message is archived.
    assert set(done) == {d.name for d in duties}
    assert ArchivedMessage.objects.get(msg_id=old).outcome == "expired"


def test_the_next_turn_starts_with_the_schedules_the_last_one_left(make_queue):
    queues, start = _every_second(make_queue, 3)
    with pgq_settings(SCHEDULE_TURN_BUDGET=A_NANOSECOND):
        ran = []
        for _ in range(3):
            enqueue_due()
            ran.append([Message.objects.filter(queue=q).count() > 0 for q in queues])
    # Each turn ran the most overdue schedule: a different one each time, none left out.
    assert ran == [[True, False, False], [True, True, False], [True, True, True]]
    # Once every schedule has caught up, each tick from start on was sent once, in order.
    with pgq_settings(SCHEDULE_TURN_BUDGET=60):
        now = timezone.now()
        enqueue_due(now)
    for q in queues:
        ticks = [datetime.fromisoformat(m.headers["pgq_scheduled_at"]) for m in _sent(q)]
        expected = int((now.replace(microsecond=0) - start).total_seconds()) + 1
        assert ticks == [start + timedelta(seconds=n) for n in range(expected)]


def _sent(queue: Any) -> list[Any]:
    return list(Message.objects.filter(queue=queue).order_by("msg_id"))


def test_without_a_budget_to_spare_every_due_schedule_still_runs_in_one_turn(make_queue):
    queues, _ = _every_second(make_queue, 3)
    assert enqueue_due(budget=60) >= 3 * 4
    assert all(Message.objects.filter(queue=q).exists() for q in queues)


# -- the settings -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "key", ["SCHEDULES_PER_QUEUE", "SCHEDULE_MIN_INTERVAL", "SCHEDULE_TURN_BUDGET"]
)
@pytest.mark.parametrize("bad", [0, -1, "100", None, True])
def test_check_reports_a_schedule_limit_that_is_not_a_positive_number(key, bad):
    with pgq_settings(**{key: bad}):
        errors = check_settings()
    assert [(e.id, key in e.msg) for e in errors] == [("pgq_django.E005", True)]
