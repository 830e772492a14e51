"""``schema-diff`` and ``schema``: the state schemas a checkpoint records, compared with a changed
query's as Spark compares them when the query restarts."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from state_reader.inspect.schema_check import compare_schemas
from tests.support.cli import run as cli_run
from tests.support.keyed_queries import SCHEMA, keyed_rows, run_keyed
from tests.support.streaming_queries import write_input


def _sum(alias: str):
    return lambda df: df.groupBy("k").agg(F.sum("v").alias(alias))


SCHEMA_CASES = {
    # name: (original query, changed query, the error Spark raises on restart, or None)
    "value-field-added": (
        _sum("total"),
        lambda df: df.groupBy("k").agg(F.sum("v").alias("total"), F.count("*")),
        "STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE",
    ),
    "key-field-added": (
        _sum("total"),
        lambda df: df.groupBy("k", "v").agg(F.sum("v").alias("total")),
        "STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE",
    ),
    "value-type-changed": (
        _sum("total"),
        lambda df: df.groupBy("k").agg(F.max("ts").alias("total")),
        "STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE",
    ),
    "alias-renamed": (_sum("total"), _sum("renamed"), None),
    "key-renamed": (
        _sum("total"),
        lambda df: df.groupBy(F.col("k").alias("user")).agg(F.sum("v").alias("total")),
        None,
    ),
}


def _restart(spark, build, checkpoint: Path, input_dir: Path) -> Exception | None:
    """Run ``build`` from ``checkpoint`` over new files in the original's input directory (a file source
    keeps its path), as a user restarting a changed query; its error, if any."""
    new = input_dir.parent / "new_input"
    write_input(keyed_rows(lambda b: ["late", "k0-1"])(), new)
    for file in new.iterdir():
        file.rename(input_dir / f"new-{file.name}")
    stream = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(str(input_dir))
    query = (
        build(stream)
        .writeStream.format("noop")
        .outputMode("update")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    try:
        query.awaitTermination()
    except Exception as exc:  # the restart was refused
        return exc
    return None


@pytest.mark.parametrize("case", sorted(SCHEMA_CASES))
def test_schema_diff_agrees_with_spark(spark, tmp_path, case):
    before, after, spark_error = SCHEMA_CASES[case]
    original = run_keyed(spark, tmp_path, "original", before)
    probe = run_keyed(
        spark, tmp_path, "changed", after, batches=keyed_rows(lambda b: ["probe"])
    )  # a short run of the change
    verdicts = compare_schemas(original, probe)
    copy = tmp_path / "restart" / "checkpoint"
    shutil.copytree(original, copy)
    refused = _restart(spark, after, copy, Path(original).parent / "input")
    assert (refused is None) == all(v.compatible for v in verdicts), (verdicts, refused)
    if spark_error is None:
        assert refused is None
        return
    assert refused is not None and spark_error in str(refused), refused
    assert [v.error_class for v in verdicts if not v.compatible] == [spark_error], verdicts
    proc = cli_run("schema-diff", original, probe, "--json")
    assert proc.returncode == 3 and json.loads(proc.stdout)["compatible"] is False


def test_schema_prints_every_store(checkpoints):
    proc = cli_run("schema", checkpoints("join_inner"), "--json")
    assert proc.returncode == 0, proc.stderr
    stores = {s["store_name"] for s in json.loads(proc.stdout)["stores"]}
    assert stores == {
        "left-keyToNumValues",
        "left-keyWithIndexToValue",
        "right-keyToNumValues",
        "right-keyWithIndexToValue",
    }
