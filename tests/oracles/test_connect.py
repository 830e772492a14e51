"""Reads through Spark Connect, against the Connect server pyspark ships.

Two servers run as their own processes (``spark-submit`` of pyspark's
``SparkConnectServer``): one started as the README says, with the JVM option that
keeps repeated struct field names, and one without it. A third case starts the
server inside the client's process, as ``SparkSession.builder.remote("local")``
does, where ``register()`` can set the option itself.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pyspark
import pytest

import state_reader
import state_reader.spark
from state_reader.fronts.spark_shared import JAVA_OPTION_FIX
from tests.support.oracle import spark_rows

pytestmark = pytest.mark.skipif(int(pyspark.__version__.split(".")[0]) < 4, reason="Spark Connect tests run on 4.x")

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_server(tmp: Path, java_options: str | None) -> tuple[subprocess.Popen, int]:
    port = _free_port()
    spark_home = Path(pyspark.__file__).parent
    confs = {
        "spark.connect.grpc.binding.port": str(port),
        "spark.connect.grpc.binding.address": "127.0.0.1",
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.sql.session.timeZone": "UTC",
        "spark.driver.memory": "1g",
    }
    if java_options:
        confs["spark.driver.extraJavaOptions"] = java_options
    command = [str(spark_home / "bin" / "spark-submit"), "--master", "local[2]", "--class", SERVER_CLASS]
    for key, value in confs.items():
        command += ["--conf", f"{key}={value}"]
    command.append("spark-internal")
    env = {**os.environ, "SPARK_HOME": str(spark_home)}
    with open(tmp / f"connect-{port}.log", "wb") as log:  # the server keeps its own copy of the descriptor
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the Connect server exited: {(tmp / f'connect-{port}.log').read_text()[-2000:]}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return process, port
        except OSError:
            time.sleep(0.5)
    process.kill()
    raise RuntimeError("the Connect server did not start in 120 s")


@pytest.fixture(scope="module", params=["configured", "plain"])
def connect(request, tmp_path_factory):
    """(kind, a Spark Connect session to a server in its own process); ``plain`` lacks the JVM option."""
    # the Connect client's own builder: pyspark's refuses a remote session beside this suite's classic one
    from pyspark.sql.connect.session import SparkSession

    process, port = _start_server(
        tmp_path_factory.mktemp("connect"), JAVA_OPTION_FIX if request.param == "configured" else None
    )
    session = SparkSession.builder.remote(f"sc://127.0.0.1:{port}").getOrCreate()
    try:
        state_reader.register(session)
        yield request.param, session
    finally:
        session.stop()
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()


def _expected(spark, path: str, options: dict[str, str]) -> tuple[str, list[str]]:
    """Schema and rows of Spark's built-in reader in the classic session."""
    builtin = spark.read.format("statestore").options(**options).load(path)
    return builtin.schema.json(), spark_rows(builtin)


@pytest.mark.parametrize("name", ["agg_window", "rocksdb_cl_agg_window", "dedup", "join_inner"])
def test_reads_through_connect_equal_classic(spark, checkpoints, connect, name):
    kind, remote = connect
    path = checkpoints(name)
    options = {"joinSide": "left"} if name.startswith("join") else {"batchId": "2"}
    schema, rows = _expected(spark, path, options)
    repeats = "agg" in name  # an aggregation buffer repeats field names (count, sum, sum, count)
    front = state_reader.spark.read_statestore(remote, path, **options)
    assert front.schema.json() == schema
    assert spark_rows(front) == rows
    named = "".join(f", {k} => '{v}'" for k, v in options.items())
    via_sql = remote.sql(f"SELECT * FROM read_statestore('{path}'{named})")
    assert via_sql.schema.json() == schema
    assert spark_rows(via_sql) == rows
    source = remote.read.format("state_reader.statestore").options(**options).load(path)
    if kind == "plain" and repeats:
        # the server cannot take these rows from Python: our error says how to start it
        with pytest.raises(Exception, match="STATE_READER_SPARK_SETUP") as caught:
            source.schema  # noqa: B018 (analysis raises)
        assert f"spark.driver.extraJavaOptions={JAVA_OPTION_FIX}" in str(caught.value)
        assert "state_reader.spark.read_statestore" in str(caught.value)
        return
    assert source.schema.json() == schema
    assert spark_rows(source) == rows


def test_metadata_through_connect_equals_classic(spark, checkpoints, connect):
    _, remote = connect
    path = checkpoints("rocksdb_cl_multi")
    builtin = spark.read.format("state-metadata").load(path)
    for frame in (
        remote.read.format("state_reader.state-metadata").load(path),
        remote.sql(f"SELECT * FROM read_state_metadata('{path}')"),
        state_reader.spark.read_state_metadata(remote, path),
    ):
        assert frame.schema.json() == builtin.schema.json()
        assert spark_rows(frame) == spark_rows(builtin)


IN_PROCESS = """
import json, sys
from pyspark.sql import SparkSession
spark = (SparkSession.builder.remote("local[2]").config("spark.ui.enabled", "false")
         .config("spark.sql.session.timeZone", "UTC").getOrCreate())
import state_reader
state_reader.register(spark)
df = spark.read.format("state_reader.statestore").option("batchId", "2").load(sys.argv[1])
print(json.dumps({"schema": df.schema.json(), "rows": [repr(r) for r in df.collect()]}))
spark.stop()
"""


def test_in_process_connect_server_reads_repeated_field_names(spark, checkpoints, tmp_path):
    """``remote("local")``: the server's JVM is this process's, and register() sets the option there."""
    path = checkpoints("agg_window")
    script = tmp_path / "read.py"
    script.write_text(IN_PROCESS)
    done = subprocess.run([sys.executable, str(script), path], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    builtin = spark.read.format("statestore").option("batchId", "2").load(path)
    assert result["schema"] == builtin.schema.json()
    assert sorted(result["rows"]) == sorted(repr(r) for r in builtin.collect())
