"""A ``local-cluster`` master (executors in their own JVMs and Python workers, so nothing may depend on
driver memory or driver-only files) in a process of its own, started once for the tests that need one.

The process reads one JSON request per line on its standard input and answers each with one line on its
standard output, after :data:`ANSWER`::

    {"read": PATH, "options": {"batchId": "3"}}
        -> our data source's rows and the built-in reader's, the partitions, whether the schemas are equal
    {"rewrite": SOURCE, "destination": DEST, "options": {"num_partitions": 4, "upsert_parquet": PATH}}
        -> the rewrite's summary, files and store reports (``upsert_parquet``/``delete_parquet`` are read
           into DataFrames there, so the rows never pass through the driver)

A request that fails answers ``{"error": traceback}``. Starting a cluster costs half a minute of two cores;
one for the whole suite is what makes three tests of it affordable.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import traceback
from pathlib import Path
from typing import Any

from tests.support.paths import ROOT

# the answer's line: the JVM shares the process's standard output and may print there too
ANSWER = "@@cluster "


def _serve() -> int:
    import state_reader
    from tests.support.oracle import spark_rows
    from tests.support.spark_session import build_session

    spark = build_session(
        "local-cluster[2,1,1024]",
        {
            # the Arrow setting register() gives the driver, which executors need as well
            "spark.executor.extraJavaOptions": "-Darrow.struct.conflict.policy=CONFLICT_APPEND",
            "spark.executor.memory": "512m",
        },
    )
    state_reader.register(spark)

    def read(request: dict[str, Any]) -> dict[str, Any]:
        path, options = request["read"], request.get("options", {})
        ours = spark.read.format("state_reader.statestore").options(**options).load(path)
        builtin = spark.read.format("statestore").options(**options).load(path)
        return {
            "ours": spark_rows(ours),
            "builtin": spark_rows(builtin),
            "partitions": ours.rdd.getNumPartitions(),
            "schema_equal": ours.schema.json() == builtin.schema.json(),
        }

    def rewrite(request: dict[str, Any]) -> dict[str, Any]:
        kwargs = dict(request.get("options", {}))
        for what in ("upsert", "delete"):
            path = kwargs.pop(f"{what}_parquet", None)
            if path is not None:
                kwargs[what] = spark.read.parquet(path)
        report = state_reader.rewrite(request["rewrite"], request["destination"], spark=spark, **kwargs)
        stores = [dataclasses.asdict(s) for s in report.stores]
        return {"summary": report.summary(), "files": report.files, "stores": stores}

    try:
        for line in sys.stdin:
            request = json.loads(line)
            try:
                answer = read(request) if "read" in request else rewrite(request)
            except Exception:
                answer = {"error": traceback.format_exc()}
            print(ANSWER + json.dumps(answer), flush=True)
    finally:
        app = spark.sparkContext.applicationId
        spark.stop()
        # a local cluster's workers keep each application's executor logs under SPARK_HOME/work
        from pyspark.find_spark_home import _find_spark_home

        shutil.rmtree(Path(_find_spark_home()) / "work" / app, ignore_errors=True)
    return 0


class LocalCluster:
    """The cluster's process, started on the first request; :meth:`close` stops it."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.log = workdir / "cluster.log"
        self._process: subprocess.Popen | None = None

    def ask(self, request: dict[str, Any], timeout: float = 600) -> dict[str, Any]:
        process = self._start()
        assert process.stdin is not None and process.stdout is not None
        process.stdin.write(json.dumps(request) + "\n")
        process.stdin.flush()
        for line in process.stdout:
            if line.startswith(ANSWER):
                answer = json.loads(line[len(ANSWER) :])
                assert "error" not in answer, answer["error"]
                return answer
        raise AssertionError(f"the cluster's process ended: {self.log.read_text()[-3000:]}")

    def _start(self) -> subprocess.Popen:
        if self._process is None:
            env = dict(
                os.environ, SPARK_WORKER_DIR=str(self.workdir / "work"), SPARK_LOCAL_DIRS=str(self.workdir / "local")
            )
            with open(self.log, "wb") as log:  # the process keeps its own copy of the descriptor
                self._process = subprocess.Popen(
                    [sys.executable, "-m", "tests.support.cluster"],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=log,
                    text=True,
                    env=env,
                    cwd=ROOT,
                )
        return self._process

    def close(self) -> None:
        if self._process is not None:
            assert self._process.stdin is not None
            self._process.stdin.close()
            try:
                self._process.wait(timeout=120)
            except subprocess.TimeoutExpired:
                self._process.kill()


if __name__ == "__main__":
    sys.exit(_serve())
