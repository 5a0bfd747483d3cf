"""The queue admin's own pages: the message browser, its actions, sending a test message
and the dashboard. A mixin of :class:`~pgq_django.admin.queues.QueueAdmin`."""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

from django import forms
from django.contrib import admin, messages
from django.core.paginator import Paginator
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect, JsonResponse
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone

import pgq_django as pgq

from .. import access
from ..api import workflows
from ..api.workflows import HELD_YEAR
from ..conf import settings
from ..exceptions import InvalidArgument, PgqError
from ..models import (
    ArchivedMessage,
    Message,
    Queue,
)
from ..models.messages import MessageFields
from ..telemetry import carriers
from .common import (
    PAGE_SIZE,
    format_age,
    is_staff,
    pretty_json,
    visible_queues,
)
from .dashboard import series
from .errors import split_errors

# A body is shown whole, in a box that scrolls; only one larger than this (the default
# max_message_size is 1 MiB) is cut, and the page says by how much.
MAX_BODY_SHOWN = 200_000

# A message id as a form sends it: ASCII digits only ("²".isdigit() is true, int("²") fails).
_MSG_ID = re.compile(r"[0-9]{1,19}")

# -- queues -----------------------------------------------------------------------------------


class SendMessageForm(forms.Form):
    body = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 6, "cols": 80}),
        initial='{"hello": "world"}',
        help_text="JSON; anything that is not valid JSON is sent as a string.",
    )
    headers = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 2, "cols": 80}),
        help_text="Optional JSON object.",
    )
    priority = forms.IntegerField(initial=0)
    delay = forms.FloatField(initial=0, min_value=0, help_text="Seconds.")

    def clean_body(self) -> Any:
        text = self.cleaned_data["body"]
        try:
            return _unicode_only(json.loads(text))
        except ValueError:
            return text

    def clean_headers(self) -> Any:
        text = self.cleaned_data.get("headers") or ""
        if not text.strip():
            return None
        try:
            value = json.loads(text)
        except ValueError as exc:
            raise forms.ValidationError(f"Not JSON: {exc}") from None
        if not isinstance(value, dict):
            raise forms.ValidationError("Headers must be a JSON object.")
        return _unicode_only(value)


def _unicode_only(value: Any) -> Any:
    """Refuse what JSON escapes can spell but no text holds: a lone surrogate (``"\\ud800"``)."""
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as exc:
        bad = exc.object[exc.start : exc.end].encode("unicode_escape").decode()
        raise forms.ValidationError(
            f"The JSON holds a lone surrogate ({bad}), which is not valid Unicode text."
        ) from None
    except ValueError:
        pass  # NaN and friends: the API refuses those with its own message
    return value


if TYPE_CHECKING:
    _AdminBase = admin.ModelAdmin
else:
    _AdminBase = object


class QueuePagesMixin(_AdminBase):
    """Views QueueAdmin.get_urls routes to; they use its permission helpers."""

    def _queue_or_404(self, request: HttpRequest, pk: int) -> Queue:
        return get_object_or_404(visible_queues(request.user), pk=pk)

    def _denied(self, request: HttpRequest, right: str, queue: Queue) -> bool:
        if access.may(request.user, right, queue):
            return False
        self.message_user(request, f"You may not {right} queue {queue.name}.", messages.ERROR)
        return True

    def messages_view(self, request: HttpRequest, pk: int) -> HttpResponse:
        queue = self._queue_or_404(request, pk)
        if self._denied(request, "read", queue):
            return HttpResponseRedirect(reverse("admin:pgq_django_queue_changelist"))
        tab = "archive" if request.GET.get("tab") == "archive" else "live"
        rows: QuerySet[Any]
        if tab == "live":
            rows = Message.objects.filter(queue_id=queue.pk).order_by("priority", "msg_id")
        else:
            rows = ArchivedMessage.objects.filter(queue_id=queue.pk).order_by("-msg_id")
        page = Paginator(rows, PAGE_SIZE).get_page(request.GET.get("page"))
        now = timezone.now()
        shown = []
        waits = workflows.dependencies_of(m.msg_id for m in page.object_list)
        for m in page.object_list:
            headers, errors = split_errors(m)
            body = pretty_json(m.message)
            trace_id, trace_url = carriers.trace_url(settings.TRACE_URL, m.headers, m.attributes)
            shown.append(
                {
                    "obj": m,
                    "body": body[:MAX_BODY_SHOWN],
                    "body_hidden": max(0, len(body) - MAX_BODY_SHOWN),
                    "headers": pretty_json(headers),
                    "attributes": pretty_json(m.attributes) if m.attributes else "",
                    "errors": errors,
                    "status": getattr(m, "outcome", None) or _status(m, now),
                    "waits_for": waits.get(m.msg_id, []),
                    "trace_id": trace_id,
                    "trace_url": trace_url,
                }
            )
        metric = pgq.metrics(queue.name)
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": f"Messages of {queue.name}",
            "queue": queue,
            "tab": tab,
            "page": page,
            "messages_shown": shown,
            "metric": metric,
            "oldest": format_age(metric.oldest_msg_age_sec),
            "can_manage": access.may(request.user, "manage", queue),
            "can_write": access.may(request.user, "write", queue),
            "is_dead_letter_queue": queue.source_queues.exists(),
        }
        return TemplateResponse(request, "pgq_django/admin/messages.html", context)

    def operate_view(self, request: HttpRequest, pk: int) -> HttpResponse:
        """POST-only buttons of the message browser: purge, redrive, pause, resume, replay."""
        queue = self._queue_or_404(request, pk)
        back = reverse("admin:pgq_django_queue_messages", args=[pk])
        if request.method != "POST":
            return HttpResponseRedirect(back)
        op = request.POST.get("op", "")
        # Replaying copies archived bodies (a browse) into the queue (a send).
        rights = ("read", "write") if op == "replay" else ("manage",)
        if op not in ("purge", "redrive", "pause", "resume", "replay") or any(
            self._denied(request, right, queue) for right in rights
        ):
            return HttpResponseRedirect(back)
        try:
            if op == "purge":
                note = f"Purged {pgq.purge_queue(queue.name)} messages."
            elif op == "redrive":
                note = f"Redrove {self._redrive(request, queue)} messages."
            elif op == "pause":
                pgq.pause_queue(queue.name)
                note = "Paused."
            elif op == "resume":
                pgq.resume_queue(queue.name)
                note = "Resumed."
            else:
                note = f"Replayed {self._replay(queue, request.POST.getlist('msg_id'))} messages."
                back += "?tab=archive"
        except PgqError as exc:
            self.message_user(request, exc.message, messages.ERROR)
            return HttpResponseRedirect(back)
        self.message_user(request, f"{queue.name}: {note}")
        return HttpResponseRedirect(back)

    def _redrive(self, request: HttpRequest, queue: Queue) -> int:
        """Redrive the dead letters whose origin the user may write to; report the rest.

        The origin of each message is server-side state (see :func:`pgq_django.redrive`);
        each one is checked for ``write``, as sending there directly would be.
        """
        origins = pgq.dead_letter_origins(queue.name)
        allowed = [name for name in origins if access.may(request.user, "write", name)]
        for name in sorted(set(origins) - set(allowed)):
            self.message_user(
                request,
                f"{origins[name]} messages of {queue.name} failed on {name}, which you may not "
                "send to: they stay in the dead-letter queue.",
                messages.WARNING,
            )
        return pgq.redrive(queue.name, origins=allowed) if allowed else 0

    def _replay(self, queue: Queue, ids: list[str]) -> int:
        """Send copies of archived messages back into their queue; the archive keeps them."""
        wanted = []
        for raw in ids:
            if not _MSG_ID.fullmatch(raw):
                raise InvalidArgument(f"{raw!r} is not a message id.", field="msg_id")
            wanted.append(int(raw))
        return len(pgq.replay(queue.name, wanted))

    def send_view(self, request: HttpRequest, pk: int) -> HttpResponse:
        queue = self._queue_or_404(request, pk)
        back = reverse("admin:pgq_django_queue_messages", args=[pk])
        if self._denied(request, "write", queue):
            return HttpResponseRedirect(back)
        form = SendMessageForm(request.POST or None)
        if request.method == "POST" and form.is_valid():
            data = form.cleaned_data
            try:
                msg_id = pgq.send(
                    queue.name,
                    data["body"],
                    headers=data["headers"],
                    priority=data["priority"],
                    delay=data["delay"],
                )
            except PgqError as exc:
                form.add_error(None, exc.message)
            else:
                self.message_user(request, f"Sent message {msg_id} to {queue.name}.")
                return HttpResponseRedirect(back)
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": f"Send a test message to {queue.name}",
            "queue": queue,
            "form": form,
        }
        return TemplateResponse(request, "pgq_django/admin/send_message.html", context)

    def _dashboard_payload(self, request: HttpRequest) -> dict[str, Any]:

        queues = {q.name: q.pk for q in visible_queues(request.user)}
        rows = [m for m in pgq.metrics_all() if m.queue_name in queues]
        depth = sum(m.queue_length for m in rows)
        data = series(queues.values(), depth)
        data["queues"] = [
            {
                "name": m.queue_name,
                "depth": m.queue_length,
                "in_flight": m.in_flight,
                "dead_letters": m.dead_letters,
                "oldest": format_age(m.oldest_msg_age_sec),
                "url": reverse("admin:pgq_django_queue_messages", args=[queues[m.queue_name]]),
            }
            for m in rows
        ]
        data["totals"] = {
            "queues": len(rows),
            "depth": depth,
            "in_flight": sum(m.in_flight for m in rows),
            "dead_letters": sum(m.dead_letters for m in rows),
        }
        return data

    def dashboard_view(self, request: HttpRequest) -> HttpResponse:
        if not is_staff(request):
            return HttpResponseRedirect(reverse("admin:index"))
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": "Queue dashboard",
            "data": self._dashboard_payload(request),
            "data_url": reverse("admin:pgq_django_queue_dashboard_data"),
        }
        return TemplateResponse(request, "pgq_django/admin/dashboard.html", context)

    def dashboard_data(self, request: HttpRequest) -> JsonResponse:
        if not is_staff(request):
            return JsonResponse({"error": "staff only"}, status=403)
        return JsonResponse(self._dashboard_payload(request))


def _status(message: MessageFields, now: Any) -> str:
    if message.vt.year >= HELD_YEAR:
        return "waiting"  # for its dependencies (docs/workflows.md)
    if message.vt > now:
        return "in flight" if message.read_ct > 0 else "delayed"
    return "visible"
