"""The ``a``-prefixed async twins of the functional API, one per function.

Each runs its function in Django's thread for database work (see :func:`.asyncio.make_async`)
and keeps its parameters for type checkers: ``pgq.asend`` takes what ``pgq.send`` takes and
answers an awaitable of its ``int``. ``aread_with_poll`` is not here: it waits on the event
loop itself (:mod:`.messages`).
"""

from __future__ import annotations

from .asyncio import make_async
from .delivery import (
    archive_cancelled,
    cancel,
    cancel_requested,
    complete,
    dead_letter_origins,
    redrive,
    register_callback,
    reject,
    release_leases,
    replay,
    result,
    unregister_callback,
)
from .exchanges import (
    bind_queue,
    create_exchange,
    drop_exchange,
    get_exchange,
    list_bindings,
    list_exchanges,
    publish,
    unbind_queue,
)
from .exports import exports_cover, list_exports, record_export
from .grants import (
    grant_publish_access,
    grant_queue_access,
    reset_queue_access,
    revoke_publish_access,
    revoke_queue_access,
)
from .messages import (
    archive,
    delete,
    expire_messages,
    nack,
    pop,
    read,
    read_by_id,
    send,
    send_batch,
    set_vt,
)
from .queues import (
    alter_queue,
    create_queue,
    drop_queue,
    get_queue,
    list_queues,
    pause_queue,
    purge_queue,
    resume_queue,
    validate_queue_settings,
)
from .schedules import get_schedule, list_schedules, schedule, unschedule
from .stats import metrics, metrics_all
from .subscriptions import get_subscription, subscribe, subscription_id, unsubscribe
from .workflows import group, group_status

acreate_queue = make_async(create_queue)
aalter_queue = make_async(alter_queue)
adrop_queue = make_async(drop_queue)
apurge_queue = make_async(purge_queue)
alist_queues = make_async(list_queues)
apause_queue = make_async(pause_queue)
aresume_queue = make_async(resume_queue)
aget_queue = make_async(get_queue)
avalidate_queue_settings = make_async(validate_queue_settings)
asend = make_async(send)
asend_batch = make_async(send_batch)
aread = make_async(read)
apop = make_async(pop)
aread_by_id = make_async(read_by_id)
adelete = make_async(delete)
aarchive = make_async(archive)
aset_vt = make_async(set_vt)
anack = make_async(nack)
aexpire_messages = make_async(expire_messages)
acreate_exchange = make_async(create_exchange)
adrop_exchange = make_async(drop_exchange)
aget_exchange = make_async(get_exchange)
alist_exchanges = make_async(list_exchanges)
abind_queue = make_async(bind_queue)
aunbind_queue = make_async(unbind_queue)
alist_bindings = make_async(list_bindings)
apublish = make_async(publish)
arecord_export = make_async(record_export)
alist_exports = make_async(list_exports)
aexports_cover = make_async(exports_cover)
asubscribe = make_async(subscribe)
aget_subscription = make_async(get_subscription)
aunsubscribe = make_async(unsubscribe)
asubscription_id = make_async(subscription_id)
agrant_queue_access = make_async(grant_queue_access)
arevoke_queue_access = make_async(revoke_queue_access)
areset_queue_access = make_async(reset_queue_access)
agrant_publish_access = make_async(grant_publish_access)
arevoke_publish_access = make_async(revoke_publish_access)
acancel = make_async(cancel)
acancel_requested = make_async(cancel_requested)
aresult = make_async(result)
aredrive = make_async(redrive)
adead_letter_origins = make_async(dead_letter_origins)
areplay = make_async(replay)
aregister_callback = make_async(register_callback)
aunregister_callback = make_async(unregister_callback)
acomplete = make_async(complete)
arelease_leases = make_async(release_leases)
aarchive_cancelled = make_async(archive_cancelled)
areject = make_async(reject)
ametrics = make_async(metrics)
ametrics_all = make_async(metrics_all)
agroup = make_async(group)
agroup_status = make_async(group_status)
aschedule = make_async(schedule)
aunschedule = make_async(unschedule)
alist_schedules = make_async(list_schedules)
aget_schedule = make_async(get_schedule)
