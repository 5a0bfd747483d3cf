"""pgq_django: durable queues in your Django project's own PostgreSQL.

``import pgq_django as pgq`` gives the functional API (``pgq.send``, ``pgq.read`` …) and
each function's async twin (``pgq.asend`` …). Names are resolved lazily so importing the
package does not import models before Django's app registry is ready.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

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
    "validate_queue_settings": "api.queues",
    "QUEUE_SETTINGS": "api.queue_settings",
    "QueueSetting": "api.queue_settings",
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
    # subscriptions: named bindings (psqlqueue)
    "subscribe": "api.subscriptions",
    "get_subscription": "api.subscriptions",
    "unsubscribe": "api.subscriptions",
    "subscription_id": "api.subscriptions",
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
    "dead_letter_origins": "api.delivery",
    "replay": "api.delivery",
    "register_callback": "api.delivery",
    "unregister_callback": "api.delivery",
    "complete": "api.delivery",
    "release_leases": "api.delivery",
    "archive_cancelled": "api.delivery",
    "reject": "api.delivery",
    "handler": "handlers",
    "periodic": "handlers",
    # the record of Spark exports (pgq_spark export)
    "record_export": "api.exports",
    "list_exports": "api.exports",
    "exports_cover": "api.exports",
    # periodic schedules
    "schedule": "api.schedules",
    "unschedule": "api.schedules",
    "list_schedules": "api.schedules",
    "get_schedule": "api.schedules",
    # dependencies, groups, request and reply
    "group": "api.workflows",
    "group_status": "api.workflows",
    "GroupStatus": "api.workflows",
    "request": "api.replies",
    "arequest": "api.replies",
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
    "Schedule": "models",
    "PgqError": "exceptions",
    "QueueNotFound": "exceptions",
    "GroupNotFound": "exceptions",
    "RequestTimeout": "exceptions",
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
    "RejectMessage": "exceptions",
    "MessageNotFound": "exceptions",
    "StaleReceipt": "exceptions",
    "SubscriptionNotFound": "exceptions",
    "SubscriptionAlreadyExists": "exceptions",
    "ConnectionLost": "exceptions",
    "NotMigrated": "exceptions",
    "ScheduleNotFound": "exceptions",
    "TooManySchedules": "exceptions",
    # type aliases for code that wraps the API
    "QueueRef": "types",
    "ExchangeRef": "types",
    "MessageRef": "types",
    "MessageRefs": "types",
    "Duration": "types",
    "SendOptions": "api.sending",
    # async twins of the functions above (aread_with_poll is in api.messages)
    "acreate_queue": "api.twins",
    "aalter_queue": "api.twins",
    "adrop_queue": "api.twins",
    "apurge_queue": "api.twins",
    "alist_queues": "api.twins",
    "apause_queue": "api.twins",
    "aresume_queue": "api.twins",
    "aget_queue": "api.twins",
    "avalidate_queue_settings": "api.twins",
    "asend": "api.twins",
    "asend_batch": "api.twins",
    "aread": "api.twins",
    "apop": "api.twins",
    "aread_by_id": "api.twins",
    "adelete": "api.twins",
    "aarchive": "api.twins",
    "aset_vt": "api.twins",
    "anack": "api.twins",
    "aexpire_messages": "api.twins",
    "acreate_exchange": "api.twins",
    "adrop_exchange": "api.twins",
    "aget_exchange": "api.twins",
    "alist_exchanges": "api.twins",
    "abind_queue": "api.twins",
    "aunbind_queue": "api.twins",
    "arecord_export": "api.twins",
    "alist_exports": "api.twins",
    "aexports_cover": "api.twins",
    "alist_bindings": "api.twins",
    "apublish": "api.twins",
    "asubscribe": "api.twins",
    "aget_subscription": "api.twins",
    "aunsubscribe": "api.twins",
    "asubscription_id": "api.twins",
    "agrant_queue_access": "api.twins",
    "arevoke_queue_access": "api.twins",
    "areset_queue_access": "api.twins",
    "agrant_publish_access": "api.twins",
    "arevoke_publish_access": "api.twins",
    "acancel": "api.twins",
    "acancel_requested": "api.twins",
    "aresult": "api.twins",
    "aredrive": "api.twins",
    "adead_letter_origins": "api.twins",
    "areplay": "api.twins",
    "aregister_callback": "api.twins",
    "aunregister_callback": "api.twins",
    "acomplete": "api.twins",
    "arelease_leases": "api.twins",
    "aarchive_cancelled": "api.twins",
    "areject": "api.twins",
    "ametrics": "api.twins",
    "ametrics_all": "api.twins",
    "agroup": "api.twins",
    "agroup_status": "api.twins",
    "aschedule": "api.twins",
    "aunschedule": "api.twins",
    "alist_schedules": "api.twins",
    "aget_schedule": "api.twins",
}

if TYPE_CHECKING:
    # What type checkers see: the real names, re-exported explicitly (``as``) so that
    # --no-implicit-reexport accepts them, and the async twins with their functions'
    # parameters. At run time __getattr__ below imports each name on first use instead.
    # tests/unit/test_typing.py keeps this block and _EXPORTS in step.
    from .api.delivery import Result as Result
    from .api.delivery import archive_cancelled as archive_cancelled
    from .api.delivery import cancel as cancel
    from .api.delivery import cancel_requested as cancel_requested
    from .api.delivery import complete as complete
    from .api.delivery import dead_letter_origins as dead_letter_origins
    from .api.delivery import redrive as redrive
    from .api.delivery import register_callback as register_callback
    from .api.delivery import reject as reject
    from .api.delivery import release_leases as release_leases
    from .api.delivery import replay as replay
    from .api.delivery import result as result
    from .api.delivery import unregister_callback as unregister_callback
    from .api.exchanges import bind_queue as bind_queue
    from .api.exchanges import create_exchange as create_exchange
    from .api.exchanges import drop_exchange as drop_exchange
    from .api.exchanges import get_exchange as get_exchange
    from .api.exchanges import list_bindings as list_bindings
    from .api.exchanges import list_exchanges as list_exchanges
    from .api.exchanges import publish as publish
    from .api.exchanges import unbind_queue as unbind_queue
    from .api.exports import exports_cover as exports_cover
    from .api.exports import list_exports as list_exports
    from .api.exports import record_export as record_export
    from .api.grants import grant_publish_access as grant_publish_access
    from .api.grants import grant_queue_access as grant_queue_access
    from .api.grants import reset_queue_access as reset_queue_access
    from .api.grants import revoke_publish_access as revoke_publish_access
    from .api.grants import revoke_queue_access as revoke_queue_access
    from .api.messages import archive as archive
    from .api.messages import aread_with_poll as aread_with_poll
    from .api.messages import delete as delete
    from .api.messages import expire_messages as expire_messages
    from .api.messages import nack as nack
    from .api.messages import pop as pop
    from .api.messages import read as read
    from .api.messages import read_by_id as read_by_id
    from .api.messages import read_with_poll as read_with_poll
    from .api.messages import send as send
    from .api.messages import send_batch as send_batch
    from .api.messages import set_vt as set_vt
    from .api.queue_settings import QUEUE_SETTINGS as QUEUE_SETTINGS
    from .api.queue_settings import QueueSetting as QueueSetting
    from .api.queues import alter_queue as alter_queue
    from .api.queues import create_queue as create_queue
    from .api.queues import drop_queue as drop_queue
    from .api.queues import get_queue as get_queue
    from .api.queues import list_queues as list_queues
    from .api.queues import pause_queue as pause_queue
    from .api.queues import purge_queue as purge_queue
    from .api.queues import resume_queue as resume_queue
    from .api.queues import validate_queue_settings as validate_queue_settings
    from .api.replies import arequest as arequest
    from .api.replies import request as request
    from .api.schedules import get_schedule as get_schedule
    from .api.schedules import list_schedules as list_schedules
    from .api.schedules import schedule as schedule
    from .api.schedules import unschedule as unschedule
    from .api.sending import SendOptions as SendOptions
    from .api.stats import QueueMetrics as QueueMetrics
    from .api.stats import metrics as metrics
    from .api.stats import metrics_all as metrics_all
    from .api.subscriptions import get_subscription as get_subscription
    from .api.subscriptions import subscribe as subscribe
    from .api.subscriptions import subscription_id as subscription_id
    from .api.subscriptions import unsubscribe as unsubscribe
    from .api.twins import aalter_queue as aalter_queue
    from .api.twins import aarchive as aarchive
    from .api.twins import aarchive_cancelled as aarchive_cancelled
    from .api.twins import abind_queue as abind_queue
    from .api.twins import acancel as acancel
    from .api.twins import acancel_requested as acancel_requested
    from .api.twins import acomplete as acomplete
    from .api.twins import acreate_exchange as acreate_exchange
    from .api.twins import acreate_queue as acreate_queue
    from .api.twins import adead_letter_origins as adead_letter_origins
    from .api.twins import adelete as adelete
    from .api.twins import adrop_exchange as adrop_exchange
    from .api.twins import adrop_queue as adrop_queue
    from .api.twins import aexpire_messages as aexpire_messages
    from .api.twins import aexports_cover as aexports_cover
    from .api.twins import aget_exchange as aget_exchange
    from .api.twins import aget_queue as aget_queue
    from .api.twins import aget_schedule as aget_schedule
    from .api.twins import aget_subscription as aget_subscription
    from .api.twins import agrant_publish_access as agrant_publish_access
    from .api.twins import agrant_queue_access as agrant_queue_access
    from .api.twins import agroup as agroup
    from .api.twins import agroup_status as agroup_status
    from .api.twins import alist_bindings as alist_bindings
    from .api.twins import alist_exchanges as alist_exchanges
    from .api.twins import alist_exports as alist_exports
    from .api.twins import alist_queues as alist_queues
    from .api.twins import alist_schedules as alist_schedules
    from .api.twins import ametrics as ametrics
    from .api.twins import ametrics_all as ametrics_all
    from .api.twins import anack as anack
    from .api.twins import apause_queue as apause_queue
    from .api.twins import apop as apop
    from .api.twins import apublish as apublish
    from .api.twins import apurge_queue as apurge_queue
    from .api.twins import aread as aread
    from .api.twins import aread_by_id as aread_by_id
    from .api.twins import arecord_export as arecord_export
    from .api.twins import aredrive as aredrive
    from .api.twins import aregister_callback as aregister_callback
    from .api.twins import areject as areject
    from .api.twins import arelease_leases as arelease_leases
    from .api.twins import areplay as areplay
    from .api.twins import areset_queue_access as areset_queue_access
    from .api.twins import aresult as aresult
    from .api.twins import aresume_queue as aresume_queue
    from .api.twins import arevoke_publish_access as arevoke_publish_access
    from .api.twins import arevoke_queue_access as arevoke_queue_access
    from .api.twins import aschedule as aschedule
    from .api.twins import asend as asend
    from .api.twins import asend_batch as asend_batch
    from .api.twins import aset_vt as aset_vt
    from .api.twins import asubscribe as asubscribe
    from .api.twins import asubscription_id as asubscription_id
    from .api.twins import aunbind_queue as aunbind_queue
    from .api.twins import aunregister_callback as aunregister_callback
    from .api.twins import aunschedule as aunschedule
    from .api.twins import aunsubscribe as aunsubscribe
    from .api.twins import avalidate_queue_settings as avalidate_queue_settings
    from .api.workflows import GroupStatus as GroupStatus
    from .api.workflows import group as group
    from .api.workflows import group_status as group_status
    from .exceptions import ConnectionLost as ConnectionLost
    from .exceptions import ExchangeAlreadyExists as ExchangeAlreadyExists
    from .exceptions import ExchangeInUse as ExchangeInUse
    from .exceptions import ExchangeNotFound as ExchangeNotFound
    from .exceptions import GroupNotFound as GroupNotFound
    from .exceptions import InvalidArgument as InvalidArgument
    from .exceptions import InvalidMessage as InvalidMessage
    from .exceptions import InvalidName as InvalidName
    from .exceptions import MessageNotFound as MessageNotFound
    from .exceptions import MessageTooLarge as MessageTooLarge
    from .exceptions import NotMigrated as NotMigrated
    from .exceptions import PermissionDenied as PermissionDenied
    from .exceptions import PgqError as PgqError
    from .exceptions import QueueAlreadyExists as QueueAlreadyExists
    from .exceptions import QueueFull as QueueFull
    from .exceptions import QueueNotFound as QueueNotFound
    from .exceptions import QueuePaused as QueuePaused
    from .exceptions import RejectMessage as RejectMessage
    from .exceptions import RequestTimeout as RequestTimeout
    from .exceptions import ScheduleNotFound as ScheduleNotFound
    from .exceptions import StaleReceipt as StaleReceipt
    from .exceptions import SubscriptionAlreadyExists as SubscriptionAlreadyExists
    from .exceptions import SubscriptionNotFound as SubscriptionNotFound
    from .exceptions import TooManySchedules as TooManySchedules
    from .handlers import handler as handler
    from .handlers import periodic as periodic
    from .models import ArchivedMessage as ArchivedMessage
    from .models import Binding as Binding
    from .models import Exchange as Exchange
    from .models import Message as Message
    from .models import Queue as Queue
    from .models import Receipt as Receipt
    from .models import Schedule as Schedule
    from .models import SparkExport as SparkExport
    from .types import Duration as Duration
    from .types import ExchangeRef as ExchangeRef
    from .types import MessageRef as MessageRef
    from .types import MessageRefs as MessageRefs
    from .types import QueueRef as QueueRef


__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
