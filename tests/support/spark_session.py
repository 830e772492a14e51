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
    for key, value in (extra or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark
