"""The local SparkSession of the tests and of the scripts they run in their own processes."""

from __future__ import annotations

import os
import sys
import time

from tests.support.paths import ROOT

# on import, so that a script run in its own process gets what the suite gets
os.environ["TZ"] = "UTC"
time.tzset()
# Python workers must run this interpreter and find this checkout (and its tests package)
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
if str(ROOT) not in os.environ.get("PYTHONPATH", "").split(os.pathsep):
    os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
# Every JVM the tests start (this session, the sessions of scripts in their own processes, spark-submit's Scala
# queries and Connect servers: spark-submit reads SPARK_SUBMIT_OPTS) runs many small queries for minutes: the
# optimising compiler spends more of the two cores than it saves there (a third less time, measured)
FAST_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
if FAST_JVM not in os.environ.get("SPARK_SUBMIT_OPTS", ""):
    os.environ["SPARK_SUBMIT_OPTS"] = " ".join(filter(None, [os.environ.get("SPARK_SUBMIT_OPTS"), FAST_JVM]))


def build_session(master: str = "local[2]", extra: dict[str, str] | None = None):
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master(master)
        .appName("state-reader-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.streaming.stateStore.maintenanceInterval", "100ms")
        .config("spark.sql.streaming.stateStore.minDeltasForSnapshot", "2")
        .config("spark.driver.memory", "1g")
    )
    extra = dict(extra or {})
    # executors of a local-cluster master are JVMs of their own
    extra["spark.executor.extraJavaOptions"] = " ".join(
        filter(None, [FAST_JVM, extra.get("spark.executor.extraJavaOptions")])
    )
    for key, value in extra.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark
