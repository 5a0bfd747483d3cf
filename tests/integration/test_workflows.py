"""Dependencies, groups and replies, driven in this process: the worker's executor runs the
handlers, and the leader's ``workflows`` duty is run by hand where a test needs it."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from rest_framework.test import APIClient

import pgq_django as pgq
from pgq_django.models import ArchivedMessage, Dependency, Message, WorkflowGroup
from pgq_django.store.sql import workflows as workflow_sql
from pgq_django.worker import maintenance, registry
from pgq_django.worker.executor import Outcome, execute
from tests.conftest import generic_plan, statements_run, time_passes


def _echo(message):
    return {"echo": message.message}


def _reject(message):
    raise pgq.RejectMessage("never")


def run_one(queue, func=_echo) -> Outcome | None:
    """Lease one message of ``queue`` and run ``func`` on it as the worker does."""
    found = pgq.read(queue)
    if not found:
        return None
    return execute(registry.Handler(queue.name, func), found[0])


def workflows_duty() -> None:
    """The leader's duty, run once, as a leader tick would."""
    duties = [d for d in maintenance.default_duties(60) if d.name == "workflows"]
    maintenance.run_due(duties, force=True)


def visible(queue) -> list[int]:
    with connection.cursor() as cur:
        cur.execute(
            "SELECT msg_id FROM pgq_message WHERE queue_id = %s AND vt <= clock_timestamp()"
            " ORDER BY msg_id",
            [queue.pk],
        )
        return [r[0] for r in cur.fetchall()]


def test_a_dependant_stays_invisible_until_its_dependency_is_acked_by_a_worker(make_queue):
    first, second = make_queue(), make_queue()
    a = pgq.send(first, {"step": 1})
    b = pgq.send(second, {"step": 2}, after=[a])
    assert pgq.read(second) == []
    assert Message.objects.get(msg_id=a).headers["pgq_awaited"] is True
    assert run_one(first) is Outcome.ACKED
    assert visible(second) == [b]
    (m,) = pgq.read(second)
    assert m.msg_id == b


def _resolving_elsewhere(on: bool) -> None:
    """Make this transaction's deletions skip the triggers, as pgq_resolve_waits's own do:
    a wait left open, as one left by rows deleted before the triggers existed."""
    with connection.cursor() as cur:
        cur.execute("SELECT set_config('pgq.resolving', %s, true)", ["on" if on else ""])


def test_a_wait_the_ack_left_open_is_resolved_by_the_leaders_duty(make_queue):
    q = make_queue()
    a = pgq.send(q, "a")
    b = pgq.send(q, "b", after=[a])
    (m,) = pgq.read(q)
    _resolving_elsewhere(True)
    assert pgq.delete(q, m.receipt)
    _resolving_elsewhere(False)
    assert visible(q) == []
    workflows_duty()
    assert visible(q) == [b]


def test_a_dependency_already_acked_lets_the_dependant_go_at_once(make_queue):
    q = make_queue()
    a = pgq.send(q, "a")
    assert pgq.delete(q, a)
    b = pgq.send(q, "b", after=[a])
    assert visible(q) == [b]


def test_a_diamond_waits_for_both_sides(make_queue):
    q = make_queue()
    top = pgq.send(q, "top")
    left = pgq.send(q, "left", after=[top])
    right = pgq.send(q, "right", after=[top])
    bottom = pgq.send(q, "bottom", after=[left, right])
    assert run_one(q) is Outcome.ACKED  # top
    assert visible(q) == [left, right]
    assert run_one(q) is Outcome.ACKED  # left
    assert visible(q) == [right]
    assert run_one(q) is Outcome.ACKED  # right
    assert visible(q) == [bottom]


def test_a_dependency_that_dies_dead_letters_its_dependant_naming_it(make_queue):
    dlq = make_queue()
    q = make_queue(dead_letter_queue=dlq.name)
    a = pgq.send(q, "a")
    b = pgq.send(q, "b", after=[a])
    c = pgq.send(q, "c", after=[b])
    assert run_one(q, _reject) is Outcome.FAILED
    moved = Message.objects.get(msg_id=b)
    assert moved.queue_id == dlq.pk
    assert f"dependency {a} ended dead" in moved.headers["pgq_dead_letter"]["last_error"]
    # b is live in its dead-letter queue now: c, waiting for b, fails in turn.
    workflows_duty()
    assert Message.objects.get(msg_id=c).queue_id == dlq.pk
    assert visible(q) == []


def test_without_a_dead_letter_queue_the_dependant_is_archived_dead(make_queue):
    q = make_queue()
    a = pgq.send(q, "a")
    b = pgq.send(q, "b", after=[a])
    assert pgq.cancel(q, a)
    workflows_duty()
    dead = ArchivedMessage.objects.get(msg_id=b)
    assert dead.outcome == "dead"
    assert f"dependency {a} ended cancelled" in dead.error


def test_an_id_no_message_can_have_is_refused_and_nothing_is_sent(make_queue):
    q = make_queue()
    a = pgq.send(q, "a")
    before = Message.objects.count(), Dependency.objects.count()
    with pytest.raises(pgq.InvalidArgument, match="do not exist yet"):
        pgq.send(q, "b", after=[a, 2**52])
    assert (Message.objects.count(), Dependency.objects.count()) == before
    assert "pgq_awaited" not in Message.objects.get(msg_id=a).headers


@pytest.mark.parametrize(
    ("after", "match"),
    [([], "at least one"), ("12", "list of message ids"), ([0], "between 1"), ([True], "after")],
)
def test_bad_after_lists_are_refused(make_queue, after, match):
    q = make_queue()
    with pytest.raises(pgq.InvalidArgument, match=match):
        pgq.send(q, "b", after=after)
    assert Message.objects.filter(queue=q).count() == 0


def test_a_delay_or_a_dedup_id_cannot_be_combined_with_after(make_queue):
    q = make_queue()
    a = pgq.send(q, "a")
    with pytest.raises(pgq.InvalidArgument, match="delay"):
        pgq.send(q, "b", after=[a], delay=5)
    with pytest.raises(pgq.InvalidArgument, match="dedup_id"):
        pgq.send(q, "b", after=[a], dedup_id="x")
    assert Message.objects.filter(queue=q).count() == 1


def test_a_group_reports_its_progress_and_sends_its_follow_up_once(make_queue):
    q, done = make_queue(), make_queue()
    gid = pgq.group(q, [1, 2, 3], then=(done.name, {"all": "done"}))
    status = pgq.group_status(gid)
    assert (status.status, status.size, status.pending, status.done) == ("pending", 3, 3, 0)
    for _ in range(3):
        assert visible(done) == []
        assert run_one(q) is Outcome.ACKED
    status = pgq.group_status(gid)
    assert (status.status, status.pending, status.done, status.failed) == ("done", 0, 3, 0)
    assert visible(done) == [status.then_msg_id]
    workflows_duty()  # resolving again releases nothing twice
    assert len(visible(done)) == 1


def test_a_failed_member_fails_the_group_and_dead_letters_its_follow_up(make_queue):
    q, done = make_queue(), make_queue()
    gid = pgq.group(q, ["ok", "bad"], then=(done.name, "after"))
    assert run_one(q) is Outcome.ACKED
    assert run_one(q, _reject) is Outcome.FAILED
    status = pgq.group_status(gid)
    assert (status.status, status.done, status.failed) == ("failed", 1, 1)
    dead = ArchivedMessage.objects.get(msg_id=status.then_msg_id)
    assert dead.outcome == "dead" and "ended dead" in dead.error


def test_a_group_status_of_an_ack_made_over_the_api_is_current(make_queue):
    q = make_queue()
    gid = pgq.group(q, ["x"])
    (m,) = pgq.read(q)
    pgq.delete(q, m.receipt)
    assert pgq.group_status(gid).status == "done"


def test_group_errors_are_clear_and_change_nothing(make_queue):
    q = make_queue()
    groups = WorkflowGroup.objects.count()
    with pytest.raises(pgq.GroupNotFound):
        pgq.group_status(10**12)
    with pytest.raises(pgq.InvalidArgument, match="at least one"):
        pgq.group(q, [])
    with pytest.raises(pgq.InvalidArgument, match="then"):
        pgq.group(q, [1], then="nope")
    with pytest.raises(pgq.QueueNotFound):
        pgq.group(q, [1], then=("no_such_queue_here", 1))
    with pytest.raises(pgq.InvalidMessage, match="reserved"):
        pgq.group(q, [1], headers={"pgq_group": 1})
    assert WorkflowGroup.objects.count() == groups
    assert Message.objects.filter(queue=q).count() == 0


def test_a_handlers_return_value_is_the_reply_correlated_by_the_request_id(make_queue):
    q, replies = make_queue(), make_queue()
    req = pgq.send(q, {"n": 2}, reply_to=replies.name)
    assert run_one(q) is Outcome.ACKED
    (reply,) = pgq.read(replies)
    assert reply.message == {"echo": {"n": 2}}
    assert reply.headers["pgq_correlation_id"] == req


def test_a_sender_cannot_write_reply_routing_headers(make_queue):
    q = make_queue()
    with pytest.raises(pgq.InvalidMessage, match="reserved"):
        pgq.send(q, 1, headers={"pgq_reply_to": q.name})
    with pytest.raises(pgq.QueueNotFound):
        pgq.send(q, 1, reply_to="no_such_reply_queue")
    assert Message.objects.filter(queue=q).count() == 0


@pytest.mark.django_db(transaction=True)
def test_a_request_without_a_worker_times_out_and_leaves_nothing(make_queue):
    q, replies = make_queue(), make_queue()
    with pytest.raises(pgq.RequestTimeout):
        pgq.request(q, {"n": 1}, timeout=0.2, reply_to=replies.name)
    (request,) = ArchivedMessage.objects.filter(queue=q)
    assert request.outcome == "cancelled"
    assert not Message.objects.filter(queue__in=[q, replies]).exists()


def test_a_request_inside_a_transaction_is_refused(make_queue):
    q = make_queue()
    with pytest.raises(pgq.InvalidArgument, match="atomic"):
        pgq.request(q, 1, timeout=1)
    assert Message.objects.filter(queue=q).count() == 0


def _api(user):
    """A REST client authenticated as ``user``."""
    api = APIClient()
    api.force_authenticate(user)
    api.default_format = "json"
    return api


def test_rest_answers_a_groups_status_to_a_reader_of_its_queue(make_queue):
    users = get_user_model().objects
    owner = users.create_user("g_owner")
    reader, writer, stranger = (users.create_user(n) for n in ("g_r", "g_w", "g_s"))
    q = make_queue(owner=owner)
    pgq.grant_queue_access(q, reader, read=True, write=False)
    pgq.grant_queue_access(q, writer, read=False, write=True)
    gid = pgq.group(q, [1, 2])
    (m,) = pgq.read(q)
    _resolving_elsewhere(True)  # a wait left open: answering the status settles it
    pgq.delete(q, m.receipt)
    _resolving_elsewhere(False)
    assert _api(writer).get(f"/v1/groups/{gid}").status_code == 403
    hidden = _api(stranger).get(f"/v1/groups/{gid}")
    assert hidden.status_code == 404
    assert hidden.json()["error"]["code"] == "group_not_found"
    # The refused callers changed nothing: the acknowledged member is still unsettled.
    assert Dependency.objects.filter(group_id=gid, outcome__isnull=True).count() == 2
    answer = _api(reader).get(f"/v1/groups/{gid}")
    assert answer.status_code == 200, answer.content
    body = answer.json()
    assert (body["status"], body["size"], body["done"], body["pending"]) == ("pending", 2, 1, 1)
    assert _api(reader).get(f"/v1/groups/{10**12}").status_code == 404
    for bad in ("abc", "-1", "1.5", "9" * 30):
        answer = _api(reader).get(f"/v1/groups/{bad}")
        assert answer.status_code == 400, (bad, answer.content)
        assert answer.json()["error"]["code"] == "invalid_argument"


def test_rest_reply_to_needs_the_write_right_on_the_reply_queue(make_queue):
    users = get_user_model().objects
    owner, sender = users.create_user("r_owner"), users.create_user("r_sender")
    q, mine, theirs = make_queue(owner=owner), make_queue(owner=sender), make_queue(owner=owner)
    pgq.grant_queue_access(q, sender, read=False, write=True)
    pgq.grant_queue_access(theirs, sender, read=True, write=False)
    api = _api(sender)
    refused = api.post(f"/v1/queues/{q.name}/messages", {"body": 1, "reply_to": theirs.name})
    assert refused.status_code == 403, refused.content
    hidden = api.post(f"/v1/queues/{q.name}/messages", {"body": 1, "reply_to": "q_not_there"})
    assert hidden.status_code == 404
    forged = api.post(
        f"/v1/queues/{q.name}/messages", {"body": 1, "headers": {"pgq_reply_to": theirs.name}}
    )
    assert forged.status_code == 400
    assert Message.objects.filter(queue=q).count() == 0
    sent = api.post(f"/v1/queues/{q.name}/messages", {"body": 2, "reply_to": mine.name})
    assert sent.status_code == 201, sent.content
    assert Message.objects.get(msg_id=sent.json()["id"]).headers["pgq_reply_to"] == mine.name
    batch = api.post(
        f"/v1/queues/{q.name}/messages", {"messages": [{"body": 3, "reply_to": mine.name}]}
    )
    assert batch.status_code == 400
    assert Message.objects.filter(queue=q).count() == 1


def test_the_admin_shows_a_groups_status_and_members_and_what_a_message_waits_for(
    make_queue, client
):
    users = get_user_model().objects
    owner = users.create_user("a_owner")
    reader = users.create_user("a_reader", is_staff=True)
    outsider = users.create_user("a_outsider", is_staff=True)
    q = make_queue(owner=owner)
    pgq.grant_queue_access(q, reader, read=True, write=False)
    gid = pgq.group(q, ["one", "two"], then=(q.name, "after"))
    then_id = pgq.group_status(gid).then_msg_id
    client.force_login(reader)
    listing = client.get("/admin/pgq_django/workflowgroup/")
    assert listing.status_code == 200
    assert f'href="/admin/pgq_django/workflowgroup/{gid}/change/"' in listing.text
    page = client.get(f"/admin/pgq_django/workflowgroup/{gid}/change/")
    assert page.status_code == 200
    assert "pending" in page.text and then_id is not None
    members = Dependency.objects.filter(group_id=gid).values_list("msg_id", flat=True)
    assert all(str(m) in page.text for m in members)
    browser = client.get(f"/admin/pgq_django/queue/{q.pk}/messages/")
    assert browser.status_code == 200, browser.status_code
    assert "waits for" in browser.text and "waiting" in browser.text
    client.force_login(outsider)
    assert f"workflowgroup/{gid}/" not in client.get("/admin/pgq_django/workflowgroup/").text
    refused = client.get(f"/admin/pgq_django/workflowgroup/{gid}/change/")
    assert refused.status_code in (302, 403, 404)


def test_an_expired_dependency_fails_its_dependant(make_queue):
    q = make_queue()
    a = pgq.send(q, "a", expires_in=5)
    b = pgq.send(q, "b", after=[a])
    time_passes(q, 10)  # a is past its expiry (b too, but b was sent with the queue's)
    Message.objects.filter(msg_id=b).update(expires_at=None)
    pgq.expire_messages(q)
    workflows_duty()
    dead = ArchivedMessage.objects.get(msg_id=b)
    assert dead.outcome == "dead" and f"dependency {a} ended expired" in dead.error


def test_a_message_outside_workflows_runs_no_workflow_statement(make_queue):
    q = make_queue()
    with statements_run() as seen:
        pgq.send(q, {"plain": True})
        assert run_one(q) is Outcome.ACKED
        pgq.send_batch(q, [1, 2])
        pgq.delete(q, [m.receipt for m in pgq.read(q, qty=2)])
    assert seen and not any("pgq_dependency" in text for text in seen)


def _index_scans(plan) -> list[str]:
    """The indexes a plan scans, depth first."""
    found = [plan["Index Name"]] if "Index Name" in plan else []
    for child in plan.get("Plans", []):
        found += _index_scans(child)
    return found


def _seq_scans(plan) -> list[str]:
    found = [plan["Relation Name"]] if plan.get("Node Type") == "Seq Scan" else []
    for child in plan.get("Plans", []):
        found += _seq_scans(child)
    return found


def test_resolving_reads_the_open_waits_only_never_the_finished_history(make_queue):
    q = make_queue()
    a = pgq.send(q, "a")
    pgq.send(q, "b", after=[a])
    with connection.cursor() as cur:  # a week of finished waits, kept for group_status
        cur.execute(
            "INSERT INTO pgq_dependency (msg_id, queue_id, dependant_id, outcome, finished_at)"
            " SELECT g, NULL, g + 1, 'acked', now() FROM generate_series(1, 20000) g"
        )
        cur.execute("ANALYZE pgq_dependency")
    for statement, params in (
        (workflow_sql._RESOLVE, {"ids": [a], "limit": 1000}),
        (workflow_sql._SWEEP, {"limit": 1000}),
    ):
        plan = generic_plan(statement, params)
        assert "pgq_dependency" not in _seq_scans(plan)
        assert "pgq_dependency_open" in _index_scans(plan)
