"""The admin, driven in headless Chromium (Playwright + Debian's chromium) over real HTTP.

The browser tests log in, open the dashboard (and save a screenshot of it under
tests/artifacts/), browse a message without leasing it, purge a queue and redrive a
dead-letter queue. The permission tests use Django's test client: staff see and act only on
the queues they are granted.
"""

from __future__ import annotations

import itertools
import os
import shutil
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connections
from django.db.models.functions import Now
from django.urls import reverse

import pgq_django as pgq
from pgq_django.models import ArchivedMessage, Exchange, Message, Queue, QueueCounter
from tests.conftest import ROOT

pytestmark = pytest.mark.browser

CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = ROOT / "tests" / "artifacts"
PASSWORD = "correct horse battery staple"

needs_chromium = pytest.mark.skipif(
    not os.path.exists(CHROMIUM) and not shutil.which("chromium"),
    reason="Debian's chromium is not installed (make browser installs it)",
)


# -- browser -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    """One Chromium for the whole module: launching it costs seconds, a fresh context does not.

    Playwright's sync API runs an event loop on this thread for as long as it is started; the
    tests' own ORM calls are still plain synchronous code, which Django would otherwise refuse
    next to a loop, so the module runs with DJANGO_ALLOW_ASYNC_UNSAFE.
    """
    from playwright.sync_api import sync_playwright

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
        with sync_playwright() as p:
            browser = p.chromium.launch(
                executable_path=CHROMIUM,
                args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"],
            )
            try:
                yield browser
            finally:
                browser.close()


@pytest.fixture
def browser_page(live_server: Any, chromium: Any) -> Iterator[Any]:
    """A logged-in page, as a superuser, in a context (cookies, storage) of its own."""
    User.objects.create_superuser("admin", "admin@example.com", PASSWORD)
    context = chromium.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.set_default_timeout(15_000)
    page.goto(live_server.url + "/admin/login/?next=/admin/")
    page.fill("#id_username", "admin")
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_url(live_server.url + "/admin/")
    try:
        yield page
    finally:
        context.close()
        # ORM calls made while Playwright's loop is installed open their own connection;
        # close it here so the test database can be dropped at the end of the run.
        connections.close_all()


def _dead_lettered(source: Queue, body: Any) -> int:
    """Send one message to ``source`` (max_retries=0) and fail it into its dead-letter queue."""
    msg_id = pgq.send(source, body)
    [leased] = pgq.read(source)
    assert pgq.nack(source, leased.receipt, error="boom")
    return msg_id


@needs_chromium
def test_dashboard_draws_throughput_and_depth_charts(transactional_db, live_server, browser_page):
    page = browser_page
    orders = pgq.create_queue("orders")
    mail = pgq.create_queue("mail")
    pgq.send_batch(orders, [{"order": i} for i in range(12)])
    pgq.send_batch(mail, [{"to": "x@example.com"}] * 3)
    for m in pgq.read(orders, qty=5):
        pgq.delete(orders, m.receipt)

    page.goto(live_server.url + "/admin/pgq_django/queue/")
    page.click("#pgq-dashboard-link")
    page.wait_for_selector(".pgq-dashboard[data-drawn=true]")
    assert page.locator("#pgq-throughput path.pgq-line").count() == 3
    assert page.locator("#pgq-depth-chart path.pgq-line").count() == 1
    assert page.locator('[data-total="depth"]').inner_text() == "10"
    assert "sent (15)" in page.locator("#pgq-throughput .pgq-legend").inner_text()
    assert "acked (5)" in page.locator("#pgq-throughput .pgq-legend").inner_text()
    # The last point of the depth line is the live depth: the path ends at y(10).
    table = page.locator("#pgq-queue-table").inner_text()
    assert "orders" in table and "mail" in table
    for chart in ("#pgq-throughput", "#pgq-depth-chart"):
        # Even y-axis ticks from 0 up, and the last time label (now) inside the chart.
        ticks = [int(t) for t in page.locator(f"{chart} .pgq-y").all_text_contents()]
        steps = {b - a for a, b in itertools.pairwise(ticks)}
        assert ticks[0] == 0 and len(steps) == 1 and steps.pop() in (1, 2, 5, 10), ticks
        last = page.locator(f"{chart} .pgq-x").last.bounding_box()
        svg = page.locator(f"{chart} svg").bounding_box()
        assert last["x"] + last["width"] <= svg["x"] + svg["width"]
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "dashboard.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 10_000


# Which line is on top just inside each line's edge, on the middle of the plot: with every
# value zero the three throughput lines lie on each other, so each must be wider than the
# lines drawn after it to be seen at all.
_TOPMOST_AT_EACH_EDGE = """(chart) => {
  const svg = document.querySelector(chart + " svg");
  const paths = Array.from(svg.querySelectorAll("path.pgq-line"));
  const middle = paths[0].getPointAtLength(paths[0].getTotalLength() / 2);
  const seen = {};
  for (const path of paths) {
    const point = svg.createSVGPoint();
    point.x = middle.x;
    point.y = middle.y - (parseFloat(path.getAttribute("stroke-width")) / 2 - 0.4);
    const screen = point.matrixTransform(svg.getScreenCTM());
    const hit = document.elementFromPoint(screen.x, screen.y);
    seen[path.dataset.series] = hit ? hit.getAttribute("data-series") : null;
  }
  return seen;
}"""


@needs_chromium
def test_idle_dashboard_shows_every_line_and_an_axis_from_0_to_1(
    transactional_db, live_server, browser_page
):
    page = browser_page
    pgq.create_queue("quiet")  # a queue, and no message in the last hour

    page.goto(live_server.url + "/admin/pgq_django/queue/dashboard/")
    page.wait_for_selector(".pgq-dashboard[data-drawn=true]")
    for chart in ("#pgq-throughput", "#pgq-depth-chart"):
        assert page.locator(f"{chart} .pgq-y").all_text_contents() == ["0", "1"]
    legend = page.locator("#pgq-throughput .pgq-legend").inner_text()
    assert "sent (0)" in legend and "acked (0)" in legend and "dead (0)" in legend
    seen = page.evaluate(_TOPMOST_AT_EACH_EDGE, "#pgq-throughput")
    assert seen == {"sent": "sent", "acked": "acked", "dead": "dead"}


@needs_chromium
def test_sent_and_acked_stay_apart_when_every_message_sent_was_acked(
    transactional_db, live_server, browser_page
):
    page = browser_page
    orders = pgq.create_queue("orders")
    pgq.send_batch(orders, [{"order": i} for i in range(4)])
    for m in pgq.read(orders, qty=4):
        pgq.delete(orders, m.receipt)
    # Each send and ack counts at its own moment: put them in one instant, so that a bucket
    # boundary falling between the two cannot draw them in different buckets.
    QueueCounter.objects.filter(queue=orders).update(at=Now())

    page.goto(live_server.url + "/admin/pgq_django/queue/dashboard/")
    page.wait_for_selector(".pgq-dashboard[data-drawn=true]")
    lines = page.locator("#pgq-throughput path.pgq-line")
    sent, acked = lines.nth(0), lines.nth(1)
    assert sent.get_attribute("d") == acked.get_attribute("d")  # the same values...
    assert sent.get_attribute("data-series") == "sent"
    # ...drawn first and wider, so the sent line shows around the acked one.
    assert float(sent.get_attribute("stroke-width")) > float(acked.get_attribute("stroke-width"))
    seen = page.evaluate(_TOPMOST_AT_EACH_EDGE, "#pgq-throughput")
    assert seen["sent"] == "sent" and seen["acked"] == "acked"
    assert page.locator("#pgq-throughput .pgq-y").first.text_content() == "0"


@needs_chromium
def test_the_admin_index_links_the_dashboard(transactional_db, live_server, browser_page):
    page = browser_page  # logged in, on the admin index
    pgq.create_queue("orders")
    page.goto(live_server.url + "/admin/")
    link = page.locator(".app-pgq_django a", has_text="Dashboard")
    assert link.count() == 1
    link.click()
    page.wait_for_selector(".pgq-dashboard[data-drawn=true]")
    assert page.url == live_server.url + reverse("admin:pgq_django_queue_dashboard")


@needs_chromium
def test_message_browser_folds_tracebacks_and_shows_whole_bodies(
    transactional_db, live_server, browser_page
):
    from pgq_django.worker.executor import describe_error

    page = browser_page
    dlq = pgq.create_queue("orders_dlq")
    orders = pgq.create_queue("orders", max_retries=0, dead_letter_queue=dlq)
    try:  # a real traceback through this file and Django's installed code
        User.objects.get(username="nobody")
    except User.DoesNotExist as exc:
        error = describe_error(exc)
    assert str(ROOT) in error and "site-packages" in error
    dead = pgq.send(orders, {"order": 7})
    [leased] = pgq.read(orders)
    pgq.nack(orders, leased.receipt, error=error)
    long_body = {"text": "lorem ipsum " * 800 + "THE END"}
    long_id = pgq.send(dlq, long_body)

    page.goto(live_server.url + reverse("admin:pgq_django_queue_messages", args=[dlq.pk]))
    row = page.locator(f"tr[data-msg-id='{dead}']")
    folded = row.locator("details.pgq-traceback")
    assert folded.get_attribute("open") is None
    assert "DoesNotExist: User matching query does not exist." in folded.inner_text()
    assert not folded.locator("pre").is_visible()
    # The header keeps only the error's last line; nothing shows the server's directories.
    summary = "User.DoesNotExist: User matching query does not exist."
    assert f'"last_error": "django.contrib.auth.models.{summary}"' in row.inner_text()
    assert str(ROOT) not in row.inner_text() and "site-packages" not in row.inner_text()
    assert row.bounding_box()["height"] < 400
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "messages.png"), full_page=True)

    folded.locator("summary").click()
    trace = folded.locator("pre")
    assert trace.is_visible()
    assert 'File "tests/acceptance/test_admin_browser.py"' in trace.inner_text()
    assert 'File "django/db/models/query.py"' in trace.inner_text()
    assert str(ROOT) not in trace.inner_text()

    body = page.locator(f"tr[data-msg-id='{long_id}'] .pgq-body")
    assert body.text_content().rstrip().endswith('THE END"\n}')  # whole, in a scrolling box
    assert body.evaluate("e => e.scrollHeight > e.clientHeight")
    page.screenshot(path=str(ARTIFACTS / "messages-traceback.png"), full_page=True)


@needs_chromium
def test_changelist_shows_live_metrics(transactional_db, live_server, browser_page):
    page = browser_page
    dlq = pgq.create_queue("jobs_dlq")
    jobs = pgq.create_queue("jobs", max_retries=0, dead_letter_queue=dlq)
    _dead_lettered(jobs, {"job": 1})
    pgq.send_batch(jobs, [1, 2, 3])
    pgq.read(jobs, qty=1, vt=600)
    page.goto(live_server.url + "/admin/pgq_django/queue/")
    row = page.locator("#result_list tr", has_text="jobs").filter(has_not_text="jobs_dlq")
    cells = row.locator("td").all_inner_texts()
    # checkbox, depth, in flight, oldest, dead letters, state, browse link
    assert cells[1:3] == ["3", "1"]
    assert cells[3].endswith("s")
    assert cells[4:6] == ["1", "active"]


@needs_chromium
def test_browse_a_message_without_leasing_it(transactional_db, live_server, browser_page):
    page = browser_page
    q = pgq.create_queue("orders")
    msg_id = pgq.send(q, {"customer": "Ada", "items": [1, 2]}, headers={"trace": "t-42"})
    before = Message.objects.get(msg_id=msg_id)

    page.goto(live_server.url + "/admin/pgq_django/queue/")
    page.locator("#result_list tr", has_text="orders").get_by_text("browse").click()
    row = page.locator(f"tr[data-msg-id='{msg_id}']")
    assert '"customer": "Ada"' in row.locator(".pgq-body").inner_text()
    assert '"trace": "t-42"' in row.inner_text()
    assert row.locator(".pgq-attempts").inner_text() == "0"
    assert "visible" in row.inner_text()

    after = Message.objects.get(msg_id=msg_id)
    assert (after.read_ct, after.vt) == (before.read_ct, before.vt)
    assert [m.msg_id for m in pgq.read(q)] == [msg_id]  # still deliverable


@needs_chromium
def test_purge_and_redrive_from_the_browser(transactional_db, live_server, browser_page):
    page = browser_page
    page.on("dialog", lambda dialog: dialog.accept())
    dlq = pgq.create_queue("orders_dlq")
    orders = pgq.create_queue("orders", max_retries=0, dead_letter_queue=dlq)
    dead = _dead_lettered(orders, {"order": "failed"})
    pgq.send_batch(orders, [{"n": i} for i in range(4)])
    assert Message.objects.filter(queue=dlq).count() == 1

    page.goto(live_server.url + reverse("admin:pgq_django_queue_messages", args=[orders.pk]))
    assert page.locator("#pgq-depth").inner_text() == "4"
    page.click("#pgq-purge")
    page.wait_for_selector("text=Purged 4 messages")
    assert not Message.objects.filter(queue=orders).exists()

    page.goto(live_server.url + reverse("admin:pgq_django_queue_messages", args=[dlq.pk]))
    row = page.locator(f"tr[data-msg-id='{dead}']")
    assert "pgq_dead_letter" in row.inner_text()
    page.click("#pgq-redrive")
    page.wait_for_selector("text=Redrove 1 messages")
    [back] = pgq.read(orders)
    assert back.message == {"order": "failed"}
    assert not Message.objects.filter(queue=dlq).exists()


@needs_chromium
def test_send_pause_resume_and_replay(transactional_db, live_server, browser_page):
    page = browser_page
    q = pgq.create_queue("orders", archive_on_ack=True)
    msg_id = pgq.send(q, {"first": True})
    [m] = pgq.read(q)
    pgq.delete(q, m.receipt)  # archived as acked
    assert ArchivedMessage.objects.filter(msg_id=msg_id).exists()

    page.goto(live_server.url + reverse("admin:pgq_django_queue_send", args=[q.pk]))
    page.fill("#id_body", '{"test": 1}')
    page.fill("#id_headers", '{"source": "admin"}')
    page.click("#pgq-send")
    page.wait_for_selector("text=Sent message")
    [sent] = pgq.read(q)
    assert (sent.message, sent.headers["source"]) == ({"test": 1}, "admin")

    page.click("#pgq-pause")
    page.wait_for_selector("#pgq-resume")
    with pytest.raises(pgq.QueuePaused):
        pgq.read(q)
    page.click("#pgq-resume")
    page.wait_for_selector("#pgq-pause")

    page.goto(
        live_server.url + reverse("admin:pgq_django_queue_messages", args=[q.pk]) + "?tab=archive"
    )
    page.check(f"input[name=msg_id][value='{msg_id}']")
    page.click("#pgq-replay")
    page.wait_for_selector("text=Replayed 1 messages")
    [replayed] = pgq.read(q)
    assert replayed.message == {"first": True}
    assert replayed.headers["pgq_replayed_from"] == msg_id


@needs_chromium
def test_exchange_page_edits_bindings_inline(transactional_db, live_server, browser_page):
    page = browser_page
    q = pgq.create_queue("audit")
    x = pgq.create_exchange("events", "topic")
    page.goto(live_server.url + reverse("admin:pgq_django_exchange_change", args=[x.pk]))
    page.click("#bindings-group .add-row a")
    page.select_option("#id_bindings-0-queue", str(q.pk))
    page.fill("#id_bindings-0-routing_key", "order.#")
    page.fill("#id_bindings-0-filters", '{"region": ["eu"]}')
    page.click("input[name=_save]")
    page.wait_for_selector(".messagelist .success")
    assert len(pgq.publish(x, 1, routing_key="order.created", headers={"region": "eu"})) == 1
    assert pgq.publish(x, 1, routing_key="user.created", headers={"region": "eu"}) == []


# -- permissions (test client) -----------------------------------------------------------------


@pytest.fixture
def staff_client(client: Any, db: Any) -> Any:
    staff = User.objects.create_user("staff", password=PASSWORD, is_staff=True)
    client.force_login(staff)
    client.user = staff
    return client


def test_staff_see_only_granted_queues(staff_client, make_queue):
    mine, hidden = make_queue(), make_queue()
    pgq.grant_queue_access(mine, staff_client.user, read=True, write=False)
    page = staff_client.get("/admin/pgq_django/queue/").content.decode()
    assert mine.name in page and hidden.name not in page
    assert (
        staff_client.get(reverse("admin:pgq_django_queue_messages", args=[hidden.pk])).status_code
        == 404
    )
    dashboard = staff_client.get(reverse("admin:pgq_django_queue_dashboard_data")).json()
    assert [q["name"] for q in dashboard["queues"]] == [mine.name]


def test_staff_find_the_dashboard_on_the_admin_index_and_cannot_change_through_it(
    staff_client, make_queue
):
    mine = make_queue()
    pgq.grant_queue_access(mine, staff_client.user, read=True, write=False)
    entry = reverse("admin:pgq_django_queuedashboard_changelist")
    index = staff_client.get("/admin/").content.decode()
    assert f'href="{entry}"' in index
    assert reverse("admin:pgq_django_queue_changelist") in index
    response = staff_client.get(entry)
    assert response.status_code == 302
    assert response["Location"] == reverse("admin:pgq_django_queue_dashboard")
    # Nothing to add, change or delete through the entry: no such page, and no queue changed.
    assert "queuedashboard/add/" not in index
    assert staff_client.post(entry + "add/", {"name": "sneaky"}).status_code == 404
    assert list(Queue.objects.values_list("name", flat=True)) == [mine.name]


def test_non_staff_see_no_dashboard_entry(client, db):
    user = User.objects.create_user("plain", password=PASSWORD)
    client.force_login(user)
    response = client.get(reverse("admin:pgq_django_queuedashboard_changelist"))
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("admin:login"))


def test_staff_cannot_purge_without_the_manage_right(staff_client, make_queue):
    q = make_queue()
    pgq.grant_queue_access(q, staff_client.user, read=True, write=True, manage=False)
    pgq.send(q, 1)
    url = reverse("admin:pgq_django_queue_operate", args=[q.pk])
    staff_client.post(url, {"op": "purge"})
    assert Message.objects.filter(queue=q).count() == 1
    response = staff_client.post(
        "/admin/pgq_django/queue/", {"action": "purge_selected", "_selected_action": [q.pk]}
    )
    assert response.status_code in (200, 302)
    assert Message.objects.filter(queue=q).count() == 1
    pgq.grant_queue_access(q, staff_client.user, manage=True)
    staff_client.post(url, {"op": "purge"})
    assert not Message.objects.filter(queue=q).exists()


def test_staff_without_write_cannot_send_a_test_message(staff_client, make_queue):
    q = make_queue()
    pgq.grant_queue_access(q, staff_client.user, read=True, write=False)
    staff_client.post(
        reverse("admin:pgq_django_queue_send", args=[q.pk]),
        {
            "body": "{}",
            "priority": 0,
            "delay": 0,
        },
    )
    assert not Message.objects.filter(queue=q).exists()


def test_staff_see_exchanges_they_may_publish_to_but_cannot_change_them(staff_client, db):
    shown = pgq.create_exchange("shown")
    pgq.create_exchange("private_events")
    pgq.grant_publish_access(shown, staff_client.user)
    page = staff_client.get("/admin/pgq_django/exchange/").content.decode()
    assert "shown" in page and "private_events" not in page
    url = reverse("admin:pgq_django_exchange_change", args=[shown.pk])
    staff_client.post(url, {"name": "renamed", "type": "direct"})
    assert Exchange.objects.get(pk=shown.pk).type == "fanout"


def test_non_staff_users_get_nothing(client, db, make_queue):
    make_queue()
    user = User.objects.create_user("plain", password=PASSWORD)
    client.force_login(user)
    assert client.get("/admin/pgq_django/queue/").status_code == 302  # to the login page
    assert client.get(reverse("admin:pgq_django_queue_dashboard_data")).status_code == 302


def test_errors_are_shown_with_install_prefixes_and_the_project_directory_cut(settings, queue):
    from pgq_django.admin.errors import relative_paths, split_errors

    settings.BASE_DIR = "/srv/app"
    trace = (
        "Traceback (most recent call last):\n"
        '  File "/srv/app/.venv/lib/python3.12/site-packages/django/db/x.py", line 1, in f\n'
        '  File "/usr/lib/python3.12/json/decoder.py", line 2, in g\n'
        '  File "/srv/app/shop/pgq_handlers.py", line 3, in h\n'
        '  File "/opt/elsewhere/tool.py", line 4, in i\n'
        "ValueError: bad order\n"
    )
    assert relative_paths(trace).splitlines()[1:5] == [
        '  File "django/db/x.py", line 1, in f',
        '  File "json/decoder.py", line 2, in g',
        '  File "shop/pgq_handlers.py", line 3, in h',
        '  File "/opt/elsewhere/tool.py", line 4, in i',
    ]
    # An archived dead message (no dead-letter queue) keeps its error in the archive row.
    pgq.alter_queue(queue, max_retries=0)
    msg_id = pgq.send(queue, {"n": 1})
    [leased] = pgq.read(queue)
    pgq.nack(queue, leased.receipt, error=trace)
    headers, [shown] = split_errors(ArchivedMessage.objects.get(msg_id=msg_id))
    assert (shown.where, shown.summary) == ("error", "ValueError: bad order")
    assert "/srv/app" not in shown.traceback and headers == {}
