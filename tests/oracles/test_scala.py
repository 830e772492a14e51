"""State only Scala queries write, read as Spark's built-in reader reads it.

flatMapGroupsWithState state format 1 keeps a case class's fields as the value's
top-level columns followed by ``timeoutTimestamp`` (declared int, filled with a
long); ``Encoders.kryo`` state is one binary blob; a typed Aggregator keeps its
buffer case class. Each read must give the built-in's schema and rows.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import state_reader
from tests.support.oracle import assert_same_as_builtin

READS = [
    {},
    {"batchId": "0"},
    {"batchId": "1"},
    {"readChangeFeed": "true", "changeStartBatchId": "0"},
    {"readChangeFeed": "true", "changeStartBatchId": "1", "changeEndBatchId": "2"},
]


def _snapshot_reads(path: str) -> list[dict[str, str]]:
    """Partition 0 rebuilt from each snapshot it has (version v is written by batch v - 1)."""
    names = [p.name for p in (Path(path) / "state" / "0" / "0").iterdir()]
    versions = sorted({int(n.split(".")[0].split("_")[0]) for n in names if n.endswith((".snapshot", ".zip"))})
    return [{"snapshotStartBatchId": str(v - 1), "snapshotPartitionId": "0"} for v in versions if v >= 1]


@pytest.mark.parametrize("name", ["fmgws_v1", "mgws_kryo", "aggregator"])
def test_scala_state_equals_the_builtin_reader(spark, scala_checkpoints, name):
    path = scala_checkpoints(name)
    rows = 0
    for options in READS + _snapshot_reads(path):
        rows += assert_same_as_builtin(spark, path, {"operatorId": "0", **options})
    assert rows > 0
    assert_same_as_builtin(spark, path, {}, fmt="state-metadata")


def test_format_1_timeout_is_the_declared_int(spark, scala_checkpoints):
    path = scala_checkpoints("fmgws_v1")
    table = state_reader.read_state(path)
    value = table.schema.field("value").type
    assert [value.field(i).name for i in range(value.num_fields)] == [
        "readings",
        "label",
        "count",
        "lastSeen",
        "peak",
        "alarm",
        "timeoutTimestamp",
    ]
    assert str(value.field("timeoutTimestamp").type) == "int32"
    by_sensor = {r["key"]["value"]: r["value"] for r in table.to_pylist()}
    # the timeout is 8 s after each remaining sensor's newest reading
    assert {k: v["timeoutTimestamp"] for k, v in by_sensor.items()} == {
        k: int(v["lastSeen"].timestamp() * 1000) + 8000 for k, v in by_sensor.items()
    }
    wide = state_reader.read_state(path, timeout_timestamp_as_long=True)
    assert str(wide.schema.field("value").type.field("timeoutTimestamp").type) == "int64"
    assert wide.column("value").to_pylist() == table.column("value").to_pylist()


def test_kryo_state_is_one_binary_blob(spark, scala_checkpoints):
    table = state_reader.read_state(scala_checkpoints("mgws_kryo"))
    assert table.num_rows == 5
    blobs = [r["groupState"]["value"] for r in table.column("value").to_pylist()]
    assert all(isinstance(b, bytes) and b for b in blobs)
