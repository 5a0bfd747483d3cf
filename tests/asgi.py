"""ASGI application of the test settings, served by uvicorn for the SQS endpoint's tests."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
application = get_asgi_application()
