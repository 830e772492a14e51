"""Avro records of transformWithState state: the Avro schema Spark derives (nullability by position),
types Spark refuses, and a damaged Avro range-scan key named (their bytes against Spark's are in
``tests/oracles/test_avro.py``)."""

from __future__ import annotations

import json

import pytest

import state_reader
from state_reader.formats.avro_encoding import avro_schema, decode_avro
from state_reader.formats.spark_types import from_json_value
from tests.support.rows import row_bytes


def test_a_damaged_avro_range_scan_key_names_the_file():
    from state_reader.formats.rocksdb_encode import encode_range_scan_keys
    from state_reader.formats.rocksdb_encoding import RANGE_SCAN, KeyEncoderSpec, decode_keys
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
    good = row_bytes(encode_range_scan_keys(keys, schema, (0,), avro=True, schema_id=3))
    # negative: marker 0x00; null: marker 0x02 and eight zero bytes; the remainder carries schema id 3
    assert good[0][:21] == bytes.fromhex("0e000000 00 020200 0210 fffffffffffffffb 00 0300".replace(" ", ""))
    assert good[1][5:18] == bytes.fromhex("020202 0210 0000000000000000".replace(" ", ""))
    assert decode_keys(RowBuffer.from_rows(good, "k"), schema, spec, avro=True).to_pylist() == keys.to_pylist()
    damaged = bytearray(good[0])
    damaged[9] = 0x04  # the value field's zig-zag length says 2 bytes
    with pytest.raises(state_reader.StateReaderError, match=r"state/0/1/7.changelog.*ordering column 'expirationMs'"):
        decode_keys(RowBuffer.from_rows([bytes(damaged)], "state/0/1/7.changelog"), schema, spec, avro=True)


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
