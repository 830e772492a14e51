"""Planning a read of a store that has no schema file, with the key and value schemas given as
options (``keySchema`` / ``valueSchema``), against Spark's reader on the same state before the
schema files were deleted."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import state_reader
from state_reader import errors
from tests.support.damage import without_schema_files
from tests.support.oracle import arrow_rows, spark_rows


def _damaged(src: str, tmp_path: Path) -> str:
    cp = tmp_path / "cp"
    shutil.copytree(src, cp)
    assert without_schema_files(cp), "the copy had no schema files to delete"
    return str(cp)


def _given(builtin) -> tuple[str, str]:
    """The key and value schemas as DDL, as Spark's reader shows them."""
    return builtin.schema["key"].dataType.toDDL(), builtin.schema["value"].dataType.toDDL()


@pytest.mark.parametrize("name", ["agg_window", "rocksdb_cl_session_window"])
def test_a_store_without_schema_files_reads_with_the_schemas_given(spark, checkpoints, tmp_path, name):
    src = checkpoints(name)
    builtin = spark.read.format("statestore").load(src)
    expected = spark_rows(builtin)
    assert expected
    changes = {"readChangeFeed": "true", "changeStartBatchId": "1"}
    expected_changes = spark_rows(spark.read.format("statestore").options(**changes).load(src))
    assert expected_changes
    key, value = _given(builtin)
    cp = _damaged(src, tmp_path)

    # neither reader can read it as it is; ours says what to give
    with pytest.raises(Exception, match="STDS_FAILED_TO_READ_STATE_SCHEMA"):
        spark.read.format("statestore").load(cp).collect()
    with pytest.raises(errors.MissingSchemaFileError) as caught:
        state_reader.read_state(cp)
    for named in ("state/0/0/_metadata/schema", "key_schema", "value_schema"):  # the Python keywords
        assert named in caught.value.message
    # in Python's words alone: the command line names its flags (tests/fronts/test_cli.py), Spark its options
    for other in ("--key-schema", "keySchema", "valueSchema"):
        assert other not in caught.value.message

    table = state_reader.read_state(cp, key_schema=key, value_schema=value, exact_schema=True)
    assert arrow_rows(table) == expected
    feed = state_reader.read_state(
        cp, read_change_feed=True, change_start_batch_id=1, key_schema=key, value_schema=value, exact_schema=True
    )
    assert arrow_rows(feed) == expected_changes
    ours = spark.read.format("state_reader.statestore").options(keySchema=key, valueSchema=value).load(cp)
    assert ours.schema.simpleString() == builtin.schema.simpleString()
    assert spark_rows(ours) == expected
    assert not list(Path(cp).rglob("schema")), "reading wrote a schema file"


def test_given_schemas_are_used_instead_of_a_schema_file(checkpoints):
    src = checkpoints("agg_window")
    renamed = "w STRUCT<s: TIMESTAMP, e: TIMESTAMP>, who STRING"
    value = "count BIGINT, sum BIGINT, sum DOUBLE, count BIGINT, max DOUBLE, min BOOLEAN"
    table = state_reader.read_state(src, key_schema=renamed, value_schema=value, exact_schema=True)
    stored = state_reader.read_state(src, exact_schema=True)
    assert table.schema.field("key").type.names == ["w", "who"]
    assert table.column("key").to_pylist() == [
        {"w": {"s": k["window"]["start"], "e": k["window"]["end"]}, "who": k["user"]}
        for k in stored.column("key").to_pylist()
    ]


def test_schemas_with_more_fields_than_the_rows_give_a_clear_error(checkpoints, tmp_path):
    cp = _damaged(checkpoints("agg_window"), tmp_path)
    key = "window STRUCT<start: TIMESTAMP, end: TIMESTAMP>, user STRING"
    value = "count BIGINT, sum BIGINT, sum DOUBLE, count BIGINT, max DOUBLE, min BOOLEAN"

    # one value field too many: the null bits and slots of 7 fields are longer than the 56-byte rows
    wide_value = value + ", extra BIGINT"
    with pytest.raises(errors.RowDecodeError) as caught:
        state_reader.read_state(cp, key_schema=key, value_schema=wide_value)
    message = caught.value.message
    assert "a row of 7 fields needs at least 64 fixed bytes" in message and "has 56" in message, message
    assert f"key_schema='{key}', value_schema='{wide_value}'" in message
    assert "value" in message and "(version " in message and caught.value.path.startswith(cp)

    # two key fields too many: the rows are long enough, but the window's bytes sit where the slots would be
    wide_key = key + ", a STRING, b STRING"
    with pytest.raises(errors.RowDecodeError) as caught:
        state_reader.read_state(cp, key_schema=wide_key, value_schema=value)
    message = caught.value.message
    assert "starts inside the row's first 40 bytes" in message and "field window" in message, message
    assert f"key_schema='{wide_key}'" in message and " key:" in message


def test_a_join_store_reads_with_its_own_schemas_given_by_store_name(spark, checkpoints, tmp_path):
    src = checkpoints("join_inner")
    store = "left-keyWithIndexToValue"
    batch = "2"  # a batch whose buffered rows are not all evicted yet
    builtin = spark.read.format("statestore").options(storeName=store, batchId=batch).load(src)
    expected = spark_rows(builtin)
    assert expected
    key, value = _given(builtin)
    cp = _damaged(src, tmp_path)
    table = state_reader.read_state(
        cp, store_name=store, batch_id=int(batch), key_schema=key, value_schema=value, exact_schema=True
    )
    assert arrow_rows(table) == expected
    # the four stores have schemas of their own: not the default store, not a side (two stores) at once
    with pytest.raises(errors.InvalidOptionError, match="read each with store_name"):
        state_reader.read_state(cp, key_schema=key, value_schema=value)
    with pytest.raises(errors.ConflictingOptionsError, match="join_side"):
        state_reader.read_state(cp, join_side="left", key_schema=key, value_schema=value)


def test_every_function_that_reads_a_store_takes_the_schemas_given(checkpoints, tmp_path):
    """stats, plot_state_size, explain, diagnose, verify and rewrite read a store without a schema file as
    read_state does; the functions that read several stores use them for the store operator_id and store_name
    name, and refuse them for a store that is not there."""
    from state_reader.inspect.verify import verify_checkpoint

    src = checkpoints("agg_window")
    stored = state_reader.read_state(src, exact_schema=True).schema
    key, value = (stored.field(f).type for f in ("key", "value"))
    key = ", ".join(f"`{f.name}` {_ddl(f.type)}" for f in key)
    value = ", ".join(f"`{f.name}` {_ddl(f.type)}" for f in value)
    given = {"key_schema": key, "value_schema": value}
    cp = _damaged(src, tmp_path)

    with pytest.raises(errors.MissingSchemaFileError, match="key_schema"):
        state_reader.stats(cp)
    assert state_reader.stats(cp, **given).equals(state_reader.stats(src))
    assert state_reader.stats(cp, operator_id=0, store_name="default", **given).equals(state_reader.stats(src))
    with pytest.raises(errors.InvalidOptionError, match="has no store 'other'"):
        state_reader.stats(cp, store_name="other", **given)
    with pytest.raises(errors.RequiredOptionError, match="value_schema"):
        state_reader.stats(cp, key_schema=key)

    ann = "user = 'ann'"
    assert [k.timeline for k in state_reader.explain(cp, ann, **given).keys] == [
        k.timeline for k in state_reader.explain(src, ann).keys
    ]
    healthy = state_reader.diagnose(cp, **given)
    assert "unreadable-store" not in {f.kind for f in healthy.findings}
    assert "unreadable-store" in {f.kind for f in state_reader.diagnose(cp).findings}
    assert verify_checkpoint(cp, **given).ok and not verify_checkpoint(cp).ok

    out = tmp_path / "out"
    report = state_reader.rewrite(cp, str(out), num_partitions=3, **given)
    assert report.new_partitions == 3
    rows = state_reader.read_state(str(out), **given)
    assert sorted(map(str, rows.drop(["partition_id"]).to_pylist())) == sorted(
        map(str, state_reader.read_state(src).drop(["partition_id"]).to_pylist())
    )


def _ddl(arrow_type) -> str:
    """A Spark DDL type for the Arrow types of the windowed aggregation's state."""
    import pyarrow as pa

    if pa.types.is_struct(arrow_type):
        return "STRUCT<" + ", ".join(f"`{f.name}`: {_ddl(f.type)}" for f in arrow_type) + ">"
    return {
        pa.string(): "STRING",
        pa.int64(): "BIGINT",
        pa.float64(): "DOUBLE",
        pa.bool_(): "BOOLEAN",
        pa.timestamp("us", tz="UTC"): "TIMESTAMP",
    }[arrow_type]
