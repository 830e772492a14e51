"""Read a checkpoint through a ``local-cluster`` master (separate executor JVMs
and Python workers) and compare with Spark's built-in reader.

    python -m tests.support.cluster_read CHECKPOINT [OPTION=VALUE ...]

Prints one JSON line: {"ours": [...], "builtin": [...], "partitions": N}.
"""

from __future__ import annotations

import json
import sys

import state_reader
from tests.support.oracle import spark_rows
from tests.support.spark_session import build_session


def main(argv: list[str]) -> int:
    path, *pairs = argv
    options = dict(p.split("=", 1) for p in pairs)
    spark = build_session(
        "local-cluster[2,1,1024]",
        {
            # executors are separate JVMs: they need the Arrow setting register() gives the driver
            "spark.executor.extraJavaOptions": "-Darrow.struct.conflict.policy=CONFLICT_APPEND",
            "spark.executor.memory": "512m",
        },
    )
    try:
        state_reader.register(spark)
        ours = spark.read.format("state_reader.statestore").options(**options).load(path)
        builtin = spark.read.format("statestore").options(**options).load(path)
        result = {
            "ours": spark_rows(ours),
            "builtin": spark_rows(builtin),
            "partitions": ours.rdd.getNumPartitions(),
            "schema_equal": ours.schema.json() == builtin.schema.json(),
        }
        print(json.dumps(result))
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
