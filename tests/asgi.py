"""ASGI entry point of the test settings, served by uvicorn in the REST and SQS tests.

``PGQ_TEST_SQS_LEAN=1`` serves the SQS endpoint through the lean ASGI path
(pgq_django.sqs.asgi); the SQS tests run against a server of each kind.
"""

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")

from pgq_django.asgi import get_asgi_application

application = get_asgi_application(sqs_lean=os.environ.get("PGQ_TEST_SQS_LEAN") == "1")
