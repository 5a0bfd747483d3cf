"""A consume leases messages, so only a request a client meant to send may do it: never a
HEAD (which proxies and link checkers send on their own), never a session cookie alone
(which a page on another site can make a logged-in browser send)."""

from __future__ import annotations

from typing import Any

import pytest
import requests

import pgq_django as pgq
from tests.http_server import PASSWORD


@pytest.fixture
def owner(make_user: Any) -> Any:
    user = make_user(is_staff=True)
    pgq.create_queue("q_safe", owner=user)
    pgq.send("q_safe", "keep me")
    return user


def nothing_leased() -> bool:
    numbers = pgq.metrics("q_safe")
    return numbers.queue_length == 1 and numbers.in_flight == 0


def logged_in_browser(live_url: str, user: Any) -> requests.Session:
    """A requests session holding a real Django session cookie from the admin login."""
    browser = requests.Session()
    login_page = browser.get(live_url + "/admin/login/")
    browser.post(
        live_url + "/admin/login/",
        data={
            "username": user.get_username(),
            "password": PASSWORD,
            "csrfmiddlewaretoken": browser.cookies["csrftoken"],
            "next": "/admin/",
        },
        headers={"Referer": login_page.url},
    )
    assert "sessionid" in browser.cookies
    return browser


@pytest.mark.parametrize("query", ["", "?limit=1000&visibility_timeout_seconds=43200"])
@pytest.mark.parametrize("path", ["/v1/queues/q_safe/messages", "/v1/queues/q_safe/messages/"])
def test_head_on_the_consume_url_answers_405_and_leases_nothing(owner, client_for, path, query):
    api = client_for(owner)
    response = api.head(path + query)
    assert response.status_code == 405
    assert "HEAD" not in response.headers["Allow"]
    assert nothing_leased()
    # The same URL with GET still consumes.
    assert [m["body"] for m in api.get(path).json()["data"]] == ["keep me"]


def test_head_on_a_long_poll_consume_answers_405_at_once_and_leases_nothing(owner, client_for):
    response = client_for(owner).head("/v1/queues/q_safe/messages?wait_seconds=20", timeout=10)
    assert response.status_code == 405
    assert response.elapsed.total_seconds() < 5
    assert nothing_leased()


@pytest.mark.parametrize("wait", ["", "&wait_seconds=1"])
def test_a_cross_site_consume_with_only_the_session_cookie_is_refused(owner, live_url, wait):
    """What a page on another site gets by navigating a logged-in admin to the consume URL:
    the cookie is sent, the CSRF header is not."""
    browser = logged_in_browser(live_url, owner)
    assert browser.get(live_url + "/v1/queues/q_safe").status_code == 200  # logged in
    url = f"{live_url}/v1/queues/q_safe/messages?limit=1000&visibility_timeout_seconds=43200"
    refused = browser.get(url + wait, headers={"Referer": "https://evil.example/"})
    assert refused.status_code == 403, refused.text
    error = refused.json()["error"]
    assert error["code"] == "permission_denied"
    assert "CSRF" in error["message"]
    assert nothing_leased()
    browser.close()


def test_a_session_consume_with_the_csrf_token_leases_as_a_post_would(owner, live_url):
    browser = logged_in_browser(live_url, owner)
    got = browser.get(
        f"{live_url}/v1/queues/q_safe/messages",
        headers={"X-CSRFToken": browser.cookies["csrftoken"], "Referer": live_url + "/"},
    )
    assert got.status_code == 200, got.text
    assert [m["body"] for m in got.json()["data"]] == ["keep me"]
    browser.close()


def test_basic_and_token_consumes_need_no_csrf_token(owner, client_for):
    from rest_framework.authtoken.models import Token

    pgq.send("q_safe", "second")
    assert len(client_for(owner).get("/v1/queues/q_safe/messages?limit=1").json()["data"]) == 1
    token = client_for(None)
    token.headers["Authorization"] = f"Token {Token.objects.create(user=owner).key}"
    assert len(token.get("/v1/queues/q_safe/messages?limit=1").json()["data"]) == 1
