"""The parameters of the statements that run on two sides: the managers and Spark.

A statement's placeholders (``%(queue)s``, ``%(bodies)b``) are its contract with the code
that runs it. Sending, publishing, leasing, acknowledging and a queue's state run both
through the managers, on Django's connection, and on the Spark executors' own psycopg
connections, where Django is not set up; both sides build those statements' parameters
with the functions here, so the contract is written once:

- :func:`send_params`: :data:`.messages.SEND` and :data:`.messages.SEND_UNCOUNTED`;
- :func:`send_one_params`: the usual send of one body without options
  (:data:`.messages.SEND_ONE`, :data:`.messages.SEND_PLAIN` and their counted twins);
- :func:`send_deduplicated_params`: :data:`.delivery.SEND_DEDUPLICATED`;
- :func:`publish_params`: :data:`.exchanges.PUBLISH` and
  :data:`.exchanges.PUBLISH_DEDUPLICATED`;
- :func:`read_params` (with :func:`read_filters`): :data:`.messages.READ`;
- :func:`delete_params` and :func:`delete_one_params`: :data:`.messages.DELETE`, its
  one-message and uncounted variants, and :data:`.messages.ACK_ONE`;
- :func:`queue_state_params`: :data:`.queues.QUEUE_STATE`.

Values arrive checked and encoded (:func:`pgq_django.validation.send_options` for the
send options); a builder only names them. Each returns a new dict the caller may extend
(Spark's sink appends the bodies of consecutive sends to one ``bodies`` list). Nothing here
imports Django. ``tests/unit/test_sql_params.py`` holds each builder's keys to the
placeholders of the statements it feeds.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from .delivery import DEDUP_WINDOW_SECONDS
from .fragments import SEND_OPTION_DEFAULTS
from .messages import READ_FILTERS

# A reference to one message: (msg_id, read_ct or None); read_ct fences stale receipts.
Receipt = tuple[int, int | None]


def send_params(
    queue: str,
    bodies: Sequence[str],
    *,
    size: int,
    channel: str,
    notify: bool,
    options: Mapping[str, Any],
) -> dict[str, Any]:
    """SEND's parameters: JSON-encoded ``bodies`` (in a new list), the largest body's
    ``size``, the wake-up (``notify`` on ``channel``) and the send options, each one not
    given taking its default (:data:`~.fragments.SEND_OPTION_DEFAULTS`)."""
    params: dict[str, Any] = {"queue": queue, "size": size, "channel": channel, "notify": notify}
    params.update(SEND_OPTION_DEFAULTS, bodies=list(bodies), **options)
    return params


def send_one_params(
    queue: str, body: str, *, size: int, channel: str, notify: bool
) -> dict[str, Any]:
    """The parameters of the usual send (SEND_ONE, SEND_PLAIN): one body, no options (their
    defaults are constants in those texts)."""
    return {"queue": queue, "size": size, "channel": channel, "notify": notify, "body": body}


def send_deduplicated_params(
    queue: str, body: str, *, size: int, channel: str, options: Mapping[str, Any]
) -> dict[str, Any]:
    """SEND_DEDUPLICATED's parameters: one body under ``options["dedup_id"]``, claimed for
    :data:`~.delivery.DEDUP_WINDOW_SECONDS`. It always wakes listeners when it inserts."""
    return {
        "queue": queue,
        "body": body,
        "size": size,
        "window": DEDUP_WINDOW_SECONDS,
        "channel": channel,
        **options,
    }


def topic_subject(routing_key: str | None) -> str:
    """The string a binding's topic pattern is matched against: ``"." + routing_key``, so
    each word carries its leading dot (see :func:`pgq_django.routing.topic_regex`)."""
    return "." + (routing_key or "")


def publish_params(
    exchange: str,
    body: str,
    *,
    size: int,
    routing_key: str,
    channel: str,
    options: Mapping[str, Any],
) -> dict[str, Any]:
    """PUBLISH's parameters, and with a ``dedup_id`` among the options
    PUBLISH_DEDUPLICATED's (the claim's window as well)."""
    params = {
        "exchange": exchange,
        "body": body,
        "size": size,
        "routing_key": routing_key,
        "topic_subject": topic_subject(routing_key),
        "channel": channel,
        **options,
    }
    if params.get("dedup_id") is not None:
        params["window"] = DEDUP_WINDOW_SECONDS
    return params


def read_filters(filters: Mapping[str, Any] | None) -> tuple[str, dict[str, Any]]:
    """The ``{filters}`` clause of a read and its values, for ``filters={"headers": {...},
    "attributes": {...}, "label": "x"}``: fixed fragments (:data:`~.messages.READ_FILTERS`)
    with the values as parameters (jsonb containment for headers and attributes, equality
    for the label)."""
    if not filters:
        return "", {}
    parts: list[str] = []
    values: dict[str, Any] = {}
    for key in ("headers", "attributes"):
        if filters.get(key):
            parts.append(READ_FILTERS[key])
            values[f"f_{key}"] = json.dumps(filters[key])
    if filters.get("label") is not None:
        parts.append(READ_FILTERS["label"])
        values["f_label"] = filters["label"]
    return " ".join(parts), values


def read_params(
    queue: str,
    *,
    qty: int,
    vt: float | None,
    max_bytes: int,
    filter_values: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """READ's parameters: up to ``qty`` messages, leased for ``vt`` seconds (None: the
    queue's visibility timeout), within the byte budget ``max_bytes``; ``filter_values``
    are those :func:`read_filters` gave with the clause the text was filled with."""
    params = {"queue": queue, "qty": qty, "vt": vt, "max_bytes": max_bytes}
    if filter_values:
        params.update(filter_values)
    return params


def receipt_params(refs: Sequence[Receipt]) -> dict[str, list[Any]]:
    """The ``ids`` and ``cts`` array parameters of a list of message references."""
    return {"ids": [r[0] for r in refs], "cts": [r[1] for r in refs]}


def delete_params(queue: str, refs: Sequence[Receipt], *, result: str | None) -> dict[str, Any]:
    """DELETE's parameters: the messages by receipt, and the ``result`` (JSON text or None)
    an archiving queue keeps with each."""
    return {
        "queue": queue,
        "result": result,
        "ids": [r[0] for r in refs],
        "cts": [r[1] for r in refs],
    }


def delete_one_params(queue: str, ref: Receipt, *, result: str | None) -> dict[str, Any]:
    """The parameters of DELETE_ONE (and ACK_ONE, which has no ``result`` to keep): one
    message by receipt, as scalars."""
    return {"queue": queue, "result": result, "msg_id": ref[0], "ct": ref[1]}


def queue_state_params(queue: str) -> list[str]:
    """QUEUE_STATE's one positional parameter: the queue's name."""
    return [queue]
