"""Checkpoints written by small Scala queries (tests/support/scala/StateQueries.scala).

Case classes under flatMapGroupsWithState state format 1, ``Encoders.kryo`` state
and typed Aggregators exist only in the Scala API. The queries are compiled with
the Scala compiler pyspark ships (``jars/scala-compiler-*.jar``) and run with its
``spark-submit``, one batch per input file, all in one JVM.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support.streaming_queries import HDFS, ROCKSDB_CHANGELOG, write_input

SOURCE = Path(__file__).parent / "scala" / "StateQueries.scala"
EPOCH = 0  # event times are seconds after the epoch: format 1 keeps timeouts in an int slot

# sensor readings, one list per batch; the last batch moves the watermark past the first sensors' timeouts
READINGS: list[list[dict]] = [
    [
        {"sensor": 1, "ts": EPOCH + 1, "celsius": 20.5, "label": "roof"},
        {"sensor": 1, "ts": EPOCH + 3, "celsius": 21.25, "label": None},
        {"sensor": 2, "ts": EPOCH + 2, "celsius": float("nan"), "label": None},
    ],
    [
        {"sensor": 1, "ts": EPOCH + 5, "celsius": 1e300, "label": "roof-2"},
        {"sensor": 2, "ts": EPOCH + 5, "celsius": 19.0, "label": ""},
        {"sensor": 3, "ts": EPOCH + 4, "celsius": -5.75, "label": "подвал"},
    ],
    [
        {"sensor": 1, "ts": EPOCH + 20, "celsius": 22.0, "label": None},
        {"sensor": 4, "ts": EPOCH + 21, "celsius": -0.0, "label": "🌡 probe"},
        {"sensor": 4, "ts": EPOCH + 21, "celsius": 2.5, "label": None},
    ],
    [{"sensor": 5, "ts": EPOCH + 30, "celsius": 100.0, "label": "boiler"}],
]

QUERIES: dict[str, dict[str, str]] = {
    "fmgws_v1": {**HDFS, "spark.sql.streaming.flatMapGroupsWithState.stateFormatVersion": "1"},
    "mgws_kryo": dict(ROCKSDB_CHANGELOG),
    "aggregator": dict(HDFS),
}


def _pyspark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


def compile_queries(out: Path) -> Path:
    """The queries compiled into a jar under ``out``."""
    jar = out / "state-queries.jar"
    jars = _pyspark_home() / "jars"
    subprocess.run(
        ["java", "-cp", f"{jars}/*", "scala.tools.nsc.Main", "-usejavacp", "-nowarn", "-d", str(jar), str(SOURCE)],
        check=True,
        capture_output=True,
        timeout=600,
    )
    return jar


def run_scala_queries(jar: Path, names: list[str], base: Path) -> dict[str, str]:
    """Run the queries ``names`` over :data:`READINGS`, each into ``base / name``, in one ``spark-submit``
    (one JVM start, not one per query); their checkpoint paths by name."""
    confs = {
        "spark.sql.shuffle.partitions": "2",
        "spark.ui.enabled": "false",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.streaming.stateStore.minDeltasForSnapshot": "2",
        "spark.driver.memory": "1g",
    }
    command = [
        str(_pyspark_home() / "bin" / "spark-submit"),
        "--master",
        "local[2]",
        "--class",
        "statequeries.StateQueries",
    ]
    for key, value in confs.items():
        command += ["--conf", f"{key}={value}"]
    command.append(str(jar))
    paths = {}
    for name in names:
        write_input(READINGS, base / name / "input")
        paths[name] = str(base / name / "checkpoint")
        own = ";".join(f"{k}={v}" for k, v in QUERIES[name].items())
        command += [name, str(base / name / "input"), paths[name], own]
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "TZ": "UTC"}
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"the Scala queries {names} failed:\n{done.stderr[-4000:]}")
    return paths
