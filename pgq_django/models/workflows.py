"""Workflows between messages: what a message waits for, and groups that finish together.

A :class:`Dependency` row says "``dependant_id`` (or the members of ``group``) waits for
message ``msg_id``". A message sent with ``after=[…]`` is held invisible until every row
naming it as the dependant has the outcome ``acked`` (or ``archived``); the row's outcome is
filled in when the awaited message leaves its queue (see :mod:`pgq_django.api.workflows`).
A :class:`WorkflowGroup` is a batch sent by ``pgq.group``: one row per member names the
group, and its follow-up (``then``) is a dependant of every member.

Neither table is read or written by the statements a plain send, lease or ack runs: only
messages that take part in a workflow pay for it.
"""

from __future__ import annotations

from django.db import models

from ..store.managers.workflows import GroupManager, WorkflowManager


class WorkflowGroup(models.Model):
    """A batch sent together by ``pgq.group``; its status is counted from its members."""

    queue_name = models.CharField(max_length=100)
    size = models.PositiveIntegerField()
    #: The follow-up message held until every member is acknowledged (None: no ``then``).
    then_msg_id = models.BigIntegerField(null=True, blank=True)
    then_queue_name = models.CharField(max_length=100, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    objects = GroupManager()

    class Meta:
        app_label = "pgq_django"
        db_table = "pgq_workflow_group"
        ordering = ["-id"]
        verbose_name = "group"

    def __str__(self) -> str:
        return f"group {self.pk} ({self.size} on {self.queue_name})"


class Dependency(models.Model):
    """One awaited message and who waits for it: a held dependant, a group's count, or both."""

    #: The awaited message (a dependency, or a group member).
    msg_id = models.BigIntegerField()
    #: Its queue when the wait began: a message that is live in another queue since (a
    #: dead-letter move) has failed. NULL when it had already left its queue.
    queue_id = models.BigIntegerField(null=True, blank=True)
    #: The message held until this one is acknowledged (None: a group member without ``then``).
    dependant_id = models.BigIntegerField(null=True, blank=True)
    group = models.ForeignKey(
        WorkflowGroup,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="members",
    )
    #: How the awaited message ended (an archive outcome), None while it is in its queue.
    outcome = models.CharField(max_length=12, null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    objects = WorkflowManager()

    class Meta:
        app_label = "pgq_django"
        db_table = "pgq_dependency"
        ordering = ["id"]
        verbose_name_plural = "dependencies"
        indexes = [
            models.Index(
                fields=["msg_id"],
                name="pgq_dependency_open",
                condition=models.Q(outcome__isnull=True),
            ),
            models.Index(fields=["dependant_id"], name="pgq_dependency_dependant"),
        ]

    def __str__(self) -> str:
        waiter = f"message {self.dependant_id}" if self.dependant_id else f"group {self.group_id}"
        return f"{waiter} waits for message {self.msg_id}"
