"""Avro-encoded transformWithState state (``stateStore.encodingFormat=avro``) holding every
type Spark keeps there, written by both Python APIs, against Spark's built-in reader:
value, list and map state (map user keys included), with and without TTL, timers, and
the command line."""

from __future__ import annotations

import decimal
import json

import pyarrow.parquet as pq
import pytest

import state_reader
from state_reader.formats.avro_encoding import avro_schema, decode_avro
from state_reader.formats.spark_types import from_json_value
from tests.support.cli import run_json
from tests.support.oracle import arrow_rows, assert_same_as_builtin
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
    assert run_json("export", avro_tws, "--state-var", "bymap", "--to", out)["rows"] == expected.num_rows
    assert arrow_rows(pq.read_table(out)) == arrow_rows(expected)


def _avro(spark, ddl: str):
    return avro_schema(from_json_value(json.loads(spark.createDataFrame([], ddl).schema.json())))


def test_schema_nullability_is_by_position(spark):
    """Record fields, nested records, arrays and maps may be null; atomic items and map values may not."""
    record = _avro(
        spark,
        "a int not null, xs array<int>, m map<string, array<bigint>>, "
        "s struct<b string, d decimal(38,10)>, ys array<struct<c int>>",
    )
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


def _rows(buffer) -> list[bytes]:
    return [bytes(buffer.buf[s : s + n]) for s, n in zip(buffer.starts.tolist(), buffer.lengths.tolist(), strict=True)]


def test_range_scan_keys_and_records_encode_back_to_sparks_bytes(avro_tws):
    """The TTL indexes and the timestamp-to-key timer index (Avro range-scan keys) decode, and encode
    back to the bytes Spark wrote; every Avro key and value record does too."""
    from state_reader.formats.avro_encoding import encode_avro
    from state_reader.formats.rocksdb_encoding import (
        NO_PREFIX,
        RANGE_SCAN,
        KeyEncoderSpec,
        decode_keys,
        decode_values,
        encode_range_scan_keys,
    )

    seen = set()
    for name, family, keys, values in _family_entries(avro_tws):
        spec = KeyEncoderSpec.from_plan(family.key_encoder, 0)
        if spec.kind == RANGE_SCAN:
            decoded = decode_keys(keys, family.key_schema, spec, avro=True)
            assert all(row[family.key_schema.fields[0].name] > 0 for row in decoded.to_pylist()), name
            encoded = encode_range_scan_keys(decoded, family.key_schema, spec.ordering_ordinals, avro=True)
            assert _rows(encoded) == _rows(keys), name
            seen.add(name)
        elif spec.kind == NO_PREFIX and not name.startswith("$") and name not in ("items",):
            decoded = decode_keys(keys, family.key_schema, spec, avro=True)
            assert [b"\0\0\0" + r for r in encode_avro(decoded, family.key_schema)] == _rows(keys), name
            records = encode_avro(decode_values(values, family.value_schema, False, avro=True), family.value_schema)
            assert [b"\0\0\0" + r for r in records] == _rows(values), name
            seen.add(name)
    assert {"$ttl_nested", "$ttl_items", "$ttl_bymap", "$procTimers_timestampToKey", "scalars", "nested"} <= seen


def test_a_damaged_avro_range_scan_key_names_the_file():
    from state_reader.formats.rocksdb_encoding import RANGE_SCAN, KeyEncoderSpec, decode_keys, encode_range_scan_keys
    from state_reader.formats.unsaferow import RowBuffer

    schema = from_json_value(
        {
            "type": "struct",
            "fields": [
                {"name": "expirationMs", "type": "long", "nullable": True, "metadata": {}},
                {
                    "name": "elementKey",
                    "type": {
                        "type": "struct",
                        "fields": [{"name": "grp", "type": "string", "nullable": True, "metadata": {}}],
                    },
                    "nullable": True,
                    "metadata": {},
                },
            ],
        }
    )
    spec = KeyEncoderSpec(RANGE_SCAN, ordering_ordinals=(0,))
    import pyarrow as pa

    keys = pa.array(
        [{"expirationMs": -5, "elementKey": {"grp": "a"}}, {"expirationMs": None, "elementKey": None}],
        schema.to_arrow(),
    )
    good = _rows(encode_range_scan_keys(keys, schema, (0,), avro=True, schema_id=3))
    # negative: marker 0x00; null: marker 0x02 and eight zero bytes; the remainder carries schema id 3
    assert good[0][:21] == bytes.fromhex("0e000000 00 020200 0210 fffffffffffffffb 00 0300".replace(" ", ""))
    assert good[1][5:18] == bytes.fromhex("020202 0210 0000000000000000".replace(" ", ""))
    assert decode_keys(RowBuffer.from_rows(good, "k"), schema, spec, avro=True).to_pylist() == keys.to_pylist()
    damaged = bytearray(good[0])
    damaged[9] = 0x04  # the value field's zig-zag length says 2 bytes
    with pytest.raises(state_reader.StateReaderError, match=r"state/0/1/7.changelog.*ordering column 'expirationMs'"):
        decode_keys(RowBuffer.from_rows([bytes(damaged)], "state/0/1/7.changelog"), schema, spec, avro=True)
