"""Periodic schedules: the API that keeps them, and the leader's duty that sends their ticks.

The duty (:func:`pgq_django.api.schedules.enqueue_due`) takes the time it runs at, so each
test moves time by passing it instead of waiting for the clock. Real worker processes and a
leader change are in tests/acceptance/test_workflow_processes.py.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from django.db import connections, transaction

import pgq_django as pgq
from pgq_django.api.schedules import MAX_TICKS_PER_RUN, MISFIRE_GRACE, enqueue_due
from pgq_django.models import Message, Schedule

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
    pgq.schedule("b-fine", "* * * * * *", fine, "x")
    enqueue_due(a.next_tick + timedelta(seconds=1))
    assert len(sent(fine)) == 2
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
