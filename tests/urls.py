import threading

from django.contrib import admin
from django.http import HttpRequest, JsonResponse
from django.urls import include, path

from pgq_django.store import notify


def waiters(request: HttpRequest) -> JsonResponse:
    """Test-only: how many waiters this server process's notify hub holds right now (of the
    queue named by ``?queue=``, or all)."""
    return JsonResponse({"waiters": notify.hub().waiters(request.GET.get("queue"))})


def wakeup_groups(request: HttpRequest) -> JsonResponse:
    """Test-only: how many wake-up groups this server process's notify hub holds."""
    return JsonResponse({"groups": notify.hub().groups(), "waiters": notify.hub().waiters()})


def threads(request: HttpRequest) -> JsonResponse:
    """Test-only: the names of this server process's Python threads."""
    return JsonResponse({"threads": sorted(t.name for t in threading.enumerate())})


urlpatterns = [
    path("admin/", admin.site.urls),
    path("_test/waiters", waiters),
    path("_test/wakeup_groups", wakeup_groups),
    path("_test/threads", threads),
    path("", include("pgq_django.rest.urls")),
    path("sqs/", include("pgq_django.sqs.urls")),
]
