"""Schema file writers: every schema file Spark wrote, read and written back, gives Spark's bytes."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from state_reader import errors
from state_reader.formats.schema_files import (
    ColumnFamilySchema,
    decode_modified_utf8,
    encode_modified_utf8,
    nullable_schema_file,
    read_schema_v1v2,
    read_schema_v3,
    write_schema_v2,
)
from state_reader.formats.spark_types import StructField, StructType, from_json_value, parse_struct, spark_json
from tests.support.paths import GOLDEN
from tests.support.schema_files import write_schema_v3


def _v2_files(root: Path) -> list[Path]:
    return sorted(p for p in root.glob("state/*/0/**/_metadata/schema") if p.is_file())


def _v3_files(root: Path) -> list[Path]:
    return sorted(p for p in root.glob("state/*/_stateSchema/*/*") if p.is_file() and not p.name.startswith("."))


def _assert_round_trip(path: Path) -> str:
    data = path.read_bytes()
    version = data[2:4].decode()
    if version == "v3":
        families = read_schema_v3(data, str(path))
        written = write_schema_v3(families)
    else:
        assert version == "v2", f"{path}: schema file version {version}"
        written = write_schema_v2(*read_schema_v1v2(data, str(path)))
    assert written == data, f"{path}:\n spark {data!r}\n ours  {written!r}"
    return version


def test_golden_schema_files_round_trip():
    files = [p for root in GOLDEN.glob("spark-*/*") for p in _v2_files(root)]
    assert len(files) > 50
    assert {_assert_round_trip(p) for p in files} == {"v2"}


@pytest.mark.parametrize(
    ("name", "versions"),
    [
        ("types", {"v2"}),
        ("exotic_types", {"v2"}),
        ("session_window", {"v2"}),
        ("join_inner", {"v2"}),
        ("rocksdb_cl_agg_window", {"v2"}),
        ("tws", {"v3"}),
        ("join_v3", {"v3"}),
    ],
)
def test_spark_schema_files_round_trip(checkpoints, name, versions):
    root = Path(checkpoints(name))
    files = _v2_files(root) + _v3_files(root)
    assert {_assert_round_trip(p) for p in files} == versions
    if name == "join_inner":  # the four join stores, each with its own file
        assert len(files) == 4


def test_v3_column_families_in_order_with_ids():
    key = StructType([StructField("grp", from_json_value("string"))])
    value = StructType([StructField("n", from_json_value("long"), nullable=False)])
    families = [
        ColumnFamilySchema(
            "$procTimers_keyToTimestamp",
            key,
            value,
            {"keyStateEncoderType": "PrefixKeyScanStateEncoderSpec", "numColsPrefixKey": 1},
            None,
        ),
        ColumnFamilySchema(
            "mapState",
            key,
            value,
            {"keyStateEncoderType": "NoPrefixKeyStateEncoderSpec"},
            StructType([StructField("mk", from_json_value("string"))]),
            key_schema_id=1,
            value_schema_id=2,
        ),
    ]
    data = write_schema_v3(families)
    assert data.startswith(b"\x00\x02v3\x00\x00\x00\x02\x00\x1a$procTimers_keyToTimestamp\x00\x00\x00\x00\x00\x01")
    assert b"\x00\x00\x00\x01\x00\x06{    }" in data
    assert read_schema_v3(data, "x") == families
    old = write_schema_v3(families, with_ids=False)
    assert read_schema_v3(old, "x") == [
        ColumnFamilySchema(f.name, f.key_schema, f.value_schema, f.key_encoder, f.user_key_schema) for f in families
    ]


def _non_nullable() -> StructType:
    """A schema non-nullable at every depth, with field metadata (a watermark's)."""
    return parse_struct(
        spark_json(
            {"type": "struct", "fields": [
                {"name": "ts", "type": "timestamp", "nullable": False, "metadata": {"spark.watermarkDelayMs": 5000}},
                {"name": "s", "nullable": False, "metadata": {}, "type": {"type": "struct", "fields": [
                    {"name": "xs", "nullable": False, "metadata": {},
                     "type": {"type": "array", "elementType": "long", "containsNull": False}},
                    {"name": "m", "nullable": False, "metadata": {},
                     "type": {"type": "map", "keyType": "string", "valueType": "long", "valueContainsNull": False}},
                ]}},
            ]}
        ),
        "test",
    )  # fmt: skip


def test_nullable_schema_files_widen_every_schema_at_every_depth():
    schema = _non_nullable()
    widened = read_schema_v1v2(nullable_schema_file(write_schema_v2(schema, schema), "v2"), "v2")
    for result in widened:
        text = result.json()
        assert '"nullable":false' not in text and '"containsNull":false' not in text
        assert '"valueContainsNull":false' not in text
        assert result.fields[0].metadata == {"spark.watermarkDelayMs": 5000}
        assert result.names == schema.names
    spec = {"keyStateEncoderType": "RangeKeyScanStateEncoderSpec", "keySchema": schema.to_json(), "ordinals": [0]}
    family = ColumnFamilySchema("f", schema, schema, spec, schema, key_schema_id=3, value_schema_id=4)
    for with_ids in (True, False):
        data = nullable_schema_file(write_schema_v3([family], with_ids=with_ids), "v3")
        # the layout kept (schema ids, or none as pre-release writers wrote): the same bytes as writing it widened
        (out,) = read_schema_v3(data, "v3")
        assert data == write_schema_v3([out], with_ids=with_ids)
        assert (out.key_schema_id, out.value_schema_id) == ((3, 4) if with_ids else (0, 0))
        for widened_schema in (out.key_schema, out.value_schema, out.user_key_schema, parse_struct(
            spark_json(out.key_encoder["keySchema"]), "spec")):  # fmt: skip
            assert widened_schema is not None and '"nullable":false' not in widened_schema.json()
        assert out.key_encoder["ordinals"] == [0]


def test_long_json_is_chunked_as_java_does():
    # chunks of 65535 UTF-16 code units; a chunk that is not all ASCII would overflow writeUTF's 65535
    # bytes, so only the last one can hold other characters (a character beyond U+FFFF as two 3-byte halves)
    prefix = len('{"type":"struct","fields":[{"name":"')
    name = "a" * (65535 - prefix) + "😀é" + "b" * 5000
    schema = StructType([StructField(name, from_json_value("long"))])
    data = write_schema_v2(schema, schema)
    (chunks,) = struct.unpack_from(">i", data, 4)
    assert chunks == 2
    (first,) = struct.unpack_from(">H", data, 8)
    assert first == 65535
    (second,) = struct.unpack_from(">H", data, 10 + first)
    assert second == len(schema.json()) - 65535 + 5 + 1  # the emoji takes 6 bytes, é 2
    assert data[12 + first : 12 + first + 8] == b"\xed\xa0\xbd\xed\xb8\x80\xc3\xa9"
    assert read_schema_v1v2(data, "x") == (schema, schema)
    assert encode_modified_utf8("x\x00😀") == b"x\xc0\x80\xed\xa0\xbd\xed\xb8\x80"
    assert decode_modified_utf8(encode_modified_utf8("x\x00😀é")) == "x\x00😀é"


def test_a_chunk_over_65535_bytes_is_refused_like_java():
    schema = StructType([StructField("é" * 40000, from_json_value("long"))])
    with pytest.raises(errors.StateReaderError, match="65535"):
        write_schema_v2(schema, schema)


def test_json_as_jackson_writes_it():
    metadata = {
        "spark.watermarkDelayMs": 5000,
        "ratio": 0.25,
        "big": 1e21,
        "small": 1e-5,
        "flag": True,
        "__COLLATIONS": {"c": "spark.UTF8_LCASE"},
        "none": None,
        "list": [1, "x"],
    }
    schema = StructType([StructField('q"uo\\te\n\t\x01é', from_json_value("decimal(38,10)"), True, metadata)])
    assert schema.json() == (
        '{"type":"struct","fields":[{"name":"q\\"uo\\\\te\\n\\t\\u0001é","type":"decimal(38,10)",'
        '"nullable":true,"metadata":{"spark.watermarkDelayMs":5000,"ratio":0.25,"big":1.0E21,"small":1.0E-5,'
        '"flag":true,"__COLLATIONS":{"c":"spark.UTF8_LCASE"},"none":null,"list":[1,"x"]}}]}'
    )
    assert parse_struct(schema.json(), "x") == schema
    assert [spark_json(v) for v in (1.0, 100.0, 1e7, 9999999.5, 0.001, 0.0001, -0.0, 123456789.0)] == [
        "1.0",
        "100.0",
        "1.0E7",
        "9999999.5",
        "0.001",
        "1.0E-4",
        "-0.0",
        "1.23456789E8",
    ]


def test_user_defined_types_keep_their_key_order():
    udt = {
        "type": "udt",
        "class": "org.example.PointUDT",
        "pyClass": "example.PointUDT",
        "sqlType": {"type": "struct", "fields": [{"name": "x", "type": "double", "nullable": False, "metadata": {}}]},
    }
    text = spark_json({"type": "struct", "fields": [{"name": "p", "type": udt, "nullable": True, "metadata": {}}]})
    assert parse_struct(text, "x").json() == text
