"""Avro-encoded transformWithState state (``stateStore.encodingFormat=avro``) holding every
type Spark keeps there, written by both Python APIs, against Spark's built-in reader:
value, list and map state (map user keys included), with and without TTL, timers, and
the command line."""

from __future__ import annotations

import decimal

import pyarrow.parquet as pq
import pytest

import state_reader
from tests.support.cli import run_json
from tests.support.oracle import arrow_rows, assert_same_as_builtin
from tests.support.rows import row_bytes
from tests.support.streaming_queries import AVRO_TWS_VARIABLES

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
        assert (
            assert_same_as_builtin(
                spark, avro_tws, {"stateVarName": var, "readChangeFeed": "true", "changeStartBatchId": "0"}
            )
            > 0
        )


def test_timers_match_builtin(spark, avro_tws):
    assert assert_same_as_builtin(spark, avro_tws, {"readRegisteredTimers": "true"}) > 0


def test_values_hold_what_was_written(avro_tws):
    """Beyond agreeing with Spark: the extremes the query writes come back exactly."""
    scalars = state_reader.read_state(avro_tws, state_var_name="scalars").column("value").to_pylist()
    bigs = {v["big"] for v in scalars if v["big"] is not None}
    assert bigs and all(abs(b) > decimal.Decimal(10) ** 27 and b.as_tuple().exponent == -10 for b in bigs)
    assert any(b % 1 != 0 for b in bigs)  # all 38 digits, not rounded to 28
    assert {v["i"] for v in scalars} <= {-(2**31), 2**31 - 1}
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
    assert run_json("export", avro_tws, "--state-var", "bymap", "--out", out)["rows"] == expected.num_rows
    assert arrow_rows(pq.read_table(out)) == arrow_rows(expected)


def _family_entries(checkpoint: str):
    """(family name, its schema, its keys without the family id, its values) of every column family
    of every partition, at the last committed batch."""
    from state_reader.core.options import from_kwargs
    from state_reader.core.planner import plan_state_read
    from state_reader.formats.rocksdb_encoding import column_family_ids, select, strip_column_family
    from state_reader.model.checkpoint import DEFAULT_STORE
    from state_reader.model.state_variables import family_schemas
    from state_reader.providers import rocksdb

    plan = plan_state_read(from_kwargs(checkpoint, {"read_registered_timers": True}))
    cp = plan.checkpoint
    schemas = family_schemas(cp, 0, cp.operator_metadata(0, plan.batch_id).store(DEFAULT_STORE))
    for pid in plan.partitions:
        directory = cp.store_dir(0, pid, DEFAULT_STORE)
        state = rocksdb.load_store(plan, directory, pid)
        keys, values = state.row_buffers(directory)
        ids = column_family_ids(keys)
        for name, cf_id in rocksdb.store_column_families(plan, directory, state).items():
            if name in schemas:
                mask = ids == cf_id
                yield name, schemas[name], strip_column_family(select(keys, mask)), select(values, mask)


def test_range_scan_keys_and_records_encode_back_to_sparks_bytes(avro_tws):
    """The TTL indexes and the timestamp-to-key timer index (Avro range-scan keys) decode, and encode
    back to the bytes Spark wrote; every Avro key and value record does too."""
    from state_reader.formats.avro_encoding import encode_avro, encode_avro_rows
    from state_reader.formats.rocksdb_encode import encode_range_scan_keys
    from state_reader.formats.rocksdb_encoding import NO_PREFIX, RANGE_SCAN, KeyEncoderSpec, decode_keys, decode_values

    seen = set()
    for name, family, keys, values in _family_entries(avro_tws):
        spec = KeyEncoderSpec.from_plan(family.key_encoder, 0)
        if spec.kind == RANGE_SCAN:
            decoded = decode_keys(keys, family.key_schema, spec, avro=True)
            assert all(row[family.key_schema.fields[0].name] > 0 for row in decoded.to_pylist()), name
            encoded = encode_range_scan_keys(decoded, family.key_schema, spec.ordering_ordinals, avro=True)
            assert row_bytes(encoded) == row_bytes(keys), name
            seen.add(name)
        elif spec.kind == NO_PREFIX and not name.startswith("$") and name not in ("items",):
            decoded = decode_keys(keys, family.key_schema, spec, avro=True)
            assert [b"\0\0\0" + r for r in encode_avro(decoded, family.key_schema)] == row_bytes(keys), name
            records = encode_avro(decode_values(values, family.value_schema, False, avro=True), family.value_schema)
            assert [b"\0\0\0" + r for r in records] == row_bytes(values), name
            # a batch at a time (column by column where the schema allows) too
            assert row_bytes(encode_avro_rows(decoded, family.key_schema, bytes(3))) == row_bytes(keys), name
            batch = encode_avro_rows(
                decode_values(values, family.value_schema, False, avro=True), family.value_schema, bytes(3)
            )
            assert row_bytes(batch) == row_bytes(values), name
            seen.add(name)
    assert {"$ttl_nested", "$ttl_items", "$ttl_bymap", "$procTimers_timestampToKey", "scalars", "nested"} <= seen
