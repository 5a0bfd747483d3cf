"""A Spark query that consumes a queue and hangs in its third micro-batch (killed by a test).

``python -m tests.spark_consume_child QUEUE OUT_FILE``: every micro-batch appends its msg_ids
to OUT_FILE (flushed and fsynced before the batch may commit); batch 2 then writes
``OUT_FILE.blocked`` and waits forever, so the test can kill the process in mid-batch.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any


def main(queue: str, out: str) -> None:
    import django

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    django.setup()
    from pgq_django import spark as pgq_spark

    spark = pgq_spark.session(
        "local[1]", conf={"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "1"}
    )
    spark.sparkContext.setLogLevel("ERROR")

    def record(frame: Any, batch_id: int) -> None:
        ids = [r.msg_id for r in frame.select("msg_id").collect()]
        with open(out, "a") as f:
            f.write("".join(f"{batch_id} {i}\n" for i in ids))
            f.flush()
            os.fsync(f.fileno())
        if batch_id == 2:
            Path(out + ".blocked").write_text("blocked")
            while True:
                time.sleep(1)

    stream = (
        spark.readStream.format("pgq")
        .option("table", "messages")
        .option("queue", queue)
        .option("maxBatchSize", "5")
        .option("visibilityTimeout", "4")
        .load()
    )
    query = (
        stream.writeStream.foreachBatch(record)
        .option("checkpointLocation", out + ".checkpoint")
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    query.awaitTermination()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
