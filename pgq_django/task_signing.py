"""The enqueue signature of the django.tasks backend: which task messages may run at all.

A task queue accepts messages from anyone with a write grant, so a body's ``task`` path is
never trusted as such. :func:`sign_call` runs at enqueue, in a process that holds
``SECRET_KEY``; :func:`verified_call` is the worker's (and ``get_result``'s) first check, and
it imports nothing. The signature covers the task path, its arguments and the backend alias,
so a sender can neither name other code nor call a real task with arguments of their own.
See docs/threat-model.md for the exact signed text.
"""

from __future__ import annotations

import json
from typing import Any

from django.core import signing

# Salt of the enqueue signature, so no other signed value of the project can pass for one.
SIGNING_SALT = "pgq_django.tasks.enqueue"


def _signer() -> signing.Signer:
    """SECRET_KEY (and SECRET_KEY_FALLBACKS, for key rotation) with our own salt."""
    return signing.Signer(salt=SIGNING_SALT, algorithm="sha256")


def _canonical(value: Any) -> Any:
    """The form a value has on both sides of the jsonb round trip, for signing.

    PostgreSQL may print a whole float such as ``1e16`` as an integer, so whole floats count
    as integers; everything else survives the round trip exactly.
    """
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {str(k): _canonical(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_canonical(v) for v in value]
    return value


def signed_text(call: dict[str, Any]) -> str:
    """The exact text the enqueue signature covers: task path, arguments and backend."""
    fields = {key: call.get(key) for key in ("task", "args", "kwargs", "backend")}
    return json.dumps(_canonical(fields), sort_keys=True, separators=(",", ":"))


def verified_call(body: Any) -> dict[str, Any] | None:
    """The body's task call if its enqueue signature holds, else None. Imports nothing."""
    if not isinstance(body, dict):
        return None
    task, args, kwargs = body.get("task"), body.get("args"), body.get("kwargs")
    alias, signature = body.get("backend"), body.get("signature")
    if not (
        isinstance(task, str)
        and isinstance(args, list)
        and isinstance(kwargs, dict)
        and isinstance(alias, str)
        and isinstance(signature, str)
    ):
        return None
    call = {"task": task, "args": args, "kwargs": kwargs, "backend": alias}
    try:
        _signer().unsign(f"{signed_text(call)}:{signature}")
    except (signing.BadSignature, TypeError, ValueError):
        return None
    return call


def sign_call(call: dict[str, Any]) -> str:
    """The signature of a task call (``task``, ``args``, ``kwargs``, ``backend``)."""
    return _signer().signature(signed_text(call))
