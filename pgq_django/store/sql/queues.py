"""Queue-level statements: a queue's state by name, and the lock on the dead-letter graph.

Run by :class:`pgq_django.store.managers.MessageManager` (the state, to explain why a message
statement found no queue) and :class:`pgq_django.store.managers.QueueManager` (the lock).
"""

from __future__ import annotations

# -- queue_state -- Why a statement found nothing: the queue's existence, pause, size limit,
# shape (FIFO or not, archives on ack or not) and length limit.
QUEUE_STATE = (
    "SELECT id, paused, max_message_size, fifo, archive_on_ack, max_length "
    "FROM pgq_queue WHERE name = %s"
)

# -- lock_dead_letter_graph -- Take turns changing queues' dead-letter queues (until commit),
# so two concurrent changes cannot each pass the cycle check and together close a cycle.
LOCK_DEAD_LETTER_GRAPH = "SELECT pg_advisory_xact_lock(hashtext('pgq_django.dead_letter_graph'))"
