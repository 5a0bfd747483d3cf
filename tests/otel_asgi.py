"""tests.asgi with the OpenTelemetry SDK configured first (tests/otel_support.py): the live
server of the telemetry tests, writing its spans to ``PGQ_TEST_OTEL_FILE``."""

import tests.otel_support  # noqa: F401  (configures the SDK on import)
from tests.asgi import application

__all__ = ["application"]
