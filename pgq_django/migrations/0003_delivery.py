"""Delivery: the dedup claims table behind ``send(..., dedup_id=...)``.

A claim is (queue_id, dedup_id) -> the msg_id that won, valid for five minutes (SQS). It is
a plain table rather than a unique index on the messages because a claim must outlive the
message (a duplicate sent after the first was acked is still a duplicate) and a unique index
on a table partitioned by msg_id would have to include msg_id. It has no foreign key: queue
ids are never reused, and maintenance prunes expired claims (including a dropped queue's).
"""

from django.db import migrations

CREATE_SQL = """
CREATE TABLE pgq_dedup (
    queue_id bigint NOT NULL,
    dedup_id text NOT NULL,
    msg_id bigint NOT NULL,
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (queue_id, dedup_id)
);
CREATE INDEX pgq_dedup_expires ON pgq_dedup (expires_at);
"""

DROP_SQL = "DROP TABLE IF EXISTS pgq_dedup;"


class Migration(migrations.Migration):
    dependencies = [("pgq_django", "0002_exchanges_grants")]

    operations = [migrations.RunSQL(CREATE_SQL, DROP_SQL)]
