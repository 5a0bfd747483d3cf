from django.contrib import admin
from django.http import HttpRequest, JsonResponse
from django.urls import include, path


def waiters(request: HttpRequest) -> JsonResponse:
    """Test-only: how many waiters this server process's notify hub holds right now."""
    from pgq_django.store import notify

    return JsonResponse({"waiters": notify.hub().waiters()})


def wakeup_groups(request: HttpRequest) -> JsonResponse:
    """Test-only: how many wake-up groups this server process's notify hub holds."""
    from pgq_django.store import notify

    return JsonResponse({"groups": notify.hub().groups(), "waiters": notify.hub().waiters()})


urlpatterns = [
    path("admin/", admin.site.urls),
    path("_test/waiters", waiters),
    path("_test/wakeup_groups", wakeup_groups),
    path("", include("pgq_django.rest.urls")),
    path("sqs/", include("pgq_django.sqs.urls")),
]
