"""ASGI entry point of the example project: ``uvicorn example_project.asgi:application``.

pgq_django's ASGI application runs synchronous work on a fixed pool of threads, so REST
long-polls wait as coroutines. With DEBUG on, static files (admin CSS, Swagger UI's assets)
are served too, as ``runserver`` would.
"""

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "example_project.settings")

from django.conf import settings
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler

from pgq_django.asgi import get_asgi_application

application = get_asgi_application()
if settings.DEBUG:
    application = ASGIStaticFilesHandler(application)  # type: ignore[assignment]
