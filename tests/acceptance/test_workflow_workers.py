"""Dependencies, groups and request/reply with real worker processes (``spawn``)."""

from __future__ import annotations

import asyncio
import signal
from concurrent.futures import ThreadPoolExecutor

import pytest
from asgiref.sync import sync_to_async
from django.db import connection, connections

import pgq_django as pgq
from pgq_django.models import ArchivedMessage, Message
from tests.conftest import wait_for_workers, wait_until
from tests.workflow_handlers import STEPS_DDL

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

WORKER = ("-m", "django", "pgq_worker", "-v", "2")


@pytest.fixture
def step_queue(make_queue):
    """A queue whose messages ``tests.workflow_handlers.step`` handles."""
    with connection.cursor() as cur:
        cur.execute(STEPS_DDL)

    def make(**options):
        q = make_queue(**options)
        pgq.register_callback(q, "tests.workflow_handlers.step")
        return q

    return make


def steps(ids) -> dict[int, list]:
    """msg_id -> [(name, at), …] of the committed runs of those messages."""
    with connection.cursor() as cur:
        cur.execute(
            "SELECT msg_id, name, at FROM test_workflow_steps WHERE msg_id = ANY(%s) ORDER BY at",
            [list(ids)],
        )
        found: dict[int, list] = {}
        for msg_id, name, at in cur.fetchall():
            found.setdefault(msg_id, []).append((name, at))
        return found


def stop(*procs) -> None:
    wait_for_workers(*procs)
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
    for proc in procs:
        proc.communicate(timeout=60)
        assert proc.returncode == 0, proc.err_path.read_text()


def test_a_chain_of_five_across_two_queues_runs_in_order_once(step_queue, spawn):
    left, right = step_queue(), step_queue()
    ids: list[int] = []
    for n in range(5):
        q = left if n % 2 == 0 else right
        ids.append(pgq.send(q, {"name": f"s{n}"}, after=ids[-1:] or None))
    procs = [spawn(*WORKER, "--queue", left.name, "--queue", right.name) for _ in range(2)]
    wait_until(lambda: len(steps(ids)) == 5, timeout=120, what="the five steps")
    done = steps(ids)
    assert all(len(runs) == 1 for runs in done.values())
    times = [done[i][0][1] for i in ids]
    assert times == sorted(times)  # each ran after the one it waited for had committed
    stop(*procs)


def test_a_diamond_joins_after_both_branches(step_queue, spawn):
    q = step_queue()
    top = pgq.send(q, {"name": "top"})
    a = pgq.send(q, {"name": "a"}, after=[top])
    b = pgq.send(q, {"name": "b"}, after=[top])
    bottom = pgq.send(q, {"name": "bottom"}, after=[a, b])
    procs = [spawn(*WORKER, "--queue", q.name, "--concurrency", "2") for _ in range(2)]
    wait_until(lambda: bottom in steps([bottom]), timeout=120, what="the join")
    done = steps([top, a, b, bottom])
    assert all(len(runs) == 1 for runs in done.values())
    assert done[top][0][1] < min(done[a][0][1], done[b][0][1])
    assert done[bottom][0][1] > max(done[a][0][1], done[b][0][1])
    stop(*procs)


def test_a_group_of_100_sends_its_follow_up_once(step_queue, spawn):
    members, after = step_queue(), step_queue()
    gid = pgq.group(members, [{"name": f"m{i}"} for i in range(100)], then=(after.name, {}))
    then_id = pgq.group_status(gid).then_msg_id
    procs = [
        spawn(*WORKER, "--queue", members.name, "--queue", after.name, "--concurrency", "2")
        for _ in range(3)
    ]
    wait_until(lambda: then_id in steps([then_id]), timeout=150, what="the follow-up")
    stop(*procs)
    status = pgq.group_status(gid)
    assert (status.status, status.done, status.pending, status.failed) == ("done", 100, 0, 0)
    assert len(steps([then_id])[then_id]) == 1
    assert not Message.objects.filter(queue__name__in=[members.name, after.name]).exists()


def test_a_dependency_that_dies_dead_letters_its_dependant_in_the_worker(step_queue, spawn):
    dlq = step_queue()
    q = step_queue(dead_letter_queue=dlq.name)
    doomed = pgq.send(q, {"name": "doomed", "fail": True})
    waiting = pgq.send(q, {"name": "waiting"}, after=[doomed])
    proc = spawn(*WORKER, "--queue", q.name)
    wait_until(
        lambda: Message.objects.filter(msg_id=waiting, queue=dlq).exists(),
        timeout=120,
        what="the dependant in the dead-letter queue",
    )
    history = Message.objects.get(msg_id=waiting).headers["pgq_dead_letter"]
    assert f"dependency {doomed} ended dead" in history["last_error"]
    assert waiting not in steps([waiting])  # it never ran
    assert ArchivedMessage.objects.get(msg_id=doomed).outcome == "dead"
    stop(proc)


def test_request_and_reply_round_trips_under_four_workers(make_queue, spawn):
    q, replies = make_queue(), make_queue()
    pgq.register_callback(q, "tests.workflow_handlers.echo")
    procs = [spawn(*WORKER, "--queue", q.name) for _ in range(4)]
    wait_for_workers(*procs)

    def ask(n: int):
        try:
            return pgq.request(q, {"n": n}, timeout=60, reply_to=replies.name)
        finally:
            connection.close()  # this pool thread's own connection

    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(ask, range(40)))
    assert [a["echo"] for a in answers] == [{"n": n} for n in range(40)]
    assert len({a["pid"] for a in answers}) > 1  # shared out among the workers
    assert not Message.objects.filter(queue__in=[q, replies]).exists()
    stop(*procs)


def test_a_request_that_times_out_leaves_nothing_behind(make_queue, spawn):
    q, replies = make_queue(), make_queue()
    pgq.register_callback(q, "tests.workflow_handlers.echo")
    proc = spawn(*WORKER, "--queue", q.name)
    wait_for_workers(proc)
    with pytest.raises(pgq.RequestTimeout) as timed_out:
        pgq.request(q, {"sleep": 1.5}, timeout=0.3, reply_to=replies.name)
    request_id = timed_out.value.details["msg_id"]
    # The worker had it already: it finishes, and its late reply is archived, unread.
    late = ArchivedMessage.objects.filter(queue=replies, outcome="expired")
    wait_until(late.exists, timeout=60, what="the late reply archived")
    assert late.get().headers["pgq_correlation_id"] == request_id
    assert not Message.objects.filter(queue__in=[q, replies]).exists()
    # A later caller gets its own reply, never the late one.
    assert pgq.request(q, {"n": 7}, timeout=30, reply_to=replies.name)["echo"] == {"n": 7}
    stop(proc)


def test_the_async_twins_group_and_request_on_an_event_loop(make_queue, step_queue, spawn):
    q, replies, members = make_queue(), make_queue(), step_queue()
    pgq.register_callback(q, "tests.workflow_handlers.echo")
    proc = spawn(*WORKER, "--queue", q.name, "--queue", members.name)
    wait_for_workers(proc)

    async def scenario():
        gid = await pgq.agroup(members, [{"name": "x"}, {"name": "y"}])
        answer = await pgq.arequest(q, {"n": 1}, timeout=60, reply_to=replies.name)
        with pytest.raises(pgq.RequestTimeout):
            await pgq.arequest(q, {"sleep": 1}, timeout=0.2, reply_to=replies.name)
        while (status := await pgq.agroup_status(gid)).status == "pending":
            await asyncio.sleep(0.05)  # polling a condition, as wait_until does
        # The twins ran in asgiref's thread for database work: its connection goes now.
        await sync_to_async(connections.close_all)()
        return status, answer

    status, answer = asyncio.run(asyncio.wait_for(scenario(), timeout=120))
    assert answer["echo"] == {"n": 1}
    assert (status.status, status.done) == ("done", 2)
    late = ArchivedMessage.objects.filter(queue=replies, outcome="expired")
    wait_until(late.exists, timeout=60, what="the late reply archived")
    assert not Message.objects.filter(queue__in=[q, replies]).exists()
    stop(proc)
