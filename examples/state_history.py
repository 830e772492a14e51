"""Keep a query's whole state history in Parquet, and ask it what the checkpoint has forgotten.

A producer counts purchases per user and keeps only 3 batches
(``spark.sql.streaming.minBatchesToRetain=3``). After each round of its batches, a
second streaming query reads the producer's state changes with
``spark.readStream.format("state_reader.statestore")`` and appends them to a
Parquet table; its first micro-batch starts the history with the whole state
(``startWithSnapshot``). Its own checkpoint makes every producer batch land
exactly once, however often it is stopped and started again.

Then SQL over the history answers, for batches the checkpoint no longer holds:
"what was user X's state at batch N" (each key's last change at or before N,
deletes removed) and "when did user X last change".

    python examples/state_history.py [--keep DIR]
"""

from __future__ import annotations

import json
import os
import time

from _streaming import example_arguments, spark_session, workspace

import state_reader

ROUNDS, BATCHES_PER_ROUND = 4, 3
USERS = ["ann", "bob", "cid", "dee"]


def write_batch(source_dir: str, batch: int) -> None:
    """One input file per producer batch; a file source takes files oldest first."""
    path = os.path.join(source_dir, f"{batch:04d}.json")
    with open(path, "w", encoding="utf-8") as fh:
        for i in range(3):
            fh.write(json.dumps({"user": USERS[(batch + i * 3) % len(USERS)], "amount": batch * 10 + i}) + "\n")
    stamp = time.time() - 1000 + batch
    os.utime(path, (stamp, stamp))


def run_producer(spark, source_dir: str, checkpoint: str) -> None:
    """The production query: every input file not yet read, one micro-batch each, then stop. (Its state
    value's fields are named as the aggregate buffers are: ``count`` and ``sum``.)"""
    from pyspark.sql import functions as F

    spark.conf.set("spark.sql.streaming.minBatchesToRetain", "3")
    stream = spark.readStream.schema("user string, amount long").option("maxFilesPerTrigger", 1).json(source_dir)
    (
        stream.groupBy("user")
        .agg(F.count(F.lit(1)).alias("purchases"), F.sum("amount").alias("spent"))
        .writeStream.format("noop")
        .outputMode("update")
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
        .awaitTermination()
    )


def record_history(spark, checkpoint: str, history: str, history_checkpoint: str) -> None:
    """Append the producer's state changes since the last run to the history (a streaming query).
    With a processing-time trigger it would run beside the producer all the time."""
    (
        spark.readStream.format("state_reader.statestore")
        .option("readChangeFeed", "true")
        .option("startWithSnapshot", "true")
        .load(checkpoint)
        .writeStream.format("parquet")
        .option("path", history)
        .option("checkpointLocation", history_checkpoint)
        .trigger(availableNow=True)
        .start()
        .awaitTermination()
    )


STATE_AT = """
SELECT key.user AS user, value.count AS purchases, value.sum AS spent, batch_id AS changed_in
FROM (SELECT *, row_number() OVER (PARTITION BY key ORDER BY batch_id DESC,
                                   change_type = 'snapshot') AS newest
      FROM history WHERE batch_id <= {batch})
WHERE newest = 1 AND change_type <> 'delete'
ORDER BY user
"""

LAST_CHANGE = """
SELECT max(batch_id) AS last_changed_in FROM history WHERE key.user = '{user}' AND change_type <> 'snapshot'
"""


def main() -> None:
    args = example_arguments(__doc__)
    spark = spark_session()
    state_reader.register(spark)
    with workspace(args.keep, "state-history-") as root:
        source_dir, checkpoint = os.path.join(root, "input"), os.path.join(root, "checkpoint")
        history, history_checkpoint = os.path.join(root, "history"), os.path.join(root, "history-checkpoint")
        os.makedirs(source_dir)
        batch = 0
        for _ in range(ROUNDS):
            for _ in range(BATCHES_PER_ROUND):
                write_batch(source_dir, batch)
                batch += 1
            run_producer(spark, source_dir, checkpoint)
            record_history(spark, checkpoint, history, history_checkpoint)
        committed = sorted(int(n) for n in os.listdir(os.path.join(checkpoint, "commits")) if n.isdigit())
        print(f"the checkpoint keeps batches {committed[0]}..{committed[-1]}; the history starts at batch 0")

        spark.read.parquet(history).createOrReplaceTempView("history")
        print("\nstate at batch 2 (long cleaned up from the checkpoint):")
        spark.sql(STATE_AT.format(batch=2)).show()
        print("when did ann last change?")
        spark.sql(LAST_CHANGE.format(user="ann")).show()

        # the history's state at the last batch is the checkpoint's
        latest = spark.sql(STATE_AT.format(batch=committed[-1])).collect()
        now = state_reader.read_state(checkpoint).to_pylist()
        assert sorted((r.user, r.purchases, r.spent) for r in latest) == sorted(
            (r["key"]["user"], r["value"]["count"], r["value"]["sum"]) for r in now
        )
        print(f"state at batch {committed[-1]} rebuilt from the history equals the checkpoint's")
    spark.stop()


if __name__ == "__main__":
    main()
