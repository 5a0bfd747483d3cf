"""What the Spark pipeline exported, so archive retention can tell exported rows from others."""

from __future__ import annotations

from django.db import models


class SparkExport(models.Model):
    """One ``pgq_spark export`` run: the archived_at window it covered, where and how much.

    ``since`` is null when the export started at the beginning of the archive. Rows are
    recorded only after Spark has committed the files, so an interrupted export leaves no
    row (and its window is not counted as covered).
    """

    created_at = models.DateTimeField(auto_now_add=True)
    since = models.DateTimeField(null=True, blank=True)
    until = models.DateTimeField()
    path = models.TextField()
    rows = models.BigIntegerField()
    min_msg_id = models.BigIntegerField(null=True, blank=True)
    max_msg_id = models.BigIntegerField(null=True, blank=True)

    class Meta:
        app_label = "pgq_django"
        db_table = "pgq_spark_export"
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"export of {self.rows} archived messages to {self.path}"
