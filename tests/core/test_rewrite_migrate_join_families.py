"""A join rewritten into state formats 3 and 4 and back out of them without Spark: every buffered row of each side,
with its matched flag, ends up in the new families (or stores), format 4 keys each row by its watermark column's
value, and the schema files and ids are Spark's (tests/oracles/test_rewrite_join_families.py judges the resumed
queries by Spark)."""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest

import state_reader
from state_reader.core.rewrite.migrate_join_families import family_ids, join_families
from state_reader.errors import UnsupportedConfChangeError
from state_reader.formats.schema_files import read_schema_v3, write_schema_v3
from state_reader.formats.spark_types import LONG, StructField, StructType
from state_reader.model.checkpoint import JOIN_SIDES, JOIN_STORES, MATCHED_FIELD
from state_reader.model.conf import CONF_JOIN_FORMAT
from tests.support.paths import GOLDEN
from tests.support.resume import stored_rows

FMT1 = str(GOLDEN / "spark-3.5.8" / "join_fmt1_hdfs")
# a left outer join in format 2 on RocksDB: rows matched and not
FMT2 = str(GOLDEN / "spark-4.0.5" / "join_left_outer_rocksdb_cl")
EPOCH = datetime.datetime(1970, 1, 1)


def _micros(value: datetime.datetime) -> int:
    delta = value.replace(tzinfo=None) - EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _rows(checkpoint: str, store: str, drop: str) -> list[tuple]:
    """A family's or store's rows as (join key without its last field ``drop``, value), in a fixed order."""
    out = []
    for row in state_reader.read_state(checkpoint, store_name=store).to_pylist():
        key = {k: v for k, v in row["key"].items() if k != drop}
        out.append((repr(sorted(key.items())), repr(sorted(row["value"].items()))))
    return sorted(out)


@pytest.fixture(scope="module")
def rewritten(tmp_path_factory):
    out = {}
    for fmt in ("3", "4"):
        dst = str(tmp_path_factory.mktemp("join") / f"fmt{fmt}")
        state_reader.rewrite(FMT2, dst, confs={CONF_JOIN_FORMAT: fmt})
        out[fmt] = dst
    return out


def test_each_side_keeps_every_row_and_its_matched_flag(rewritten):
    for side in JOIN_SIDES:
        source = _rows(FMT2, f"{side}-keyWithIndexToValue", "index")
        assert source
        assert any("('matched', True)" in value for _, value in source), "no matched row to carry over"
        assert _rows(rewritten["3"], f"{side}-keyWithIndexToValue", "index") == source
        assert _rows(rewritten["4"], f"{side}-keyWithTsToValues", "__event_time") == source
        counts = state_reader.read_state(rewritten["3"], store_name=f"{side}-keyToNumValues").to_pylist()
        assert sum(r["value"]["value"] for r in counts) == len(source)


def test_format_4_keys_each_row_by_its_watermark_column_and_indexes_it(rewritten):
    for side, column in (("left", "imp_ts"), ("right", "click_ts")):
        rows = state_reader.read_state(rewritten["4"], store_name=f"{side}-keyWithTsToValues").to_pylist()
        assert rows
        for row in rows:
            assert row["key"]["__event_time"] == _micros(row["value"][column])
        index = state_reader.read_state(rewritten["4"], store_name=f"{side}-tsWithKey").to_pylist()
        # one placeholder per row, under the same (join key, event time)
        assert sorted(repr(sorted(r["key"].items())) for r in index) == sorted(
            repr(sorted(r["key"].items())) for r in rows
        )
        assert all(r["value"] == {"__dummy__": None} for r in index)


def test_format_4_back_to_3_holds_the_rows_format_2_held(tmp_path, rewritten):
    back = str(tmp_path / "back")
    state_reader.rewrite(rewritten["4"], back, confs={CONF_JOIN_FORMAT: "3"})
    for side in JOIN_SIDES:
        name = f"{side}-keyWithIndexToValue"
        assert _rows(back, name, "index") == _rows(FMT2, name, "index")


def test_families_and_ids_are_spark_s():
    key = StructType([StructField("field0", LONG, True)])
    value = StructType([StructField("t", LONG, True), StructField(MATCHED_FIELD, LONG, True)])
    assert family_ids("4") == {
        "default": 1,
        "left-keyWithTsToValues": 2,
        "left-tsWithKey": 3,
        "right-keyWithTsToValues": 4,
        "right-tsWithKey": 5,
    }
    assert list(family_ids("3"))[1:] == [
        "left-keyToNumValues",
        "left-keyWithIndexToValue",
        "right-keyToNumValues",
        "right-keyWithIndexToValue",
    ]
    families = join_families("4", key, value)
    assert [f.key_encoder["keyStateEncoderType"] for f in families] == [
        "TimestampAsPostfixKeyStateEncoderSpec",
        "TimestampAsPrefixKeyStateEncoderSpec",
    ] * 2
    assert read_schema_v3(write_schema_v3(families), "x") == families


def test_format_1_is_refused_before_anything_is_written(tmp_path):
    dst = tmp_path / "dst"
    with pytest.raises(UnsupportedConfChangeError, match="into format 2 first"):
        state_reader.rewrite(FMT1, str(dst), confs={CONF_JOIN_FORMAT: "4"}, provider="rocksdb")
    assert not dst.exists()


@pytest.mark.parametrize("provider", [None, "hdfs"])
def test_format_4_to_2_and_back_gives_the_same_bytes(tmp_path, rewritten, provider):
    two, back = str(tmp_path / "two"), str(tmp_path / "back")
    state_reader.rewrite(rewritten["4"], two, confs={CONF_JOIN_FORMAT: "2"}, provider=provider)
    assert (Path(two) / "state/0/0/left-keyToNumValues").is_dir()
    state_reader.rewrite(two, back, confs={CONF_JOIN_FORMAT: "4"}, provider="rocksdb" if provider else None)
    assert stored_rows(back) == stored_rows(rewritten["4"])
    for side in JOIN_SIDES:
        name = f"{side}-keyWithIndexToValue"
        assert _rows(two, name, "index") == _rows(FMT2, name, "index")


def test_format_3_to_2_holds_the_format_2_source_s_rows_and_files(tmp_path, rewritten):
    dst = tmp_path / "two"
    state_reader.rewrite(rewritten["3"], str(dst), confs={CONF_JOIN_FORMAT: "2"})
    for name in JOIN_STORES:
        assert _rows(str(dst), name, "index") == _rows(FMT2, name, "index")
        schema = f"state/0/0/{name}/_metadata/schema"
        assert (dst / schema).read_bytes() == (Path(FMT2) / schema).read_bytes()
    assert (dst / "state/0/_metadata/metadata").read_text() == (Path(FMT2) / "state/0/_metadata/metadata").read_text()
    # the families' files are left behind: Spark would find a schema v3 file naming the default store
    assert not (dst / "state/0/_stateSchema").exists() and not (dst / "state/0/_metadata/v2").exists()


def test_format_4_to_1_is_4_to_2_then_2_to_1(tmp_path, rewritten):
    through, direct = str(tmp_path / "through"), str(tmp_path / "direct")
    state_reader.rewrite(rewritten["4"], through, confs={CONF_JOIN_FORMAT: "1"})
    state_reader.rewrite(FMT2, direct, confs={CONF_JOIN_FORMAT: "1"})
    for name in JOIN_STORES:
        rows = _rows(through, name, "index")
        assert rows == _rows(direct, name, "index")
        assert not any(f"'{MATCHED_FIELD}'" in value for _, value in rows)
