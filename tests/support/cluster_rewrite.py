"""Rewrite a checkpoint through Spark on a ``local-cluster`` master (executors in their own
JVMs and Python workers, so nothing may depend on driver memory or driver-only files).

    python -m tests.support.cluster_rewrite SOURCE DESTINATION '{"num_partitions": 4}'

Rows to write into the store come as Parquet files, read into DataFrames there:
``{"upsert_parquet": PATH, "delete_parquet": PATH}``.

Prints one JSON line: the report's summary, and each store's report as the test compares them.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import sys
from pathlib import Path

import state_reader
from tests.support.spark_session import build_session

FAST_START = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def main(argv: list[str]) -> int:
    source, destination, options = argv
    spark = build_session(
        "local-cluster[2,1,1024]",
        {
            "spark.executor.memory": "512m",
            # short-lived JVMs start faster without the optimising compiler
            "spark.driver.extraJavaOptions": FAST_START,
            "spark.executor.extraJavaOptions": FAST_START,
        },
    )
    try:
        kwargs = json.loads(options)
        for what in ("upsert", "delete"):
            path = kwargs.pop(f"{what}_parquet", None)
            if path is not None:
                kwargs[what] = spark.read.parquet(path)
        report = state_reader.rewrite(source, destination, spark=spark, **kwargs)
        print(
            json.dumps(
                {
                    "summary": report.summary(),
                    "files": report.files,
                    "stores": [dataclasses.asdict(s) for s in report.stores],
                }
            )
        )
    finally:
        app = spark.sparkContext.applicationId
        spark.stop()
        # a local cluster's workers keep each application's executor logs under SPARK_HOME/work
        from pyspark.find_spark_home import _find_spark_home

        shutil.rmtree(Path(_find_spark_home()) / "work" / app, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
