"""The worker: runs handlers for queued messages (``manage.py pgq_worker``).

Small parts, each with its own job and tests (River's layout): :mod:`.registry` maps queues
to handlers, :mod:`.executor` runs one message inside a transaction with its ack,
:mod:`.leases` keeps long handlers' leases alive, :mod:`.notifier` turns LISTEN/NOTIFY into
wake-ups, :mod:`.leader` elects one maintenance runner per database, :mod:`.maintenance`
holds its duties, and :mod:`.loop` composes them into the :class:`Worker` the command starts.
The lease extender, notifier and leader run on threads of their own through one start/stop
base, :class:`.service.Service`.
"""

from .registry import Handler, handler

__all__ = ["Handler", "handler"]
