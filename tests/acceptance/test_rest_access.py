"""Authentication and grants over real HTTP: 401 without credentials, 403 without a grant,
nothing changed either way; a staff user sees and touches only granted queues."""

from __future__ import annotations

import pytest

import pgq_django as pgq


@pytest.fixture
def setup(make_user):
    owner = make_user(is_staff=True)
    reader = make_user(is_staff=True)
    stranger = make_user(is_staff=True)
    pgq.create_queue("q_mine", owner=owner)
    pgq.create_queue("q_other")
    pgq.grant_queue_access("q_mine", reader, read=True, write=False, manage=False)
    pgq.send("q_mine", "hello")
    return owner, reader, stranger


def test_no_credentials_answers_401_and_changes_nothing(setup, client_for):
    anonymous = client_for(None)
    for method, path, body in [
        ("get", "/v1/queues", None),
        ("post", "/v1/queues", {"id": "q_new"}),
        ("get", "/v1/queues/q_mine/messages", None),
        ("post", "/v1/queues/q_mine/messages", {"body": 1}),
        ("delete", "/v1/queues/q_mine", None),
        ("put", "/v1/queues/q_mine/purge", None),
        ("get", "/metrics", None),
    ]:
        response = getattr(anonymous, method)(path, json=body)
        assert response.status_code == 401, (path, response.text)
        assert response.json()["error"]["code"] == "not_authenticated"
        assert "WWW-Authenticate" in response.headers
    assert pgq.metrics("q_mine").queue_length == 1
    assert [q.name for q in pgq.list_queues()] == ["q_mine", "q_other"]


def test_wrong_password_answers_401(setup, client_for, live_url):
    session = client_for(None)
    session.auth = (setup[0].get_username(), "wrong")
    response = session.get("/v1/queues")
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "authentication_failed"


def test_a_user_sees_only_queues_granted_to_them(setup, client_for):
    owner, reader, stranger = setup
    assert [q["id"] for q in client_for(owner).get("/v1/queues").json()["data"]] == ["q_mine"]
    assert [q["id"] for q in client_for(reader).get("/v1/queues").json()["data"]] == ["q_mine"]
    assert client_for(stranger).get("/v1/queues").json()["data"] == []


def test_without_a_grant_every_call_answers_404_as_for_a_missing_queue_and_changes_nothing(
    setup, client_for
):
    """A user with no right at all on a queue cannot tell it from one that does not exist."""
    _, _, stranger = setup
    api = client_for(stranger)
    for method, path, body in [
        ("get", "/v1/queues/q_mine", None),
        ("put", "/v1/queues/q_mine", {"ack_deadline_seconds": 5}),
        ("delete", "/v1/queues/q_mine", None),
        ("get", "/v1/queues/q_mine/stats", None),
        ("put", "/v1/queues/q_mine/purge", None),
        ("put", "/v1/queues/q_mine/cleanup", None),
        ("get", "/v1/queues/q_mine/messages", None),
        ("get", "/v1/queues/q_mine/messages?wait_seconds=1", None),
        ("post", "/v1/queues/q_mine/messages", {"body": "intruder"}),
        ("post", "/v1/queues/q_mine/messages", {"messages": [{"body": 1}]}),
        ("put", "/v1/queues/q_mine/messages/1/ack", None),
        ("put", "/v1/queues/q_mine/messages/ack", {"ids": [1]}),
    ]:
        response = getattr(api, method)(path, json=body)
        missing = getattr(api, method)(path.replace("q_mine", "q_nowhere"), json=body)
        assert response.status_code == 404, (method, path, response.text)
        assert response.json()["error"]["code"] == "queue_not_found"
        assert response.text == missing.text.replace("q_nowhere", "q_mine")
    refused = api.post("/v1/queues", json={"id": "q_created_by_stranger"})
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "permission_denied"
    m = pgq.metrics("q_mine")
    assert (m.queue_length, m.total_messages, m.in_flight) == (1, 1, 0)
    assert pgq.get_queue("q_mine").visibility_timeout == 30
    assert [q.name for q in pgq.list_queues()] == ["q_mine", "q_other"]


def test_a_read_grant_consumes_and_acks_but_cannot_send_or_manage(setup, client_for):
    _, reader, _ = setup
    api = client_for(reader)
    [message] = api.get("/v1/queues/q_mine/messages").json()["data"]
    assert api.post("/v1/queues/q_mine/messages", json={"body": 2}).status_code == 403
    assert api.put("/v1/queues/q_mine/purge").status_code == 403
    assert api.put(f"/v1/queues/q_mine/messages/{message['receipt']}/ack").status_code == 204
    assert pgq.metrics("q_mine").queue_length == 0


def test_the_owner_manages_and_a_staff_user_with_add_permission_creates(setup, client_for):
    from django.contrib.auth.models import Permission

    owner, _, stranger = setup
    api = client_for(owner)
    changed = api.put("/v1/queues/q_mine", json={"ack_deadline_seconds": 5, "max_retries": 2})
    assert changed.status_code == 200, changed.text
    assert changed.json()["ack_deadline_seconds"] == 5 and changed.json()["max_retries"] == 2
    stranger.user_permissions.add(Permission.objects.get(codename="add_queue"))
    created = client_for(stranger).post("/v1/queues", json={"id": "q_strangers"})
    assert created.status_code == 201, created.text
    assert pgq.get_queue("q_strangers").owner == stranger
    # The creator owns it and so may use it; others still may not.
    assert client_for(stranger).get("/v1/queues/q_strangers/messages").status_code == 200
    assert client_for(owner).get("/v1/queues/q_strangers").status_code == 404


def test_publishing_needs_the_publish_grant(setup, client_for, make_user):
    owner, _, stranger = setup
    pgq.create_exchange("x_events", owner=owner)
    pgq.bind_queue("q_mine", "x_events")
    refused = client_for(stranger).post("/v1/topics/x_events/messages", json={"body": 1})
    assert refused.status_code == 404  # no right at all: as if it did not exist
    pgq.grant_publish_access("x_events", stranger)
    published = client_for(stranger).post("/v1/topics/x_events/messages", json={"body": 1})
    assert published.status_code == 201, published.text
    assert pgq.metrics("q_mine").queue_length == 2
    # Subscribing routes a topic into a queue: it needs manage on both.
    sub = {"id": "s1", "topic_id": "x_events", "queue_id": "q_other"}
    assert client_for(stranger).post("/v1/subscriptions", json=sub).status_code == 404


def test_token_authentication_works_when_authtoken_is_installed(setup, client_for):
    from rest_framework.authtoken.models import Token

    owner = setup[0]
    token = Token.objects.create(user=owner)
    session = client_for(None)
    session.headers["Authorization"] = f"Token {token.key}"
    assert [q["id"] for q in session.get("/v1/queues").json()["data"]] == ["q_mine"]


def test_session_authentication_needs_the_csrf_token_for_changes(setup, client_for, live_url):
    import requests

    owner = setup[0]
    browser = requests.Session()
    login_page = browser.get(live_url + "/admin/login/")
    csrf = browser.cookies["csrftoken"]
    browser.post(
        live_url + "/admin/login/",
        data={
            "username": owner.get_username(),
            "password": __import__("tests.http_server", fromlist=["PASSWORD"]).PASSWORD,
            "csrfmiddlewaretoken": csrf,
            "next": "/admin/",
        },
        headers={"Referer": login_page.url},
    )
    assert browser.get(live_url + "/v1/queues").status_code == 200
    refused = browser.post(live_url + "/v1/queues/q_mine/messages", json={"body": 1})
    assert refused.status_code == 403
    assert pgq.metrics("q_mine").queue_length == 1
    allowed = browser.post(
        live_url + "/v1/queues/q_mine/messages",
        json={"body": 1},
        headers={"X-CSRFToken": browser.cookies["csrftoken"], "Referer": live_url + "/"},
    )
    assert allowed.status_code == 201, allowed.text
    browser.close()


def test_a_changed_grant_group_or_superuser_flag_counts_from_the_next_request(
    setup, client_for, make_user
):
    """The server keeps the compiled SQL of each user's grant check, never its answer."""
    from django.contrib.auth.models import Group

    user = make_user(is_staff=True)
    api = client_for(user)
    writers = Group.objects.create(name="writers")
    pgq.grant_queue_access("q_other", writers, read=False, write=True)

    # Without any right the queue answers 404 (as if missing); the grant makes it 201.
    def send() -> int:
        return api.post("/v1/queues/q_other/messages", json={"body": 1}).status_code

    assert send() == 404
    user.groups.add(writers)
    assert send() == 201
    user.groups.remove(writers)
    assert send() == 404
    user.is_superuser = True
    user.save()
    assert send() == 201
    assert api.post("/v1/queues/q_nope/messages", json={"body": 1}).status_code == 404
    user.is_superuser = False
    user.save()
    assert send() == 404
    pgq.grant_queue_access("q_other", user, read=False, write=True)
    assert send() == 201
    pgq.revoke_queue_access("q_other", user)
    assert send() == 404
    assert pgq.metrics("q_other").queue_length == 3


def test_the_grant_check_by_name_agrees_with_the_queryset_rule(setup, make_user):
    """access.may() by name runs a cached statement; it answers what queues_for() says."""
    from django.contrib.auth.models import AnonymousUser, Group

    from pgq_django import access

    owner, reader, stranger = setup
    grouped = make_user(is_staff=True)
    team = Group.objects.create(name="team")
    grouped.groups.add(team)
    pgq.grant_queue_access("q_other", team, read=True, write=False, manage=True)
    root = make_user(is_superuser=True)
    names = ["q_mine", "q_other", "q_missing", "q_mine' OR '1'='1", "%", ""]
    for user in [owner, reader, stranger, grouped, root, AnonymousUser()]:
        for right in access.QUEUE_RIGHTS:
            for name in names:
                expected = access.queues_for(user, right).filter(name=name).exists()
                assert access.may(user, right, name) is expected, (user, right, name)
                assert access.may(user, right, name) is expected  # the cached statement
    assert access.may(reader, "read", "q_mine") and not access.may(reader, "write", "q_mine")
    assert access.may(grouped, "manage", "q_other") and not access.may(grouped, "write", "q_other")
    with pytest.raises(pgq.PgqError):
        access.may(reader, "publish-everything", "q_mine")


def test_a_user_with_some_right_but_not_this_one_still_gets_403(setup, client_for):
    _, reader, _ = setup
    refused = client_for(reader).put("/v1/queues/q_mine/purge")
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "permission_denied"
    assert pgq.metrics("q_mine").queue_length == 1


def test_a_topic_without_any_right_answers_the_404_of_a_missing_one(setup, client_for):
    owner, _, stranger = setup
    pgq.create_exchange("x_private", owner=owner)
    api = client_for(stranger)
    for method, path in [
        ("get", "/v1/topics/{}"),
        ("delete", "/v1/topics/{}"),
        ("post", "/v1/topics/{}/messages"),
    ]:
        hidden = getattr(api, method)(path.format("x_private"), json={"body": 1})
        missing = getattr(api, method)(path.format("x_nowhere"), json={"body": 1})
        assert hidden.status_code == 404, (path, hidden.text)
        assert hidden.text == missing.text.replace("x_nowhere", "x_private")
    pgq.grant_publish_access("x_private", stranger)
    assert api.delete("/v1/topics/x_private").status_code == 403
    assert pgq.get_exchange("x_private")


def test_another_users_subscription_is_hidden_and_its_403_does_not_name_the_queue(
    setup, client_for
):
    owner, reader, stranger = setup
    pgq.create_exchange("x_feed", owner=owner)
    pgq.subscribe("s_secret", "x_feed", "q_mine")
    hidden = client_for(stranger).get("/v1/subscriptions/s_secret")
    missing = client_for(stranger).get("/v1/subscriptions/s_nowhere")
    assert hidden.status_code == 404
    assert hidden.text == missing.text.replace("s_nowhere", "s_secret")
    assert client_for(stranger).delete("/v1/subscriptions/s_secret").status_code == 404
    # The reader may see it (read on its queue) but not delete it; the 403 names no queue.
    assert client_for(reader).get("/v1/subscriptions/s_secret").status_code == 200
    refused = client_for(reader).delete("/v1/subscriptions/s_secret")
    assert refused.status_code == 403, refused.text
    assert "q_mine" not in refused.text
    assert pgq.get_subscription("s_secret").queue.name == "q_mine"


def metric_queues(text: str) -> set[str]:
    return {
        line.split('queue="', 1)[1].split('"', 1)[0]
        for line in text.splitlines()
        if line.startswith("pgq_queue_length{")
    }


def test_metrics_show_a_staff_user_only_the_queues_their_grants_allow(setup, client_for, make_user):
    owner, reader, stranger = setup
    superuser = make_user(is_staff=True, is_superuser=True)
    assert metric_queues(client_for(reader).get("/metrics").text) == {"q_mine"}
    assert metric_queues(client_for(owner).get("/metrics").text) == {"q_mine"}
    assert metric_queues(client_for(stranger).get("/metrics").text) == set()
    assert metric_queues(client_for(superuser).get("/metrics").text) >= {"q_mine", "q_other"}


def test_the_schema_and_swagger_ui_need_authentication_by_default(setup, client_for):
    anonymous = client_for(None)
    for path in ("/v1/schema", "/v1/docs"):
        refused = anonymous.get(path)
        assert refused.status_code == 401, (path, refused.text)
        assert refused.json()["error"]["code"] == "not_authenticated"
        assert client_for(setup[2]).get(path).status_code == 200
