"""Spark types from DDL text: ``parse_ddl`` against the schemas Spark itself parses and writes."""

from __future__ import annotations

import json

import pytest

from state_reader.formats.spark_types import StructType, from_json_value, parse_ddl

# every type a state schema holds, with the spellings Spark's SQL parser accepts
SCHEMA_DDL = (
    "flag BOOLEAN, tiny TINYINT, small SMALLINT, i INT, n BIGINT NOT NULL COMMENT 'rows, so far', f FLOAT, "
    "d DOUBLE, big DECIMAL(20, 3), cents DECIMAL(5,2), day DATE, at TIMESTAMP, local TIMESTAMP_NTZ, s STRING, "
    "raw BINARY, tags ARRAY<STRING>, m MAP<STRING, ARRAY<INT>>, "
    "window STRUCT<start: TIMESTAMP, end: TIMESTAMP NOT NULL>, `odd name, with ``quotes```: INT, "
    "ym INTERVAL YEAR TO MONTH, dt INTERVAL DAY TO SECOND, sum BIGINT, sum DOUBLE"
)


def _spark_schema(spark, ddl: str):
    return spark.createDataFrame([], ddl).schema


def test_ddl_as_spark_writes_it_is_the_schema_spark_means(spark):
    schema = _spark_schema(spark, SCHEMA_DDL)
    expected = from_json_value(json.loads(schema.json()))
    for text in (SCHEMA_DDL, schema.toDDL()):
        parsed = parse_ddl(text)
        # types, names (repeated ones too), nullability, and the JSON names schema files use
        assert parsed == expected, text
        assert parsed.json() == expected.json(), text
    assert parse_ddl(schema.toDDL()).fields[4].metadata == {"comment": "rows, so far"}


def test_a_struct_types_simple_string_is_read_too(spark):
    schema = _spark_schema(spark, "window STRUCT<start: TIMESTAMP, end: TIMESTAMP>, user STRING, n ARRAY<BIGINT>")
    assert schema.simpleString() == "struct<window:struct<start:timestamp,end:timestamp>,user:string,n:array<bigint>>"
    assert parse_ddl(schema.simpleString()) == from_json_value(json.loads(schema.json()))


@pytest.mark.parametrize(
    "text, json_type",
    [
        ("x integer", "integer"),
        ("x long", "long"),
        ("x byte", "byte"),
        ("x short", "short"),
        ("x real", "float"),
        ("x dec", "decimal(10,0)"),
        ("x numeric(7)", "decimal(7,0)"),
        ("x timestamp_ltz", "timestamp"),
        ("x varchar(10)", "string"),
        ("x char(3)", "string"),
        ("x void", "void"),
        ("x interval", "interval"),
        ("x interval hour", "interval hour"),
        ("x Time", "time(6)"),
        ("X: BigInt", "long"),
    ],
)
def test_type_names_have_their_aliases_in_any_case(text, json_type):
    (field,) = parse_ddl(text).fields
    assert field.data_type.to_json() == json_type


def test_names_in_back_quotes_and_empty_structs():
    schema = parse_ddl("`a, b` STRUCT<>, `x``y` STRING, `` INT")
    assert [f.name for f in schema.fields] == ["a, b", "x`y", ""]
    assert schema.fields[0].data_type == StructType([])


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "a field name expected, the text ends at character 1"),
        ("x", "a type expected, the text ends at character 2"),
        ("x INT,", "a field name expected, the text ends at character 7"),
        ("x INT y", "unexpected 'y' at character 7"),
        ("x FOO", "unknown type 'FOO' at character 3"),
        ("x DECIMAL(40, 2)", "precision must be 1..38"),
        ("x STRUCT<a INT", "'>' expected, the text ends"),
        ("x MAP<STRING>", "',' expected, found '>' at character 13"),
        ("x `INT", "unexpected '`' (a quote or back quote that is not closed?) at character 3"),
        ("x INTERVAL DAY TO", "an interval unit expected at character 18"),
        ("x INT COMMENT nope", "a quoted comment expected, found 'nope'"),
    ],
)
def test_text_that_is_no_schema_says_where(text, message):
    with pytest.raises(ValueError) as caught:
        parse_ddl(text)
    assert message in str(caught.value), str(caught.value)
    assert repr(text) in str(caught.value)
