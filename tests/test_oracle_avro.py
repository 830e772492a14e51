"""Avro-encoded transformWithState state (``stateStore.encodingFormat=avro``) holding every
type Spark keeps there, written by both Python APIs, against Spark's built-in reader:
value, list and map state (map user keys included), with and without TTL, timers, and
the command line."""

from __future__ import annotations

import decimal
import json

import pyarrow.parquet as pq
import pytest
from oracle import arrow_rows, assert_same_as_builtin
from streaming_queries import AVRO_TWS_VARIABLES
from test_cli import run_json

import state_reader
from state_reader.formats.avro_encoding import avro_schema, decode_avro
from state_reader.formats.spark_types import from_json_value

WRITERS = ["tws_avro_types", "tws_avro_types_rows"]


@pytest.fixture(scope="module", params=WRITERS)
def avro_tws(request, spark, checkpoints):
    from pyspark.sql.group import GroupedData

    if request.param == "tws_avro_types_rows" and not hasattr(GroupedData, "transformWithState"):
        pytest.skip("this pyspark has no Row-based transformWithState")
    return checkpoints(request.param)


@pytest.mark.parametrize("var", AVRO_TWS_VARIABLES)
def test_every_variable_matches_builtin(spark, avro_tws, var):
    for flatten in ("true", "false"):
        assert assert_same_as_builtin(spark, avro_tws, {"stateVarName": var, "flattenCollectionTypes": flatten}) > 0


def test_earlier_batch_and_change_feed_match_builtin(spark, avro_tws):
    for var in AVRO_TWS_VARIABLES:
        assert assert_same_as_builtin(spark, avro_tws, {"stateVarName": var, "batchId": "1"}) > 0
        assert assert_same_as_builtin(spark, avro_tws, {"stateVarName": var, "readChangeFeed": "true",
                                                        "changeStartBatchId": "0"}) > 0


def test_timers_match_builtin(spark, avro_tws):
    assert assert_same_as_builtin(spark, avro_tws, {"readRegisteredTimers": "true"}) > 0


def test_values_hold_what_was_written(avro_tws):
    """Beyond agreeing with Spark: the extremes the query writes come back exactly."""
    scalars = state_reader.read_state(avro_tws, state_var_name="scalars").column("value").to_pylist()
    bigs = {v["big"] for v in scalars if v["big"] is not None}
    assert bigs and all(abs(b) > decimal.Decimal(10) ** 27 and b.as_tuple().exponent == -10 for b in bigs)
    assert any(b % 1 != 0 for b in bigs)  # all 38 digits, not rounded to 28
    assert {v["i"] for v in scalars} <= {-(2 ** 31), 2 ** 31 - 1}
    nested = state_reader.read_state(avro_tws, state_var_name="nested").column("value").to_pylist()
    for row in nested:
        value = row["value"]
        assert value["grid"][1] == [] and value["pts"][1] == {"x": None, "y": ""}
        assert row["ttlExpirationMs"] > 0


def test_show_and_export_read_an_avro_variable(avro_tws, tmp_path):
    expected = state_reader.read_state(avro_tws, state_var_name="bymap")
    doc = run_json("show", avro_tws, "--state-var", "bymap", "--limit", "0")
    assert doc["row_count"] == expected.num_rows > 0
    out = tmp_path / "bymap.parquet"
    assert run_json("export", avro_tws, "--state-var", "bymap", "--to", out)["rows"] == expected.num_rows
    assert arrow_rows(pq.read_table(out)) == arrow_rows(expected)


def _avro(spark, ddl: str):
    return avro_schema(from_json_value(json.loads(spark.createDataFrame([], ddl).schema.json())))


def test_schema_nullability_is_by_position(spark):
    """Record fields, nested records, arrays and maps may be null; atomic items and map values may not."""
    record = _avro(spark, "a int not null, xs array<int>, m map<string, array<bigint>>, "
                         "s struct<b string, d decimal(38,10)>, ys array<struct<c int>>")
    fields = {f["name"]: f["type"] for f in record["fields"]}
    assert record["type"] == "record"
    assert fields["f0"] == ["null", "int"]
    assert fields["f1"] == ["null", {"type": "array", "items": "int"}]
    assert fields["f2"] == ["null", {"type": "map", "values": ["null", {"type": "array", "items": "long"}]}]
    inner = fields["f3"][1]
    assert fields["f3"][0] == "null" and inner["fields"][1]["type"][1]["size"] == 16
    assert fields["f4"][1]["items"][0] == "null"
    with pytest.raises(state_reader.StateReaderError, match="interval"):
        _avro(spark, "d interval day to second")


def test_a_type_spark_refuses_names_the_file(spark):
    schema = from_json_value(json.loads(spark.createDataFrame([], "m map<int, string>").schema.json()))
    with pytest.raises(state_reader.StateReaderError, match=r"^\[\w+\] state/0/0/3\.changelog: .*integer keys") as err:
        decode_avro([b"\x00"], schema, "state/0/0/3.changelog")
    assert err.value.path == "state/0/0/3.changelog"
