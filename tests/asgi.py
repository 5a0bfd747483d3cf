"""ASGI entry point of the test settings, served by uvicorn in the REST and SQS tests."""

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")

from pgq_django.asgi import get_asgi_application

application = get_asgi_application()
