"""pgq_django: durable queues in your Django project's own PostgreSQL.

``import pgq_django as pgq`` gives the functional API (``pgq.send``, ``pgq.read`` …) and
each function's async twin (``pgq.asend`` …). Names are resolved lazily so importing the
package does not import models before Django's app registry is ready.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# Public name -> module under pgq_django that defines it.
_EXPORTS: dict[str, str] = {
    # queues
    "create_queue": "api.queues",
    "alter_queue": "api.queues",
    "drop_queue": "api.queues",
    "purge_queue": "api.queues",
    "list_queues": "api.queues",
    "pause_queue": "api.queues",
    "resume_queue": "api.queues",
    "get_queue": "api.queues",
    # messages
    "send": "api.messages",
    "send_batch": "api.messages",
    "read": "api.messages",
    "read_with_poll": "api.messages",
    "aread_with_poll": "api.messages",
    "pop": "api.messages",
    "read_by_id": "api.messages",
    "delete": "api.messages",
    "archive": "api.messages",
    "set_vt": "api.messages",
    "nack": "api.messages",
    "expire_messages": "api.messages",
    # exchanges and routing
    "create_exchange": "api.exchanges",
    "drop_exchange": "api.exchanges",
    "get_exchange": "api.exchanges",
    "list_exchanges": "api.exchanges",
    "bind_queue": "api.exchanges",
    "unbind_queue": "api.exchanges",
    "list_bindings": "api.exchanges",
    "publish": "api.exchanges",
    # grants
    "grant_queue_access": "api.grants",
    "revoke_queue_access": "api.grants",
    "reset_queue_access": "api.grants",
    "grant_publish_access": "api.grants",
    "revoke_publish_access": "api.grants",
    # delivery: cancellation, completion tracking, redrive, callbacks, worker handlers
    "cancel": "api.delivery",
    "cancel_requested": "api.delivery",
    "result": "api.delivery",
    "Result": "api.delivery",
    "redrive": "api.delivery",
    "register_callback": "api.delivery",
    "unregister_callback": "api.delivery",
    "complete": "api.delivery",
    "release_leases": "api.delivery",
    "archive_cancelled": "api.delivery",
    "handler": "worker.registry",
    # the record of Spark exports (pgq_spark export)
    "record_export": "api.exports",
    "list_exports": "api.exports",
    "exports_cover": "api.exports",
    # metrics
    "metrics": "api.stats",
    "metrics_all": "api.stats",
    "QueueMetrics": "api.stats",
    # models and errors
    "Queue": "models",
    "Message": "models",
    "ArchivedMessage": "models",
    "Receipt": "models",
    "SparkExport": "models",
    "PgqError": "exceptions",
    "QueueNotFound": "exceptions",
    "QueueAlreadyExists": "exceptions",
    "ExchangeNotFound": "exceptions",
    "ExchangeAlreadyExists": "exceptions",
    "ExchangeInUse": "exceptions",
    "Exchange": "models",
    "Binding": "models",
    "InvalidName": "exceptions",
    "InvalidArgument": "exceptions",
    "MessageTooLarge": "exceptions",
    "InvalidMessage": "exceptions",
    "PermissionDenied": "exceptions",
    "QueuePaused": "exceptions",
    "QueueFull": "exceptions",
}

# Functions that get an ``a``-prefixed async twin.
# A twin written by hand (waiting on the event loop) is exported under its own name instead.
_ASYNC = [
    name
    for name, module in _EXPORTS.items()
    if module.startswith("api.")
    and name[0].islower()
    and "a" + name not in _EXPORTS
    and not (name.startswith("a") and name[1:] in _EXPORTS)
]

__all__ = sorted({*_EXPORTS, *("a" + n for n in _ASYNC)})


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        value = getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    elif name.startswith("a") and name[1:] in _ASYNC:
        from .api.asyncio import make_async

        value = make_async(__getattr__(name[1:]))
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
