"""Every Spark front against Spark's built-in reader, on whichever pyspark runs the tests.

The DataFrame front (``state_reader.spark``) on every pyspark from 3.5 on; the data
source and the SQL table functions where pyspark has Python data sources (4.0+).
This module is what the compatibility matrix (``make test-compat``) runs on each
pyspark line; its checkpoints cover every operator and both providers.
"""

from __future__ import annotations

import shutil

import pyspark
import pytest
from pyspark.sql.types import StructType

import state_reader
import state_reader.spark
from state_reader.core.options import snake_case
from state_reader.core.planner import plan_state_read
from tests.support.oracle import arrow_rows, diff, spark_rows
from tests.support.paths import GOLDEN

SPARK_4 = int(pyspark.__version__.split(".")[0]) >= 4
# The checkpoints: the golden ones of the oldest Spark of this pyspark's major version, which every line of it
# reads (tests/golden/generate.py wrote them), so a line's run spends its time on the fronts, not on queries
GOLDEN_WRITER = "spark-4.0.5" if SPARK_4 else "spark-3.5.8"

# checkpoint -> its operators: every stateful operator, HDFS-backed and RocksDB
QUERIES = {
    "agg_window_hdfs": 1,  # aggregation, repeated field names in its buffer
    "agg_window_rocksdb_cl": 1,
    "dedup_hdfs": 1,
    "dedup_rocksdb": 1,
    "dedup_within_wm_hdfs": 1,
    "session_window_hdfs": 1,
    "session_window_rocksdb_cl": 1,
    "limit_hdfs": 1,
    "multi_op_hdfs": 2,
    "apply_in_pandas_hdfs": 1,  # flatMapGroupsWithState
    "join_inner_hdfs": 1,
    "join_left_outer_rocksdb_cl": 1,
}


@pytest.fixture(scope="module")
def golden(spark, tmp_path_factory):
    """``golden(name)`` -> a copy of that golden checkpoint (Spark's reader may leave files where it reads)."""
    # Spark 4.0-4.2's reader asks the state store coordinator, which a session has once its streaming query
    # manager exists: in a session that has run no query, asking for the manager starts it
    spark.streams.active  # noqa: B018
    base = tmp_path_factory.mktemp("golden")

    def get(name: str) -> str:
        if not (base / name).exists():
            shutil.copytree(GOLDEN / GOLDEN_WRITER / name, base / name)
        return str(base / name)

    return get


def _sql_literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _fronts(spark, path: str, options: dict[str, str]):
    """(name, DataFrame) of each of our fronts this Spark has."""
    yield "state_reader.spark.read_statestore", state_reader.spark.read_statestore(spark, path, **options)
    if SPARK_4:
        yield "data source", spark.read.format("state_reader.statestore").options(**options).load(path)
        named = "".join(f", {k} => {_sql_literal(v)}" for k, v in options.items())
        yield "read_statestore", spark.sql(f"SELECT * FROM read_statestore({_sql_literal(path)}{named})")


def _assert_fronts_match(spark, path: str, options: dict[str, str]) -> int:
    """Each front against Spark's built-in reader (4.0+); on Spark 3.x, which has none, against the
    Spark-free reader, itself checked against Spark 4's on checkpoints that Spark 3.x wrote."""
    if SPARK_4:
        builtin = spark.read.format("statestore").options(**options).load(path)
        expected, expected_schema = spark_rows(builtin), builtin.schema.json()
    else:
        kwargs = {snake_case(k): (int(v) if v.isdigit() else v) for k, v in options.items() if k != "partitionsPerTask"}
        expected = arrow_rows(state_reader.read_state(path, **kwargs, exact_schema=True))
        # the schema the data source declares (equal to the built-in's where there is one)
        plan = plan_state_read({"path": path, **options})
        expected_schema = StructType.fromJson(plan.output_schema.to_json()).json()
    for name, frame in _fronts(spark, path, options):
        assert frame.schema.json() == expected_schema, f"{name}: schema differs for {options}"
        actual = spark_rows(frame)
        assert actual == expected, f"{name}: rows differ for {options}: {diff(expected, actual)}"
    return len(expected)


def _option_sets(name: str, operators: int) -> list[dict[str, str]]:
    if name.startswith("join"):
        return [{"joinSide": side} for side in ("left", "right")]
    return [{"operatorId": str(op)} for op in range(operators)]


@pytest.mark.parametrize("name", sorted(QUERIES))
def test_every_front_matches_builtin(spark, golden, name):
    path = golden(name)
    rows = sum(_assert_fronts_match(spark, path, options) for options in _option_sets(name, QUERIES[name]))
    # an earlier batch too, read a task per state partition
    rows += _assert_fronts_match(spark, path, {**_option_sets(name, 1)[0], "batchId": "1", "partitionsPerTask": "1"})
    assert rows > 0


@pytest.mark.skipif(not SPARK_4, reason="transformWithState is Spark 4.0+")
def test_transform_with_state_fronts_match_builtin(spark, checkpoints):
    path = checkpoints("tws")
    # a value, a list and a map variable, the lists and maps also unflattened, and the timers
    sets = [{"stateVarName": var} for var in ("profile", "events", "counters", "plain")]
    sets += [{"stateVarName": var, "flattenCollectionTypes": "false"} for var in ("events", "counters")]
    sets.append({"readRegisteredTimers": "true"})
    assert sum(_assert_fronts_match(spark, path, options) for options in sets) > 0


def test_front_shares_partitions_among_tasks(spark, golden):
    path = golden("agg_window_hdfs")
    frame = state_reader.spark.read_statestore(spark, path, partitionsPerTask=1)
    assert frame.rdd.getNumPartitions() == 2
    assert sorted(r.partition_id for r in frame.select("partition_id").distinct().collect()) == [0, 1]


def test_metadata_fronts_match_builtin(spark, golden):
    path = golden("multi_op_hdfs")
    ours = state_reader.spark.read_state_metadata(spark, path)
    if SPARK_4:
        builtin = spark.read.format("state-metadata").load(path)
        assert ours.schema.json() == builtin.schema.json()
        assert spark_rows(ours) == spark_rows(builtin)
        via_sql = spark.sql(f"SELECT * FROM read_state_metadata({_sql_literal(path)})")
        assert via_sql.schema.json() == builtin.schema.json()
        assert spark_rows(via_sql) == spark_rows(builtin)
    else:
        # Spark 3.5 checkpoints hold no operator metadata: no rows, as Spark's reader gives
        expected = state_reader.read_metadata(path)
        assert len(ours.collect()) == expected.num_rows
        inferred = state_reader.spark.read_state_metadata(spark, path, inferMissingMetadata=True).collect()
        assert sorted(r.operatorId for r in inferred) == [0, 1]


def test_front_refuses_unknown_options_by_name(spark, golden):
    with pytest.raises(state_reader.InvalidOptionError, match=r"batchIdd.*batchId"):
        state_reader.spark.read_statestore(spark, golden("agg_window_hdfs"), batchIdd="3")


@pytest.mark.skipif(SPARK_4, reason="pyspark 4.0+ has Python data sources")
def test_register_without_data_sources_names_the_front(spark):
    with pytest.raises(state_reader.SparkSetupError, match=r"state_reader\.spark\.read_state"):
        state_reader.register(spark)
