"""The one module that touches what Django and asgiref do not publish.

A few of pgq_django's hottest paths are cheaper when they read a dependency's internal state
instead of going through its public API. Each such shortcut lives here, beside the public way
of doing the same thing, and nowhere else (the one shortcut that only redoes a public loop,
``present_fields``, lives with the REST serializers it serves, so that DRF is imported only
where REST is):

- it is used only when it is detected (the internal name exists and has the expected
  shape) and ``PGQ["FAST_PATHS"]`` is true; otherwise the public path runs, with the same
  result. CI runs the whole suite once with ``FAST_PATHS`` off, so both paths are tested;
- a dependency upgrade that renames an internal makes the shortcut fall back, never break.

docs/design.md ("Fast paths") lists each shortcut with the gain it was kept for. Code
elsewhere in the package calls the functions below and never names an internal itself
(``tests/unit/test_seams.py`` checks the source).
"""

from __future__ import annotations

import threading
from asyncio import _get_running_loop
from collections.abc import Awaitable, Callable
from typing import Any, NamedTuple

from asgiref.sync import iscoroutinefunction
from django.db import connections
from django.db.models import Model
from django.db.models.signals import post_init, pre_init

from .conf import settings

try:  # the state Django gives each loaded instance; public path: Model.from_db
    from django.db.models.base import ModelState as _ModelState
except ImportError:  # pragma: no cover - a Django without it takes the public path
    _ModelState = None  # type: ignore[assignment,misc]


#: The shortcuts by name. ``PGQ["FAST_PATHS"]`` is True (all), False (none) or a collection
#: of these names (the benchmark turns them off one at a time to measure each).
SHORTCUTS = (
    "thread_connection",
    "unwrapped_cursor",
    "bare_instances",
    "transaction_state",
    "asgi_one_hop",
    "present_fields",
)


def on(shortcut: str) -> bool:
    """Whether ``shortcut`` may be taken (``PGQ["FAST_PATHS"]``)."""
    chosen = settings.FAST_PATHS
    return chosen is True or (chosen is not False and shortcut in chosen)


# -- the thread's connection -------------------------------------------------------------------

_THREAD_LOCAL = threading.local


def connection(alias: str | None = None) -> Any:
    """``django.db.connections[alias]``, found cheaply when possible.

    Django keeps a thread's connections in asgiref's thread-critical ``Local``, which asks
    for the running event loop on every lookup and, in a thread without one (where the API
    runs), catches the error that raises: an exception per lookup, several per API call. In
    such a thread that ``Local`` keeps the connections in a plain ``threading.local``, read
    directly here. Anything else (a running event loop, a connection not made yet, another
    asgiref, shortcuts off) goes through ``connections[alias]``.
    """
    alias = alias or settings.DATABASE
    chosen = settings.FAST_PATHS  # on("thread_connection"), inline: this runs per statement
    if (
        chosen is True or (chosen is not False and "thread_connection" in chosen)
    ) and _get_running_loop() is None:
        storage = getattr(getattr(connections, "_connections", None), "_storage", None)
        if type(storage) is _THREAD_LOCAL:
            found = getattr(storage, alias, None)
            if found is not None:
                return found
    return connections[alias]


# -- statements without Django's cursor wrapper ------------------------------------------------


def may_skip_cursor_wrapper(db: Any) -> bool:
    """Whether a statement on ``db`` may run on the driver's cursor directly.

    Only when nothing would see the difference: no ``execute_wrapper`` hook and no query
    logging (``DEBUG``, ``CaptureQueriesContext``). The caller then does what the wrapper
    would: :func:`refuse_in_broken_transaction` first, and driver errors turned into
    Django's through ``db.wrap_database_errors``. The wrapper's own calls are most of the
    client's work on a single send (docs/design.md, "Fast paths").
    """
    chosen = settings.FAST_PATHS  # on("unwrapped_cursor"), inline: this runs per statement
    return (
        (chosen is True or (chosen is not False and "unwrapped_cursor" in chosen))
        and not db.execute_wrappers
        and not db.queries_logged
    )


def refuse_in_broken_transaction(db: Any) -> None:
    """Raise Django's TransactionManagementError inside an atomic block marked for
    rollback, as Django's cursor wrapper does before every statement."""
    if db.needs_rollback:
        db.validate_no_broken_transaction()


# -- model instances from rows -----------------------------------------------------------------


def instance_loader(model: type[Model], alias: str, names: tuple[str, ...]) -> Any:
    """A function that turns a row of ``names`` values into a saved ``model`` instance.

    Public path: ``model.from_db``. Shortcut: the instance ``from_db`` would make, built
    without ``Model.__init__`` and its per-field work (fields set in ``__dict__``, a
    loaded-from-``alias`` state); the one difference is that no pre_init/post_init signal
    is sent, so it is taken only for models that have no receiver of either.
    """
    from_db = model.from_db
    if not on("bare_instances") or _ModelState is None or _has_init_receivers(model):
        return lambda values: from_db(alias, names, list(values))
    new = model.__new__
    state_type = _ModelState

    def load(values: Any) -> Any:
        obj = new(model)
        fields = obj.__dict__
        fields.update(zip(names, values, strict=True))
        state = fields["_state"] = state_type()
        state.adding = False
        state.db = alias
        return obj

    return load


def _has_init_receivers(model: type[Model]) -> bool:
    return pre_init.has_listeners(model) or post_init.has_listeners(model)


# -- the state of a transaction ----------------------------------------------------------------


def transaction_is_empty(db: Any) -> bool | None:
    """Whether the atomic block on ``db`` has begun nothing of its own: no savepoint, no
    on-commit callback, and it will commit on exit. None when that cannot be told (shortcuts
    off): the caller must then assume something was begun."""
    if not on("transaction_state"):
        return None
    return bool(db.commit_on_exit) and not db.savepoint_ids and not db.run_on_commit


def on_commit_mark(db: Any) -> int | None:
    """A mark of the on-commit callbacks registered on ``db`` so far, for
    :func:`drop_on_commit_since`; None when shortcuts are off (the caller must then run the
    code whose callbacks may be dropped inside a savepoint of its own)."""
    if not on("transaction_state"):
        return None
    return len(db.run_on_commit)


def drop_on_commit_since(db: Any, mark: int) -> None:
    """Forget the on-commit callbacks registered after ``mark`` (a failed handler's)."""
    del db.run_on_commit[mark:]


# -- Django's request steps for a synchronous view under ASGI ----------------------------------


class RequestSteps(NamedTuple):
    """The two steps of Django's ASGI handler that :mod:`pgq_django.asgi` borrows to serve
    a synchronous view in one hop to its thread."""

    #: ``(scope, body_file) -> (request, None) | (None, error_response)``
    build_request: Callable[[Any, Any], tuple[Any, Any]]
    #: ``async (response, send)``: the response as ASGI messages
    send_answer: Callable[[Any, Any], Awaitable[None]]


def asgi_request_steps(handler: Any) -> RequestSteps | None:
    """``handler``'s (a Django ``ASGIHandler``) own request building and response sending,
    or None: then the caller passes the request whole to ``handler`` (the public path).

    Django's ASGI path crosses from the event loop to a thread and back for every
    synchronous middleware hook and again for the view; :mod:`pgq_django.asgi` instead runs
    the whole synchronous cycle in one hop, as a WSGI server would, and needs only these two
    steps of the handler to turn the ASGI scope into a request and the response into ASGI
    messages exactly as Django does. Detected by their presence and shape.
    """
    if not on("asgi_one_hop"):
        return None
    create = getattr(handler, "create_request", None)
    send = getattr(handler, "send_response", None)
    if not callable(create) or not iscoroutinefunction(send):
        return None
    return RequestSteps(create, send)
