from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("sqs/", include("pgq_django.sqs.urls")),
]
