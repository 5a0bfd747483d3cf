"""``GET /v1/groups/{id}`` shows a group's follow-up only to a caller who may read its queue.

A group's members and its follow-up (``then=``) may go to different queues; the read right on
the members' queue lets a caller see the group's progress, not where the follow-up went.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth import get_user_model
from rest_framework.test import APIClient

import pgq_django as pgq
from pgq_django.models import Message, WorkflowGroup

pytestmark = pytest.mark.django_db(transaction=True)


def _api(user: Any) -> APIClient:
    api = APIClient()
    api.force_authenticate(user)
    api.default_format = "json"
    return api


def test_the_follow_ups_queue_and_id_are_hidden_from_a_caller_who_cannot_read_it(make_queue):
    users = get_user_model().objects
    owner = users.create_user("gf_owner")
    member_reader, both_reader, follow_up_writer = (
        users.create_user(n) for n in ("gf_members", "gf_both", "gf_writer")
    )
    members, secret = make_queue(owner=owner), make_queue(owner=owner)
    for user in (member_reader, both_reader, follow_up_writer):
        pgq.grant_queue_access(members, user, read=True, write=False)
    pgq.grant_queue_access(secret, both_reader, read=True, write=False)
    # Writing to the follow-up's queue is not reading it: its messages stay out of sight.
    pgq.grant_queue_access(secret, follow_up_writer, read=False, write=True)
    gid = pgq.group(members, [1, 2], then=(secret.name, {"report": "done"}))
    then_id = WorkflowGroup.objects.get(pk=gid).then_msg_id
    before = list(Message.objects.order_by("msg_id").values_list("msg_id", "queue_id", "vt"))

    for user in (member_reader, follow_up_writer):
        answer = _api(user).get(f"/v1/groups/{gid}")
        assert answer.status_code == 200, answer.content
        body = answer.json()
        assert (body["then_msg_id"], body["then_queue_name"]) == (None, "")
        assert secret.name not in answer.content.decode()
        assert (body["status"], body["size"], body["pending"]) == ("pending", 2, 2)

    for user in (both_reader, owner):
        body = _api(user).get(f"/v1/groups/{gid}").json()
        assert (body["then_msg_id"], body["then_queue_name"]) == (then_id, secret.name)

    # Asking changed nothing: the members and the held follow-up are as they were.
    after = list(Message.objects.order_by("msg_id").values_list("msg_id", "queue_id", "vt"))
    assert after == before


def test_a_follow_up_on_the_members_queue_is_shown_to_its_reader(make_queue):
    owner = get_user_model().objects.create_user("gf_owner2")
    reader = get_user_model().objects.create_user("gf_reader2")
    q = make_queue(owner=owner)
    pgq.grant_queue_access(q, reader, read=True, write=False)
    gid = pgq.group(q, [1], then=(q.name, "next"))
    body = _api(reader).get(f"/v1/groups/{gid}").json()
    assert body["then_queue_name"] == q.name
    assert body["then_msg_id"] == WorkflowGroup.objects.get(pk=gid).then_msg_id


def test_the_admin_names_the_follow_up_only_to_a_reader_of_its_queue(make_queue, client):
    users = get_user_model().objects
    owner = users.create_user("gf_owner3")
    member_reader = users.create_user("gf_staff", is_staff=True)
    both_reader = users.create_user("gf_staff_both", is_staff=True)
    members, secret = make_queue(owner=owner), make_queue(owner=owner)
    for user in (member_reader, both_reader):
        pgq.grant_queue_access(members, user, read=True, write=False)
    pgq.grant_queue_access(secret, both_reader, read=True, write=False)
    gid = pgq.group(members, ["one"], then=(secret.name, "after"))
    then_id = WorkflowGroup.objects.get(pk=gid).then_msg_id
    shown = f"{then_id} on {secret.name}"
    pages = ("/admin/pgq_django/workflowgroup/", f"/admin/pgq_django/workflowgroup/{gid}/change/")

    client.force_login(member_reader)
    for page in pages:
        answer = client.get(page)
        assert answer.status_code == 200
        assert members.name in answer.text and secret.name not in answer.text

    client.force_login(both_reader)
    for page in pages:
        assert shown in client.get(page).text
