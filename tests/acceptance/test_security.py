"""Attacks on pgq_django, each performed for real (issue 8; docs/threat-model.md).

Workers are real ``manage.py pgq_worker`` processes; the admin is driven through Django's test
Client with CSRF checks on and real tokens. Each test states the attack, then proves that it
changed nothing it should not have.
"""

from __future__ import annotations

import importlib
import json
import sys
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.core import signing
from django.test import override_settings

import pgq_django as pgq
from pgq_django import access
from pgq_django.task_signing import SIGNING_SALT
from pgq_django.tasks import TaskResultStatus
from tests.conftest import manage_on

WORKER = ("-m", "django", "pgq_worker", "-v", "2")
TASK_QUEUE = "tasks_default"


def finish(proc: Any, timeout: float = 120.0) -> str:
    """Wait for a ``--once`` worker; its stderr, for assertion messages."""
    _out, err = proc.communicate(timeout=timeout)
    assert proc.returncode is not None
    return err


# -- 1. a task message names the code it runs ----------------------------------------------


@pytest.fixture
def tasks_backend(db: Any) -> Any:
    """The TEST_TASKS backends in this process; the task queue retries (rejection must not)."""
    with override_settings(TASKS=settings.TEST_TASKS):
        pgq.create_queue(TASK_QUEUE, archive_on_ack=True, max_retries=5, retry_delay=0)
        try:
            from django.tasks import task_backends
        except ImportError:
            from django_tasks import task_backends
        yield task_backends["default"]


@pytest.fixture
def sec_tasks(tasks_backend: Any) -> Any:
    return importlib.import_module("tests.security_tasks")


def _signature(call: dict[str, Any], key: str | None = None) -> str:
    """What the backend signs at enqueue (docs/threat-model.md), derived independently."""
    text = json.dumps(
        {k: call[k] for k in ("task", "args", "kwargs", "backend")},
        sort_keys=True,
        separators=(",", ":"),
    )
    return signing.Signer(key=key, salt=SIGNING_SALT, algorithm="sha256").signature(text)


def _call(task: str, *args: Any) -> dict[str, Any]:
    return {"task": task, "args": list(args), "kwargs": {}, "backend": "default"}


def _run_task_worker(spawn: Any, canary: Path) -> str:
    return finish(
        spawn(
            *WORKER,
            "--queue",
            TASK_QUEUE,
            "--once",
            PGQ_TEST_TASKS="1",
            PGQ_CANARY=str(canary),
        )
    )


def _forged_bodies(target: Path) -> dict[str, dict[str, Any]]:
    """Bodies an attacker with a write grant on a task queue can send."""
    shell = f"touch {target}"
    copied = _call("tests.security_tasks.touch", str(target))
    copied["signature"] = _signature(_call("tests.security_tasks.touch", "/dev/null"))
    guessed = _call("tests.security_tasks.touch", str(target))
    guessed["signature"] = _signature(guessed, key="a guessed secret key")
    return {
        "subprocess.getoutput": {"task": "subprocess.getoutput", "args": [shell]},
        "os.system, made-up signature": {**_call("os.system", shell), "signature": "abc"},
        "plain function": _call("tests.security_tasks.plain_touch", str(target)),
        "other backend's task": _call("tests.security_tasks.other_backend_touch", str(target)),
        "module whose import is the attack": _call("tests.security_canary.touch", str(target)),
        "signature of another call": copied,
        "signature made with a guessed key": guessed,
    }


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_forged_task_message_runs_nothing_in_the_worker_and_is_archived_dead(
    tasks_backend, spawn, tmp_path
):
    target, canary = tmp_path / "pwned", tmp_path / "imported"
    forged = {name: pgq.send(TASK_QUEUE, body) for name, body in _forged_bodies(target).items()}
    err = _run_task_worker(spawn, canary)
    assert not target.exists(), err
    assert not canary.exists(), "the worker imported a module a message named"
    for name, msg_id in forged.items():
        found = pgq.result(msg_id)
        assert found.outcome == "dead", (name, found)
        assert found.attempts == 1, f"{name}: a rejected message is not retried"
        assert "not a task enqueued by this project" in found.error, (name, found.error)


@pytest.mark.django_db(transaction=True)
def test_get_result_of_a_forged_message_is_failed_and_imports_nothing(tasks_backend, tmp_path):
    sys.modules.pop("tests.security_canary", None)
    msg_id = pgq.send(TASK_QUEUE, _call("tests.security_canary.touch", str(tmp_path / "x")))
    result = tasks_backend.get_result(str(msg_id))
    assert result.status == TaskResultStatus.FAILED
    assert "not a task enqueued by this project" in result.errors[0].traceback
    assert result.errors[0].exception_class is pgq.RejectMessage
    assert result.task.func.__name__ == "unavailable_task"
    assert "tests.security_canary" not in sys.modules


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_even_a_validly_signed_message_runs_only_a_pgq_task(sec_tasks, spawn, tmp_path):
    """Defence in depth, should the signing key leak: the path must name one of our Tasks."""
    target = tmp_path / "pwned"
    cases = {
        "plain function": (_call("tests.security_tasks.plain_touch", str(target)), "not a task"),
        "other backend's task": (
            _call("tests.security_tasks.other_backend_touch", str(target)),
            "belongs to task backend 'other'",
        ),
        "task in a module the worker cannot import": (
            _call("tests.no_such_module.touch", str(target)),
            "cannot be imported",
        ),
    }
    sent = {}
    for name, (call, _why) in cases.items():
        sent[name] = pgq.send(TASK_QUEUE, {**call, "signature": _signature(call)})
    err = _run_task_worker(spawn, tmp_path / "imported")
    assert not target.exists(), err
    for name, (_unused, why) in cases.items():
        found = pgq.result(sent[name])
        assert found.outcome == "dead" and found.attempts == 1, (name, found)
        assert why in found.error, (name, found.error)
        result = sec_tasks.touch.get_backend().get_result(str(sent[name]))
        assert result.status == TaskResultStatus.FAILED
        assert why in result.errors[0].traceback


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_task_enqueued_by_the_project_still_runs(sec_tasks, spawn, tmp_path):
    """The control: the same worker runs what Task.enqueue() put on the queue."""
    target = tmp_path / "legit"
    result = sec_tasks.touch.enqueue(str(target))
    err = _run_task_worker(spawn, tmp_path / "imported")
    assert target.exists(), err
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == str(target)


@pytest.mark.django_db(transaction=True)
def test_get_result_of_an_unimportable_task_reports_instead_of_raising(tasks_backend):
    """A task enqueued from a shell: its module is not importable elsewhere (issue 9, 5)."""
    call = _call("tests.no_such_module.touch", "/dev/null")
    msg_id = pgq.send(TASK_QUEUE, {**call, "signature": _signature(call)})
    result = tasks_backend.get_result(str(msg_id))
    assert result.status == TaskResultStatus.READY
    assert result.task.func.__name__ == "unavailable_task"


# -- 2. redrive goes where a message really failed, and only where the user may send --------


def test_reserved_pgq_headers_are_refused_on_send_send_batch_and_publish(queue):
    x = pgq.create_exchange("x_reserved")
    pgq.bind_queue(queue, x)
    forged = {"pgq_dead_letter": {"original_queue": "victim"}}
    for attempt in (
        lambda: pgq.send(queue, 1, headers=forged),
        lambda: pgq.send_batch(queue, [1, 2], headers={"PGQ_Redriven": []}),
        lambda: pgq.publish(x, 1, headers={"pgq_replayed_from": 1}),
    ):
        with pytest.raises(pgq.InvalidMessage, match="reserved"):
            attempt()
    assert pgq.metrics(queue).queue_length == 0
    assert pgq.send(queue, 1, headers={"trace": "fine", "my_pgq_key": 1}) > 0


class AdminSession:
    """A logged-in admin user whose every POST carries a CSRF token taken from a real page."""

    def __init__(self, user: Any) -> None:
        from django.test import Client

        self.client = Client(enforce_csrf_checks=True)
        self.client.force_login(user)

    def get(self, url: str, **params: Any) -> Any:
        return self.client.get(url, params)

    def token(self, page: str = "/admin/") -> str:
        import re

        html = self.client.get(page).content.decode()
        found = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', html)
        assert found, f"no CSRF token on {page}"
        return found.group(1)

    def post(self, url: str, data: dict[str, Any], *, page: str = "/admin/") -> Any:
        return self.client.post(url, {**data, "csrfmiddlewaretoken": self.token(page)})

    def notes(self, response: Any) -> list[str]:
        from django.contrib.messages import get_messages

        return [str(m) for m in get_messages(response.wsgi_request)]


def _staff(name: str, *perms: str) -> Any:
    from django.contrib.auth.models import Permission, User

    user = User.objects.create_user(name, password="pw", is_staff=True)
    for perm in perms:
        user.user_permissions.add(Permission.objects.get(codename=perm))
    return User.objects.get(pk=user.pk)  # fresh permission cache


def _url(name: str, *args: Any) -> str:
    from django.urls import reverse

    return reverse(f"admin:pgq_django_queue_{name}", args=args)


def test_the_admin_refuses_a_post_without_a_csrf_token(db, make_queue):
    mallory = _staff("mallory")
    own = make_queue(owner=mallory)
    admin = AdminSession(mallory)
    response = admin.client.post(_url("operate", own.pk), {"op": "pause"})
    assert response.status_code == 403
    assert not pgq.get_queue(own).paused


def test_a_forged_dead_letter_header_cannot_redrive_into_another_users_queue(db, make_queue):
    """The reported attack: own a queue, send it a message whose header names the victim's
    queue as its origin, redrive. The send is refused; and a header that got there anyway
    (written before this release) does not choose the destination."""
    from django.contrib.auth.models import User

    victim = make_queue(owner=User.objects.create_user("victim"))
    mallory = _staff("mallory")
    own_dlq = make_queue(owner=mallory)
    make_queue(owner=mallory, dead_letter_queue=own_dlq)  # so the redrive button shows
    admin = AdminSession(mallory)
    forged = json.dumps({"pgq_dead_letter": {"original_queue": victim.name}})
    response = admin.post(
        _url("send", own_dlq.pk), {"body": "{}", "headers": forged, "priority": 0, "delay": 0}
    )
    assert response.status_code == 200 and b"reserved" in response.content
    assert pgq.metrics(own_dlq).queue_length == 0

    msg_id = pgq.send(own_dlq, {"injected": True})
    from django.db import connection

    with connection.cursor() as cur:  # what a sender could do before reserved headers
        cur.execute(
            "UPDATE pgq_message SET headers = %s::jsonb WHERE msg_id = %s", [forged, msg_id]
        )
    admin.post(_url("operate", own_dlq.pk), {"op": "redrive"})
    admin.post(
        _url("changelist"),
        {"action": "redrive_selected", "_selected_action": [own_dlq.pk], "index": 0},
    )
    assert pgq.metrics(victim).queue_length == 0
    assert pgq.read_by_id(own_dlq, msg_id) is not None


def _dead_letter_one(queue: Any, body: Any) -> int:
    msg_id = pgq.send(queue, body)
    (m,) = pgq.read(queue)
    pgq.nack(queue, m.receipt, error="boom")
    return msg_id


@pytest.mark.parametrize("entry", ["button", "action"])
def test_admin_redrive_needs_write_on_each_destination(db, make_queue, entry):
    """A user who manages a shared dead-letter queue may not push its messages back into a
    queue they cannot send to; those stay, with a warning, and the rest move."""
    from django.contrib.auth.models import User

    alice = User.objects.create_user("alice")
    dlq = make_queue(owner=alice)
    theirs = make_queue(owner=alice, max_retries=0, dead_letter_queue=dlq)
    mallory = _staff("mallory")
    mine = make_queue(owner=mallory, max_retries=0, dead_letter_queue=dlq)
    pgq.grant_queue_access(dlq, mallory, read=True, write=False, manage=True)
    stays = _dead_letter_one(theirs, "theirs")
    moves = _dead_letter_one(mine, "mine")
    admin = AdminSession(mallory)
    if entry == "button":
        response = admin.post(_url("operate", dlq.pk), {"op": "redrive"})
    else:
        response = admin.post(
            _url("changelist"),
            {"action": "redrive_selected", "_selected_action": [dlq.pk], "index": 0},
        )
    assert any(f"failed on {theirs.name}" in n for n in admin.notes(response))
    assert pgq.read_by_id(dlq, stays) is not None
    assert pgq.read_by_id(theirs, stays) is None
    assert pgq.read_by_id(mine, moves) is not None


# -- 3. the queue form: owner, callback, dead-letter queue, usernames ------------------------


class _FormFields(HTMLParser):
    """The values a browser would submit from one <form>: inputs, selects and textareas."""

    def __init__(self, form_id: str) -> None:
        super().__init__()
        self.form_id, self.inside = form_id, False
        self.data: dict[str, list[str]] = {}
        self.options: dict[str, list[str]] = {}
        self._select: str | None = None
        self._textarea: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "form":
            self.inside = a.get("id") == self.form_id
        if not self.inside or ("name" not in a and tag in ("input", "select", "textarea")):
            return
        if tag == "input" and a.get("type") not in ("submit", "button", "file", "image"):
            toggle = a.get("type") in ("checkbox", "radio")
            if toggle and "checked" not in a:
                return
            self.data.setdefault(a["name"], []).append(a.get("value", "on" if toggle else ""))
        elif tag == "select":
            self._select = a["name"]
            self.options[a["name"]] = []
        elif tag == "option" and self._select:
            self.options[self._select].append(a.get("value", ""))
            if "selected" in a:
                self.data.setdefault(self._select, []).append(a.get("value", ""))
        elif tag == "textarea":
            self._textarea = a["name"]
            self.data[a["name"]] = [""]

    def handle_data(self, data: str) -> None:
        if self._textarea:
            self.data[self._textarea][0] += data

    def handle_endtag(self, tag: str) -> None:
        if tag == "form":
            self.inside = False
        elif tag == "select":
            self._select = None
        elif tag == "textarea":
            if self._textarea:
                self.data[self._textarea][0] = self.data[self._textarea][0].lstrip("\n")
            self._textarea = None


def _read_form(admin: AdminSession, url: str, form_id: str = "queue_form") -> _FormFields:
    response = admin.get(url)
    assert response.status_code == 200, url
    fields = _FormFields(form_id)
    fields.feed(response.content.decode())
    assert fields.data, f"no form {form_id} on {url}"
    return fields


def _submit(admin: AdminSession, url: str, changes: dict[str, Any], **kw: Any) -> Any:
    """GET the form, change some fields, POST it back with the page's own CSRF token."""
    form = _read_form(admin, url, **kw)
    data: dict[str, Any] = {k: v if len(v) > 1 else v[0] for k, v in form.data.items()}
    data.update(changes)
    return admin.client.post(url, data)


def _errors(response: Any) -> list[str]:
    """The form errors a page shows (for assertion messages)."""
    import re

    html = response.content.decode()
    return re.findall(r'class="errorlist[^"]*"[^>]*>(.*?)</ul>', html, re.S) + re.findall(
        r'class="errornote"[^>]*>(.*?)</p>', html, re.S
    )


def _change_url(queue: Any) -> str:
    return _url("change", queue.pk)


@pytest.fixture
def people(db: Any) -> dict[str, Any]:
    from django.contrib.auth.models import User

    return {
        "victim": User.objects.create_user("victim_with_a_secret_name"),
        "root": User.objects.create_superuser("root", password="pw"),
        "mallory": _staff("mallory", "add_queue", "add_exchange"),
    }


def test_a_manager_cannot_set_the_callback_or_the_owner(people, make_queue):
    victim, mallory = people["victim"], people["mallory"]
    q = make_queue(owner=victim)
    pgq.grant_queue_access(q, mallory, read=True, write=True, manage=True)
    admin = AdminSession(mallory)
    page = admin.get(_change_url(q)).content.decode()
    assert "victim_with_a_secret_name" in page  # the owner is shown, read-only...
    form = _read_form(admin, _change_url(q))
    assert "owner" not in form.data and "callback" not in form.data  # ...and not editable
    response = _submit(
        admin, _change_url(q), {"callback": "sys.exit", "owner": str(mallory.pk), "max_retries": 3}
    )
    assert response.status_code == 302, _errors(response)
    q = pgq.get_queue(q)
    assert (q.callback, q.owner_id, q.max_retries) == ("", victim.pk, 3)


def test_no_username_is_listed_to_a_non_superuser(people, make_queue):
    from django.contrib.auth.models import User

    mallory = people["mallory"]
    User.objects.create_user("bystander_never_shown")
    q = make_queue(owner=mallory)
    x = pgq.create_exchange("x_mine", owner=mallory)
    admin = AdminSession(mallory)
    for url in (_change_url(q), _url("add"), f"/admin/pgq_django/exchange/{x.pk}/change/"):
        page = admin.get(url).content.decode()
        assert "bystander_never_shown" not in page, url
        assert "victim_with_a_secret_name" not in page, url


def test_a_grant_names_its_user_and_an_unknown_name_is_a_form_error(people, make_queue):
    mallory = people["mallory"]
    q = make_queue(owner=mallory)
    url = _change_url(q)
    admin = AdminSession(mallory)
    row = {"grants-TOTAL_FORMS": "1", "grants-0-can_read": "on"}
    response = _submit(admin, url, {**row, "grants-0-user": "nobody_by_that_name"})
    assert response.status_code == 200 and b"There is no user with that name" in response.content
    response = _submit(admin, url, {**row, "grants-0-user": "victim_with_a_secret_name"})
    assert response.status_code == 302
    assert access.may(people["victim"], "read", q)
    assert "victim_with_a_secret_name" in admin.get(url).content.decode()


def test_the_dead_letter_queue_must_be_a_queue_the_user_may_send_to(people, make_queue):
    victim, mallory = people["victim"], people["mallory"]
    theirs = make_queue(owner=victim)
    writable = make_queue(owner=victim)
    pgq.grant_queue_access(writable, mallory, read=False, write=True)
    mine = make_queue(owner=mallory)
    admin = AdminSession(mallory)
    offered = _read_form(admin, _change_url(mine)).options["dead_letter_queue"]
    assert str(theirs.pk) not in offered and str(mine.pk) not in offered
    assert str(writable.pk) in offered
    response = _submit(admin, _change_url(mine), {"dead_letter_queue": str(theirs.pk)})
    assert response.status_code == 200 and b"Select a valid choice" in response.content
    assert pgq.get_queue(mine).dead_letter_queue_id is None
    assert _submit(admin, _change_url(mine), {"dead_letter_queue": str(writable.pk)}).status_code
    assert pgq.get_queue(mine).dead_letter_queue_id == writable.pk


def test_a_new_queue_belongs_to_its_creator_whatever_the_post_says(people):
    victim, mallory = people["victim"], people["mallory"]
    admin = AdminSession(mallory)
    response = _submit(admin, _url("add"), {"name": "made_by_mallory", "owner": str(victim.pk)})
    assert response.status_code == 302, _errors(response)
    assert pgq.get_queue("made_by_mallory").owner_id == mallory.pk


def test_a_superuser_callback_is_checked_like_register_callback(people, make_queue):
    q = make_queue()
    admin = AdminSession(people["root"])
    response = _submit(admin, _change_url(q), {"callback": "no.such.module.handler"})
    assert response.status_code == 200 and b"cannot be imported" in response.content
    response = _submit(admin, _change_url(q), {"callback": "pgq_django.__version__"})
    assert response.status_code == 200 and b"is not callable" in response.content
    assert pgq.get_queue(q).callback == ""
    response = _submit(admin, _change_url(q), {"callback": "json.dumps"})
    assert response.status_code == 302
    assert pgq.get_queue(q).callback == "json.dumps"


# -- 4. bad input in the admin is a form error, never an HTTP 500 ------------------------------


def test_a_lone_surrogate_in_a_test_message_is_a_form_error(people, make_queue):
    q = make_queue(owner=people["mallory"])
    admin = AdminSession(people["mallory"])
    for field, value in (("body", '"\\ud800"'), ("headers", '{"h": "\\udfff"}')):
        data = {"body": "{}", "headers": "", "priority": 0, "delay": 0, field: value}
        response = _submit(admin, _url("send", q.pk), data, form_id="pgq-send-form")
        assert response.status_code == 200, field
        assert b"surrogate" in response.content, _errors(response)
    assert pgq.metrics(q).queue_length == 0


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("concurrency_limit", "0"),
        ("rate_limit", "0"),
        ("rate_limit", "-5"),
        ("max_retries", "2000000"),
        ("visibility_timeout", "1e10"),
        ("retry_delay", "-1"),
        ("visibility_timeout", "NaN"),
    ],
)
def test_queue_settings_out_of_range_are_form_errors(people, make_queue, field, value):
    q = make_queue(owner=people["mallory"])
    fields = ("concurrency_limit", "rate_limit", "max_retries", "visibility_timeout")
    before = {f: getattr(q, f) for f in fields}
    response = _submit(AdminSession(people["mallory"]), _change_url(q), {field: value})
    assert response.status_code == 200 and _errors(response), field
    after = pgq.get_queue(q)
    assert {f: getattr(after, f) for f in before} == before


def test_the_admin_sets_and_clears_a_queues_rate_and_concurrency_limits(people, make_queue):
    q = make_queue(owner=people["mallory"])
    admin = AdminSession(people["mallory"])
    response = _submit(admin, _change_url(q), {"rate_limit": "20", "concurrency_limit": "3"})
    assert response.status_code == 302, _errors(response)
    assert (pgq.get_queue(q).rate_limit, pgq.get_queue(q).concurrency_limit) == (20.0, 3)
    response = _submit(admin, _change_url(q), {"rate_limit": "", "concurrency_limit": ""})
    assert response.status_code == 302, _errors(response)
    assert (pgq.get_queue(q).rate_limit, pgq.get_queue(q).concurrency_limit) == (None, None)


def test_a_replay_with_a_bad_message_id_is_refused(people, make_queue):
    q = make_queue(owner=people["mallory"])
    admin = AdminSession(people["mallory"])
    for bad in ("²", "-1", "1" * 30, "9" * 19):
        response = admin.post(_url("operate", q.pk), {"op": "replay", "msg_id": [bad]})
        assert response.status_code == 302, bad
        assert any("message id" in n or "msg_id" in n for n in admin.notes(response)), bad
    assert pgq.metrics(q).queue_length == 0


@pytest.mark.parametrize("filters", ['{"region": [NaN]}', '{"n": Infinity}', '{"a": "\\u0000"}'])
def test_a_binding_filter_postgresql_cannot_store_is_a_form_error(people, make_queue, filters):
    mallory = people["mallory"]
    q = make_queue(owner=mallory)
    x = pgq.create_exchange("x_filters", owner=mallory)
    url = f"/admin/pgq_django/exchange/{x.pk}/change/"
    admin = AdminSession(mallory)
    row = {
        "bindings-TOTAL_FORMS": "1",
        "bindings-0-queue": str(q.pk),
        "bindings-0-routing_key": "",
        "bindings-0-filters": filters,
    }
    response = _submit(admin, url, row, form_id="exchange_form")
    assert response.status_code == 200 and _errors(response)
    assert pgq.list_bindings(exchange=x) == []


# -- 5. a handler that succeeded is never run again because its result cannot be stored ----


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_an_unstorable_result_acks_with_a_note_instead_of_rerunning_the_handler(
    make_queue, spawn, tmp_path
):
    from tests.security_handlers import UNSTORABLE

    q = make_queue(archive_on_ack=True, max_retries=3, retry_delay=0)
    pgq.register_callback(q, "tests.security_handlers.returns_unstorable")
    runs = {kind: tmp_path / f"runs-{i}" for i, kind in enumerate(UNSTORABLE)}
    sent = {k: pgq.send(q, {"returns": k, "runs_file": str(f)}) for k, f in runs.items()}
    err = finish(spawn(*WORKER, "--queue", q.name, "--once"))
    for kind, msg_id in sent.items():
        assert runs[kind].read_text().split() == ["1"], (kind, err)
        found = pgq.result(msg_id)
        assert found.outcome == "acked", (kind, found)
        assert "cannot be stored" in found.result["unstorable_result"], kind


def test_complete_refuses_what_jsonb_cannot_hold_and_changes_nothing(make_queue):
    q = make_queue(archive_on_ack=True)
    msg_id = pgq.send(q, 1)
    (m,) = pgq.read(q)
    for bad in (float("nan"), {"x": float("-inf")}, "a\x00", {"\x00": 1}, "\udc00", object()):
        with pytest.raises(pgq.InvalidArgument, match="cannot be stored"):
            pgq.complete(q, m.receipt, result=bad)
    assert pgq.read_by_id(q, msg_id) is not None
    assert pgq.complete(q, m.receipt, result={"text": "\\u0000 is six characters"})
    assert pgq.result(msg_id).result == {"text": "\\u0000 is six characters"}


# -- 6. replay needs browse rights; bindings and access keys stay their owners' --------------


def _archived(queue: Any) -> int:
    msg_id = pgq.send(queue, {"secret": "archived body"})
    pgq.archive(queue, msg_id)
    return msg_id


@pytest.mark.parametrize(
    ("read", "write", "replayed"), [(False, True, False), (True, False, False), (True, True, True)]
)
def test_replay_needs_read_on_the_archive_and_write_on_the_queue(
    people, make_queue, read, write, replayed
):
    q = make_queue(owner=people["victim"])
    msg_id = _archived(q)
    mallory = people["mallory"]
    pgq.grant_queue_access(q, mallory, read=read, write=write, manage=False)
    admin = AdminSession(mallory)
    response = admin.post(_url("operate", q.pk), {"op": "replay", "msg_id": [str(msg_id)]})
    assert response.status_code in (302, 404)
    assert pgq.metrics(q).queue_length == (1 if replayed else 0)


def test_a_publish_grant_does_not_show_other_users_bindings(people, make_queue):
    from django.contrib.auth.models import User

    alice = User.objects.create_user("alice")
    private = make_queue(owner=alice)
    x = pgq.create_exchange("x_shared", owner=alice)
    pgq.bind_queue(private, x, filters={"customer": ["secret-customer-id"]})
    mallory = people["mallory"]
    mine = make_queue(owner=mallory)
    pgq.bind_queue(mine, x)
    pgq.grant_publish_access(x, mallory)
    page = AdminSession(mallory).get(f"/admin/pgq_django/exchange/{x.pk}/change/")
    assert page.status_code == 200
    html = page.content.decode()
    assert mine.name in html
    assert private.name not in html and "secret-customer-id" not in html
    root_view = AdminSession(people["root"]).get(f"/admin/pgq_django/exchange/{x.pk}/change/")
    assert private.name in root_view.content.decode()


def test_only_a_superuser_deletes_an_access_key_and_its_audit_trail(people):
    from pgq_django.models import AccessKey

    victim_key, _secret = AccessKey.objects.create_key(people["victim"])
    mallory = _staff("keymaster", "delete_accesskey", "view_accesskey", "change_accesskey")
    url = f"/admin/pgq_django/accesskey/{victim_key.pk}/delete/"
    admin = AdminSession(mallory)
    assert admin.get(url).status_code == 403
    assert admin.post(url, {"post": "yes"}).status_code == 403
    assert AccessKey.objects.filter(pk=victim_key.pk).exists()
    root = AdminSession(people["root"])
    assert root.post(url, {"post": "yes"}).status_code == 302
    assert not AccessKey.objects.filter(pk=victim_key.pk).exists()


def test_the_enqueue_signature_survives_the_jsonb_round_trip(sec_tasks):
    """Arguments come back from PostgreSQL re-printed (1e16 as an integer, keys reordered):
    a legitimate task must still verify, and any change to an argument must not."""
    from pgq_django.task_signing import verified_call

    awkward = [1e16, 1.0, 0.1, 5e-324, -0.0, 2**70, "é ☃ text", {"b": [1], "a": None}]
    result = sec_tasks.touch.enqueue(*awkward)
    body = pgq.read_by_id(TASK_QUEUE, int(result.id)).message
    assert body["args"][0] == 10**16 and isinstance(body["args"][0], int)  # re-printed
    assert verified_call(body) is not None
    tampered = {**body, "args": [*body["args"][:-1], {"b": [2], "a": None}]}
    assert verified_call(tampered) is None


@pytest.mark.slow
def test_the_migration_trusts_an_old_dead_letter_header_only_where_the_queues_agree(
    fresh_database,
):
    """Dead letters already queued get a server-side origin from their header only when
    the queue it names really dead-letters into theirs; a forged header gets none."""
    import psycopg

    manage_on(fresh_database, "migrate", "pgq_django", "0003_delivery")
    queue_sql = (
        "INSERT INTO pgq_queue (name, fifo, visibility_timeout, delivery_delay, retention,"
        " max_retries, retry_delay, backoff, backoff_cap, backoff_jitter, max_message_size,"
        " archive_on_ack, paused, callback, created_at, updated_at, dead_letter_queue_id)"
        " VALUES (%s, false, 30, 0, 60, 1, 1, 'none', 1, false, 100, false, false, '',"
        " now(), now(), %s) RETURNING id"
    )
    message_sql = (
        "INSERT INTO pgq_message (queue_id, message, headers) VALUES (%s, '1',"
        " jsonb_build_object('pgq_dead_letter', jsonb_build_object('original_queue', %s::text)))"
        " RETURNING msg_id"
    )
    with psycopg.connect(fresh_database) as conn:
        dlq = conn.execute(queue_sql, ["dlq", None]).fetchone()[0]
        source = conn.execute(queue_sql, ["source", dlq]).fetchone()[0]
        conn.execute(queue_sql, ["victim", None])
        real = conn.execute(message_sql, [dlq, "source"]).fetchone()[0]
        forged = conn.execute(message_sql, [dlq, "victim"]).fetchone()[0]
    manage_on(fresh_database, "migrate", "pgq_django", "0004_security")
    with psycopg.connect(fresh_database) as conn:
        origins = dict(conn.execute("SELECT msg_id, dead_letter_origin_id FROM pgq_message"))
    assert origins == {real: source, forged: None}
    manage_on(fresh_database, "migrate", "pgq_django", "0003_delivery")  # and back
