"""SQS queue actions: create, find, list, change, tag, purge, delete and redrive queues.

Each action takes a :class:`~.params.Call` and answers the JSON object SQS answers. Rights
(:mod:`pgq_django.access`): looking a queue up, reading its attributes and tags needs any
right on it; changing, tagging, purging, deleting and redriving needs ``manage``; creating
a queue needs Django's ``pgq_django.add_queue`` permission (the creator owns the queue).

A caller with no right at all on a queue gets the answer a missing queue gets, word for
word, so no action tells them whether it exists; a caller with some right on it but not
the one an action needs gets AccessDenied.
"""

from __future__ import annotations

import base64
import json
import re
import uuid
from typing import Any

import pgq_django as pgq

from .. import access
from . import attributes
from .errors import SqsError, invalid, missing, no_such_queue
from .params import Call, decode_token, encode_token, queue_name_from_arn, resource_not_found

_QUEUE_NAME_RE = re.compile(r"[A-Za-z0-9_-]{1,80}(\.fifo)?")
MAX_LIST = 1000
# CreateQueue's answers to a name it refuses, in SQS's words (by whether FifoQueue=true).
_NAME_RULES = {
    False: "Can only include alphanumeric characters, hyphens, or underscores. 1 to 80 in length",
    True: (
        "The name of a FIFO queue can only include alphanumeric characters, hyphens, or "
        "underscores, must end with .fifo suffix and be 1 to 80 in length."
    ),
}


def sees(user: Any, queue: Any) -> bool:
    """Whether ``user`` has any right on ``queue`` (one query at most; none for the owner or
    a superuser)."""
    return access.may(user, "read", queue) or (
        access.visible_queues(user).filter(pk=queue.pk).exists()
    )


def require_any_right(user: Any, queue: Any) -> None:
    """Raise what a missing queue raises unless ``user`` has some right on ``queue``."""
    if not sees(user, queue):
        raise pgq.QueueNotFound.for_name(queue.name)


def get_queue(call: Call, right: str | None, name: str | None = None) -> Any:
    """The queue of the request's QueueUrl (or ``name``), once the caller's right is checked
    (``None``: any right).

    The queue :func:`.lookup.prefetch` found with that right costs nothing more. Otherwise the
    queue's owner and superusers need no further query (:func:`pgq_django.access.may`);
    anyone else's grants cost one more.
    """
    if name is None and call.prefetched is not None and call.prefetched[0] == right:
        return call.prefetched[1]
    queue = pgq.get_queue(name if name is not None else call.queue_name())
    if right is None:
        require_any_right(call.user, queue)
    elif not access.may(call.user, right, queue):
        require_any_right(call.user, queue)  # no right at all: as if there were no queue
        access.require(call.user, right, queue)  # some right, not this one: AccessDenied
    return queue


def create_queue(call: Call) -> dict[str, Any]:
    name = call.string("QueueName", required=True, max_length=100)
    wanted = call.string_map("Attributes")
    tags = call.string_map("tags")
    fifo = wanted.get("FifoQueue", "false").lower() == "true"
    if not _QUEUE_NAME_RE.fullmatch(name) or name.endswith(".fifo") != fifo:
        raise invalid(_NAME_RULES[fifo])
    try:
        existing = pgq.get_queue(name)
    except pgq.QueueNotFound:
        existing = None
    if existing is not None and not sees(call.user, existing):
        # Names are the site's, so a name someone else's queue holds cannot be created:
        # say only that (a user who may not create queues hears what they hear for any
        # name), never the queue's URL or whether its attributes match.
        if not access.may_create_queues(call.user):
            raise _may_not_create()
        raise SqsError("QueueAlreadyExists", f"A queue named {name} already exists.")
    if existing is not None:
        if attributes.matches(call, existing, wanted):
            return {"QueueUrl": call.queue_url(name)}
        raise SqsError(
            "QueueAlreadyExists",
            f"A queue named {name} already exists with different attributes.",
        )
    if not access.may_create_queues(call.user):
        raise _may_not_create()
    changes = attributes.queue_changes(call, wanted, fifo=fifo, creating=True)
    attributes.check_high_throughput(None, changes)
    pgq.create_queue(
        name,
        fifo=fifo,
        owner=call.user,
        tags=tags,
        **{**attributes.CREATE_DEFAULTS, **changes},
    )
    return {"QueueUrl": call.queue_url(name)}


def _may_not_create() -> pgq.PermissionDenied:
    return pgq.PermissionDenied(
        "Creating queues needs the pgq_django.add_queue permission.", right="add_queue"
    )


def get_queue_url(call: Call) -> dict[str, Any]:
    name = call.string("QueueName", required=True, max_length=100)
    owner = call.string("QueueOwnerAWSAccountId")
    if not _QUEUE_NAME_RE.fullmatch(name) or owner not in (None, call.account):
        raise no_such_queue()
    get_queue(call, None, name)
    return {"QueueUrl": call.queue_url(name)}


def _page(call: Call, names: Any, key: str) -> dict[str, Any]:
    """One page of queue URLs from a name-ordered queryset of names (MaxResults/NextToken)."""
    limit = call.integer("MaxResults", 1, MAX_LIST)
    after = decode_token(call.string("NextToken"))
    if after is not None:
        if limit is None:
            raise invalid("NextToken is only valid together with MaxResults.")
        names = names.filter(name__gt=after)
    found = list(names[: (limit or MAX_LIST) + 1])
    page = found[: limit or MAX_LIST]
    out: dict[str, Any] = {key: [call.queue_url(n) for n in page]}
    if limit is not None and len(found) > limit:
        out["NextToken"] = encode_token(page[-1])
    return out


def list_queues(call: Call) -> dict[str, Any]:
    prefix = call.string("QueueNamePrefix", max_length=100) or ""
    names = (
        access.visible_queues(call.user)
        .filter(name__startswith=prefix)
        .order_by("name")
        .values_list("name", flat=True)
    )
    return _page(call, names, "QueueUrls")


def delete_queue(call: Call) -> dict[str, Any]:
    queue = get_queue(call, "manage")
    pgq.drop_queue(queue.name)
    return {}


def purge_queue(call: Call) -> dict[str, Any]:
    queue = get_queue(call, "manage")
    pgq.purge_queue(queue.name)
    return {}


def get_queue_attributes(call: Call) -> dict[str, Any]:
    queue = get_queue(call, None)
    found = attributes.describe(call, queue, call.strings("AttributeNames"))
    return {"Attributes": found} if found else {}


def set_queue_attributes(call: Call) -> dict[str, Any]:
    queue = get_queue(call, "manage")
    wanted = call.string_map("Attributes", required=True)
    changes = attributes.queue_changes(call, wanted, fifo=queue.fifo, creating=False)
    attributes.check_high_throughput(queue, changes)
    if changes:
        pgq.alter_queue(queue.name, **changes)
    return {}


def tag_queue(call: Call) -> dict[str, Any]:
    queue = get_queue(call, "manage")
    tags = call.string_map("Tags")
    if not tags:  # SQS refuses an empty map as it refuses a missing one
        raise missing("Tags")
    pgq.alter_queue(queue.name, tags={**queue.tags, **tags})
    return {}


def untag_queue(call: Call) -> dict[str, Any]:
    queue = get_queue(call, "manage")
    if "TagKeys" not in call.params:
        raise missing("TagKeys")
    gone = set(call.strings("TagKeys"))
    if not gone or not all(1 <= len(key) <= 128 for key in gone):
        raise invalid("Tag keys must be between 1 and 128 characters in length.")
    pgq.alter_queue(queue.name, tags={k: v for k, v in queue.tags.items() if k not in gone})
    return {}


def list_queue_tags(call: Call) -> dict[str, Any]:
    queue = get_queue(call, None)
    return {"Tags": dict(queue.tags)} if queue.tags else {}


def list_dead_letter_source_queues(call: Call) -> dict[str, Any]:
    queue = get_queue(call, None)
    names = (
        access.visible_queues(call.user)
        .filter(dead_letter_queue=queue)
        .order_by("name")
        .values_list("name", flat=True)
    )
    return _page(call, names, "queueUrls")


def _writable_origins(call: Call, source: Any) -> list[str]:
    """The queues a move of ``source``'s dead letters writes to, once the caller may write
    to every one of them.

    Where each message failed is recorded with the message when it is dead-lettered, so a
    message can go back to a queue that no longer uses ``source`` as its dead-letter queue:
    the queues to check are those of the messages, not the current redrive policies. One
    origin the caller may not send to refuses the whole move, and nothing moves (an SQS
    move task without the right to send to a destination fails as a whole too). The
    redrive is then limited to these origins, so a message dead-lettered from another
    queue meanwhile stays where it is.
    """
    origins = pgq.dead_letter_origins(source.name)
    refused = sorted(name for name in origins if not access.may(call.user, "write", name))
    if refused:
        count = sum(origins[name] for name in refused)
        raise pgq.PermissionDenied(
            f"{count} messages of {source.name} failed on queues you may not send to "
            f"({', '.join(refused)}); nothing was moved. Move them with a DestinationArn "
            "you may send to, or ask for the write right on those queues.",
            right="write",
            target=refused[0],
            kind="queue",
        )
    return list(origins)


def start_message_move_task(call: Call) -> dict[str, Any]:
    """Redrive: move a dead-letter queue's messages back to the queues they failed on (or to
    DestinationArn). It runs to completion before the answer (SQS runs it in the background),
    so the task handle only records what was done."""
    source_arn = call.string("SourceArn", required=True, max_length=300)
    destination_arn = call.string("DestinationArn", max_length=300)
    call.integer("MaxNumberOfMessagesPerSecond", 1, 500)
    source = None
    try:
        source_name = queue_name_from_arn(source_arn, "SourceArn", call.account)
        source = get_queue(call, "manage", source_name)
        destination = None
        if destination_arn is not None:
            name = queue_name_from_arn(destination_arn, "DestinationArn", call.account)
            destination = get_queue(call, "write", name)
    except pgq.QueueNotFound:
        raise resource_not_found("SourceArn" if source is None else "DestinationArn") from None
    if destination is not None:
        moved = pgq.redrive(source.name, to=destination.name)
    else:
        if not source.source_queues.exists():
            raise invalid("Source queue must be configured as a Dead Letter Queue.")
        origins = _writable_origins(call, source)
        moved = pgq.redrive(source.name, origins=origins) if origins else 0
    handle = {"taskId": str(uuid.uuid4()), "sourceArn": source_arn, "moved": moved}
    return {"TaskHandle": base64.urlsafe_b64encode(json.dumps(handle).encode()).decode()}
