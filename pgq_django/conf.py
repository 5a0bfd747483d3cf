"""One settings object for pgq_django.

``settings.PGQ`` is a dict merged over :data:`DEFAULTS`; read values as attributes of
:data:`settings` (``from pgq_django.conf import settings; settings.DATABASE``). The object
forgets its cache when Django's ``setting_changed`` fires, so ``override_settings(PGQ=...)``
works in tests (the pattern Django REST framework uses for ``api_settings``).
"""

from __future__ import annotations

import difflib
from typing import Any

from django.conf import settings as django_settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed

DEFAULTS: dict[str, Any] = {
    # Database alias whose PostgreSQL holds the queues; sends join its transactions.
    "DATABASE": "default",
    # Queue defaults used by create_queue() when an argument is not given.
    "DEFAULT_VISIBILITY_TIMEOUT": 30,
    "DEFAULT_RETENTION": 14 * 24 * 3600,
    "DEFAULT_MAX_MESSAGE_SIZE": 1024 * 1024,
    "DEFAULT_MAX_RETRIES": 10,
    "DEFAULT_RETRY_DELAY": 30,
    # Prepare the queue statements once per connection (about twice the speed of a send).
    # Set False behind a pooler that cannot keep prepared statements (PgBouncer in
    # transaction mode before 1.21, or without max_prepared_statements): see
    # docs/howto/pgbouncer.md.
    "PREPARED_STATEMENTS": True,
    # With PREPARED_STATEMENTS off, run the hot statements through server-side functions
    # that migrate makes (their plans are kept per server session): see
    # pgq_django/store/server_functions.py and docs/howto/pgbouncer.md.
    "SERVER_FUNCTIONS": True,
    # Byte budgets (see docs/reference/settings.md): a read or pop returns at most
    # READ_MAX_BYTES // the queue's max_message_size messages (and never more than qty); a
    # send_batch holds at most SEND_BATCH_MAX_MESSAGES bodies of SEND_BATCH_MAX_BYTES in all.
    "READ_MAX_BYTES": 256 * 1024 * 1024,
    "SEND_BATCH_MAX_MESSAGES": 10_000,
    "SEND_BATCH_MAX_BYTES": 64 * 1024 * 1024,
    # Metrics count a queue's messages (and find its leased ones) exactly up to this many;
    # beyond, queue_length is the planner's estimate. Keeps metrics cheap at any backlog.
    "METRICS_EXACT_COUNT": 10_000,
    # Longest wait of read_with_poll (max_poll_seconds) and of a send waiting for room under
    # max_length (wait=); SQS long polls stop at 20 seconds too.
    "MAX_WAIT_SECONDS": 20,
    # Take the shortcuts of pgq_django.seams through Django's and asgiref's internals on the
    # hot paths (each falls back to the public API when not detected). False: public API only.
    "FAST_PATHS": True,
    # Let a process that is not a worker run the store's services too (the counter flusher,
    # the trailing wake-ups of throttled sends and the LISTEN hub: docs/operations.md).
    # Workers always run them. False (a web process): no thread is started; each send and
    # ack writes its counter row and notifies in its own statement, and waits poll.
    "BACKGROUND_SERVICES": False,
    # Channel used for LISTEN/NOTIFY wake-ups; the payload is the queue name.
    "NOTIFY_CHANNEL": "pgq",
    # LISTEN for wake-ups (one connection per process). False: waiters and workers poll.
    "LISTEN": True,
    # Where that LISTEN connection goes: None is the queue database itself; a dict of
    # Django DATABASES keys (HOST, PORT, USER, PASSWORD, OPTIONS...) laid over its settings
    # reaches PostgreSQL past a transaction-mode pooler, where LISTEN cannot work
    # (docs/howto/pgbouncer.md).
    "LISTEN_CONNECTION": None,
    # A process notifies a queue at most once per this many seconds from autocommit sends;
    # the sends in between get one trailing wake-up after it (pgq_django.store.wakeups). 0: every
    # send notifies.
    "NOTIFY_INTERVAL": 0.01,
    # Width of one msg_id range partition of the message and archive tables.
    "PARTITION_SIZE": 10_000_000,
    # How many partitions ahead of the sequence maintenance keeps ready.
    "PARTITION_PREMAKE": 2,
    # Storage parameters every live (pgq_message) partition gets, beside its fillfactor:
    # autovacuum by a fixed count of dead rows, unthrottled (see docs/operations.md).
    "LIVE_PARTITION_STORAGE": {
        "autovacuum_vacuum_scale_factor": 0.0,
        "autovacuum_vacuum_threshold": 20000,
        "autovacuum_vacuum_cost_delay": 0,
        "autovacuum_analyze_scale_factor": 0.0,
        "autovacuum_analyze_threshold": 20000,
    },
    # Drop an archive range past retention only once a recorded Spark export covers it.
    "ARCHIVE_DROP_REQUIRES_EXPORT": False,
    # Worker defaults (pgq_worker command).
    "WORKER_CONCURRENCY": 1,
    "WORKER_POLL_INTERVAL": 1.0,
    "WORKER_GRACE_PERIOD": 30.0,
    "WORKER_MAINTENANCE_INTERVAL": 60.0,
    # The queue pgq.request() waits on for replies when it is given no reply_to (made on
    # first use), and how long finished groups and dependencies are kept for group_status.
    "REPLY_QUEUE": "pgq-replies",
    "WORKFLOW_RETENTION": 7 * 24 * 3600,
    # Schedules (docs/workflows.md#schedules): most schedules one queue may have, the
    # shortest time a schedule's expression may leave between two ticks, and the seconds
    # of each leader turn the schedule duty may spend before it leaves the rest for the next
    # turn, so the leader's other duties keep their pace whatever users schedule.
    "SCHEDULES_PER_QUEUE": 100,
    "SCHEDULE_MIN_INTERVAL": 1,
    "SCHEDULE_TURN_BUDGET": 0.25,
    # REST API (pgq_django.rest): authentication classes as dotted paths; None means DRF's
    # DEFAULT_AUTHENTICATION_CLASSES when the project sets them, else HTTP basic, session and
    # (when rest_framework.authtoken is installed) DRF token authentication.
    "REST_AUTHENTICATION_CLASSES": None,
    # Largest request body the REST API reads, in bytes (larger answers 413).
    "REST_MAX_BODY_SIZE": 8 * 1024 * 1024,
    # Most messages one batch send may carry.
    "REST_MAX_BATCH": 1000,
    # Default and largest ``limit`` of a consume or a list.
    "REST_DEFAULT_LIMIT": 10,
    "REST_MAX_LIMIT": 1000,
    # Longest ``wait_seconds`` of a long-poll consume, and how often a waiting long-poll
    # re-checks its queue without a notification (delays, expired leases).
    "REST_MAX_WAIT_SECONDS": 20,
    "REST_POLL_INTERVAL": 2.0,
    # Most long-polls one process lets wait at once while each holds a thread of its own (a
    # WSGI server, Django's own ASGI handler); more answer 503 with Retry-After. Waits under
    # pgq_django.asgi hold no thread and are not counted.
    "REST_MAX_THREAD_WAITS": 50,
    # Failed HTTP basic authentications allowed per client address and per username within
    # REST_AUTH_FAILURE_WINDOW seconds; past either, 429 with Retry-After (per process).
    "REST_AUTH_FAILURES_PER_ADDRESS": 100,
    "REST_AUTH_FAILURES_PER_USERNAME": 10,
    "REST_AUTH_FAILURE_WINDOW": 60.0,
    # Threads that hash basic-auth passwords, and how many more checks may wait for them
    # (beyond: 429), so password checks never hold the threads serving other requests.
    "REST_PASSWORD_THREADS": 2,
    "REST_PASSWORD_QUEUE": 32,
    # Serve the OpenAPI schema (/v1/schema) and Swagger UI (/v1/docs) to anyone; False asks
    # for the same authentication as the rest of the API.
    "PUBLIC_API_SCHEMA": False,
    # Who may scrape /metrics: a DRF permission class as a dotted path. The default admits
    # staff users and, when METRICS_TOKEN is set, requests bearing that token.
    "METRICS_PERMISSION": "pgq_django.prometheus.CanScrapeMetrics",
    "METRICS_TOKEN": None,
    # Worker threads of pgq_django.asgi.get_asgi_application(): every request's synchronous
    # work (and its database connection) runs on one of them, however many requests wait.
    "ASGI_THREADS": 8,
    "SQS_ENABLED": True,
    # Serve the SQS endpoint through pgq_django.asgi's lean path: no middleware, no URL
    # resolution, one thread hop (see docs/sqs.md). Off: Django's request cycle, as any view.
    "SQS_ASGI_LEAN": False,
    # The account id in the SQS endpoint's queue URLs and ARNs (one account per site: queue
    # names are unique across the site, as in one AWS account).
    "SQS_ACCOUNT_ID": "000000000000",
    # How far a signed request's time may be from the server's (AWS allows 15 minutes).
    "SQS_CLOCK_SKEW": 900,
    # The schema migrate installs PGMQ 1.13.0's SQL functions in, over pgq_django's tables
    # (normally "pgmq"); None: not installed, and removed if it was (docs/pgmq.md).
    "PGMQ_SCHEMA": None,
    # OpenTelemetry (docs/observability.md): a worker's process span is the child of the
    # message's creation context instead of linked to it; the send, receive and process
    # spans carry messaging.message.body.size; the admin links a message's trace id with
    # this template, "{trace_id}" filled in (e.g. "https://jaeger.example/trace/{trace_id}").
    "TRACE_PROCESS_AS_CHILD": False,
    "TRACE_BODY_SIZE": False,
    "TRACE_URL": None,
}

# Keys that no longer exist, and what to do instead. Settings that are read nowhere are
# removed rather than kept as switches that do nothing; a project still setting one gets
# this message (from the system checks, and from the first read of any setting) instead of
# silently unchanged behaviour.
REMOVED_SETTINGS: dict[str, str] = {
    "REST_ENABLED": (
        "The REST API is served only where the project mounts it: include "
        "'pgq_django.rest.urls' in its URLconf to serve it, leave it out to switch it off."
    ),
}


class PgqSettings:
    """Attribute access to the merged settings, cached until ``setting_changed``.

    The annotations tell type checkers what each key holds (one per key of DEFAULTS; a test
    keeps them in step); the values come from ``__getattr__``.
    """

    DATABASE: str
    DEFAULT_VISIBILITY_TIMEOUT: float
    DEFAULT_RETENTION: float
    DEFAULT_MAX_MESSAGE_SIZE: int
    DEFAULT_MAX_RETRIES: int
    DEFAULT_RETRY_DELAY: float
    PREPARED_STATEMENTS: bool
    SERVER_FUNCTIONS: bool
    READ_MAX_BYTES: int
    SEND_BATCH_MAX_MESSAGES: int
    SEND_BATCH_MAX_BYTES: int
    METRICS_EXACT_COUNT: int
    MAX_WAIT_SECONDS: float
    NOTIFY_CHANNEL: str
    LISTEN: bool
    LISTEN_CONNECTION: dict[str, Any] | None
    NOTIFY_INTERVAL: float
    BACKGROUND_SERVICES: bool
    FAST_PATHS: bool | list[str] | tuple[str, ...] | set[str]
    PARTITION_SIZE: int
    PARTITION_PREMAKE: int
    LIVE_PARTITION_STORAGE: dict[str, float | int | bool]
    ARCHIVE_DROP_REQUIRES_EXPORT: bool
    WORKER_CONCURRENCY: int
    WORKER_POLL_INTERVAL: float
    WORKER_GRACE_PERIOD: float
    WORKER_MAINTENANCE_INTERVAL: float
    REPLY_QUEUE: str
    WORKFLOW_RETENTION: float
    SCHEDULES_PER_QUEUE: int
    SCHEDULE_MIN_INTERVAL: float
    SCHEDULE_TURN_BUDGET: float
    REST_AUTHENTICATION_CLASSES: list[str] | None
    REST_MAX_BODY_SIZE: int
    REST_MAX_BATCH: int
    REST_DEFAULT_LIMIT: int
    REST_MAX_LIMIT: int
    REST_MAX_WAIT_SECONDS: float
    REST_POLL_INTERVAL: float
    REST_MAX_THREAD_WAITS: int
    REST_AUTH_FAILURES_PER_ADDRESS: int
    REST_AUTH_FAILURES_PER_USERNAME: int
    REST_AUTH_FAILURE_WINDOW: float
    REST_PASSWORD_THREADS: int
    REST_PASSWORD_QUEUE: int
    PUBLIC_API_SCHEMA: bool
    METRICS_PERMISSION: str
    METRICS_TOKEN: str | None
    ASGI_THREADS: int
    SQS_ENABLED: bool
    SQS_ASGI_LEAN: bool
    SQS_ACCOUNT_ID: str
    SQS_CLOCK_SKEW: float
    PGMQ_SCHEMA: str | None
    TRACE_PROCESS_AS_CHILD: bool
    TRACE_BODY_SIZE: bool
    TRACE_URL: str | None

    def __init__(self, defaults: dict[str, Any] | None = None) -> None:
        self.defaults = defaults or DEFAULTS
        self._cached: dict[str, Any] | None = None

    @property
    def user_settings(self) -> dict[str, Any]:
        return dict(getattr(django_settings, "PGQ", None) or {})

    def as_dict(self) -> dict[str, Any]:
        if self._cached is None:
            user = self.user_settings
            for key in user:
                if key in REMOVED_SETTINGS:
                    raise ImproperlyConfigured(removed_message(key))
            merged = dict(self.defaults)
            merged.update(user)
            self._cached = merged
        return self._cached

    def __getattr__(self, name: str) -> Any:
        if name not in self.defaults:
            raise AttributeError(f"Invalid pgq_django setting: {name!r}.{did_you_mean(name)}")
        value = self.as_dict()[name]
        # Kept as an attribute, as DRF's api_settings does: later reads are plain attribute
        # reads (the hot paths read a dozen settings a call); reload() forgets them.
        self.__dict__[name] = value
        return value

    def reload(self) -> None:
        for name in self.defaults:
            self.__dict__.pop(name, None)
        self._cached = None


def did_you_mean(key: object) -> str:
    """A hint naming the known key closest to a mistyped one (empty when none is close):
    a typo otherwise only shows as a default silently left in force."""
    if not isinstance(key, str):
        return ""
    close = difflib.get_close_matches(key.upper(), DEFAULTS, n=1)
    return f" Did you mean {close[0]!r}?" if close else ""


def unknown_key_message(key: object) -> str:
    """What to tell a project that sets a key pgq_django does not have."""
    return f"settings.PGQ has an unknown key {key!r}.{did_you_mean(key)}"


def removed_message(key: str) -> str:
    """What to tell a project that still sets a removed key."""
    return f"settings.PGQ[{key!r}] has been removed. {REMOVED_SETTINGS[key]}"


settings = PgqSettings()


def _reload(*, setting: str, **kwargs: Any) -> None:
    if setting == "PGQ":
        settings.reload()


setting_changed.connect(_reload)
