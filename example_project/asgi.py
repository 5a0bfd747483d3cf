"""ASGI entry point of the example project: ``uvicorn example_project.asgi:application``.

pgq_django's ASGI application runs synchronous work on a fixed pool of threads, so REST
long-polls wait as coroutines. Static files (admin CSS, Swagger UI's assets) are served by
WhiteNoise's middleware (settings.py), as docs/rest.md shows for any project.
"""

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "example_project.settings")

from pgq_django.asgi import get_asgi_application

application = get_asgi_application()
