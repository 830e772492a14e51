"""Frozen confs asked of a rewrite, without Spark: names and values checked, each change planned or refused
before anything is written, the new values where Spark reads them at restart, and the migrated rows as the
reader decodes them (the resume oracle in tests/oracles/test_rewrite_confs.py judges them by Spark)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

import state_reader
from state_reader.core.planner import plan_store_read
from state_reader.core.rewrite.migrate import MIGRATIONS, asked_confs
from state_reader.errors import (
    ConfChangeError,
    ConflictingOptionsError,
    InvalidConfValueError,
    InvalidOptionError,
    UnknownConfError,
    UnsupportedConfChangeError,
)
from state_reader.io.storage import Storage
from state_reader.model.checkpoint import CheckpointDir
from state_reader.model.conf import (
    CONF_AGG_FORMAT,
    CONF_CHECKPOINT_FORMAT,
    CONF_CODEC,
    CONF_ENCODING,
    CONF_FMGWS_FORMAT,
    CONF_JOIN_FORMAT,
    CONF_MULTIPLE_WATERMARK_POLICY,
    CONF_PROVIDER,
    CONF_SESSION_WINDOW_FORMAT,
    CONF_SHUFFLE_PARTITIONS,
    FROZEN,
    FROZEN_CONFS,
    ROCKSDB_PROVIDER,
)
from tests.support.paths import DOCS, GOLDEN

WRITER = GOLDEN / "spark-4.0.5"
AGG_FMT1 = str(WRITER / "agg_fmt1_hdfs")
AGG_WINDOW = str(WRITER / "agg_window_hdfs")
FMGWS_FMT1 = str(WRITER / "apply_in_pandas_fmt1_hdfs")
FMGWS_FMT2 = str(WRITER / "apply_in_pandas_hdfs")
JOIN = str(WRITER / "join_inner_hdfs")
JOIN_FMT1 = str(GOLDEN / "spark-3.5.8" / "join_fmt1_hdfs")
SESSION = str(WRITER / "session_window_hdfs")


def _offset_conf(checkpoint: str, batch: int) -> dict[str, str]:
    return json.loads((Path(checkpoint) / "offsets" / str(batch)).read_text().splitlines()[1])["conf"]


def _value_schema(checkpoint: str) -> str:
    return plan_store_read(CheckpointDir(Storage(checkpoint)), 0, "default", None).value_schema.json()


def _last_batch(checkpoint: str) -> int:
    return max(int(p.name) for p in (Path(checkpoint) / "offsets").iterdir() if p.name.isdigit())


def test_every_supported_conf_has_a_migration_and_every_migration_a_supported_conf():
    assert sorted(k for k, spec in FROZEN.items() if spec.supported) == sorted(MIGRATIONS)
    assert all(spec.refusal or spec.migration for spec in FROZEN_CONFS)


@pytest.mark.parametrize(
    ("confs", "error", "words"),
    [
        ({"spark.sql.streaming.nope": "1"}, UnknownConfError, "not a conf Spark freezes"),
        ({CONF_AGG_FORMAT: "3"}, InvalidConfValueError, "no value '3' in any Spark; its values: 1, 2"),
        ({CONF_AGG_FORMAT: "two"}, InvalidConfValueError, "whole number"),
        ({CONF_SHUFFLE_PARTITIONS: "0"}, InvalidConfValueError, "positive whole number"),
        ({CONF_CODEC: "gzip"}, InvalidConfValueError, "lz4, lzf, snappy, zstd"),
        ({CONF_PROVIDER: "memory"}, InvalidConfValueError, "hdfs, rocksdb"),
        ({"spark.sql.streaming.stateStore.rowChecksum.enabled": "yes"}, InvalidConfValueError, "true or false"),
        ({CONF_SESSION_WINDOW_FORMAT: "2"}, InvalidConfValueError, "its values: 1"),
    ],
)
def test_names_and_values_spark_does_not_have_are_refused(confs, error, words):
    with pytest.raises(error, match=words) as caught:
        asked_confs(confs, None, None)
    assert caught.value.conf == next(iter(confs))
    assert isinstance(caught.value, InvalidOptionError)


def test_values_are_spelt_as_spark_records_them():
    asked = asked_confs({CONF_CODEC: " ZSTD ", CONF_AGG_FORMAT: "02", CONF_PROVIDER: "RocksDB"}, None, None)
    assert asked == {CONF_CODEC: "zstd", CONF_AGG_FORMAT: "2", CONF_PROVIDER: ROCKSDB_PROVIDER}


def test_shorthands_are_their_confs_and_conflict_with_other_values():
    assert asked_confs({CONF_PROVIDER: "rocksdb"}, 4, "rocksdb") == {
        CONF_PROVIDER: ROCKSDB_PROVIDER,
        CONF_SHUFFLE_PARTITIONS: "4",
    }
    with pytest.raises(ConflictingOptionsError, match="providerClass is asked for twice"):
        asked_confs({CONF_PROVIDER: "rocksdb"}, None, "hdfs")
    with pytest.raises(ConflictingOptionsError, match="as '3' and as '4'"):
        asked_confs({CONF_SHUFFLE_PARTITIONS: "4"}, 3, None)


@pytest.mark.parametrize(
    ("checkpoint", "confs", "words"),
    [
        (AGG_FMT1, {CONF_JOIN_FORMAT: "3"}, "not applicable, the query has no operator whose state it shapes"),
        (AGG_FMT1, {CONF_FMGWS_FORMAT: "1"}, "not applicable"),
        (SESSION, {CONF_AGG_FORMAT: "1"}, "sessionWindowStateStoreSaveExec"),
        (JOIN, {CONF_JOIN_FORMAT: "3"}, "on the rocksdb provider only"),
        (JOIN_FMT1, {CONF_JOIN_FORMAT: "3", CONF_PROVIDER: "rocksdb"}, "3 refused: format 1 keeps no matched flag"),
        (AGG_FMT1, {CONF_ENCODING: "avro", CONF_PROVIDER: "rocksdb"}, "not applicable.*transformWithState"),
        (AGG_FMT1, {CONF_CHECKPOINT_FORMAT: "2"}, "rocksdb provider only"),
        (AGG_FMT1, {CONF_MULTIPLE_WATERMARK_POLICY: "max"}, "not how state is stored"),
        (AGG_FMT1, {"spark.sql.streaming.stateStore.rocksdb.formatVersion": "4"}, "in the table format"),
    ],
)
def test_changes_without_a_migration_are_refused_before_anything_is_written(tmp_path, checkpoint, confs, words):
    dst = tmp_path / "dst"
    with pytest.raises(UnsupportedConfChangeError, match=words) as caught:
        state_reader.rewrite(checkpoint, str(dst), confs=confs)
    assert caught.value.conf in confs
    assert not dst.exists()


def test_a_dry_run_says_each_change_old_to_new():
    report = state_reader.rewrite(
        AGG_FMT1, dry_run=True, confs={CONF_AGG_FORMAT: "2", CONF_CODEC: "zstd", CONF_SHUFFLE_PARTITIONS: "2"}
    )
    changes = {c["conf"]: (c["old"], c["new"], c["changed"], c["migration"]) for c in report.confs}
    assert changes[CONF_AGG_FORMAT] == ("1", "2", True, "aggregation format")
    assert changes[CONF_CODEC] == ("lz4", "zstd", True, "recompress")
    assert changes[CONF_SHUFFLE_PARTITIONS] == ("2", "2", False, None)
    assert report.summary()["confs"] == report.confs
    assert report.stores[0].rows > 0


def test_the_offset_log_records_the_new_values_and_the_rows_the_new_format(tmp_path):
    before = state_reader.read_state(AGG_FMT1).sort_by("partition_id").to_pylist()
    to2, back = str(tmp_path / "fmt2"), str(tmp_path / "fmt1")
    state_reader.rewrite(AGG_FMT1, to2, confs={CONF_AGG_FORMAT: "2", CONF_CODEC: "zstd"})
    batches = sorted(int(p.name) for p in (Path(to2) / "offsets").iterdir() if p.name.isdigit())
    for batch in batches:  # every offsets entry copied records them
        conf = _offset_conf(to2, batch)
        assert (conf[CONF_AGG_FORMAT], conf[CONF_CODEC]) == ("2", "zstd")
    snapshot = next((Path(to2) / "state" / "0" / "0").glob("*.snapshot"))
    assert snapshot.read_bytes()[:4] == b"\x28\xb5\x2f\xfd"  # a zstd frame
    key_fields = len(before[0]["key"])
    rows = state_reader.read_state(to2).sort_by("partition_id").to_pylist()
    assert [r["value"] for r in rows] == [dict(list(r["value"].items())[key_fields:]) for r in before]
    state_reader.rewrite(to2, back, confs={CONF_AGG_FORMAT: "1"})
    assert state_reader.read_state(back).sort_by("partition_id").to_pylist() == before
    assert _offset_conf(back, batches[-1])[CONF_AGG_FORMAT] == "1"


def test_flat_map_groups_with_state_formats_round_trip(tmp_path):
    before = state_reader.read_state(FMGWS_FMT1).sort_by("partition_id").to_pylist()
    to2, back = str(tmp_path / "fmt2"), str(tmp_path / "fmt1")
    state_reader.rewrite(FMGWS_FMT1, to2, confs={CONF_FMGWS_FORMAT: "2"})
    nested = state_reader.read_state(to2).sort_by("partition_id").to_pylist()
    # no timeouts: format 2 keeps the groupState struct alone, as Spark writes it (compare a format 2 run)
    assert [r["value"] for r in nested] == [{"groupState": r["value"]} for r in before]
    assert _value_schema(to2) == _value_schema(FMGWS_FMT2)
    state_reader.rewrite(to2, back, confs={CONF_FMGWS_FORMAT: "1"})
    assert state_reader.read_state(back).sort_by("partition_id").to_pylist() == before


def test_a_format_change_and_a_transform_of_one_operator_are_refused_together():
    with pytest.raises(ConfChangeError, match="rewrite twice"):
        state_reader.rewrite(AGG_FMT1, dry_run=True, confs={CONF_AGG_FORMAT: "2"}, transform=lambda batch: batch)


def test_provider_and_partitions_through_confs_write_what_the_shorthands_write(tmp_path):
    shorthand, confs = str(tmp_path / "shorthand"), str(tmp_path / "confs")
    state_reader.rewrite(AGG_WINDOW, shorthand, num_partitions=3, provider="rocksdb")
    report = state_reader.rewrite(
        AGG_WINDOW, confs, confs={CONF_SHUFFLE_PARTITIONS: "3", CONF_PROVIDER: ROCKSDB_PROVIDER}
    )
    assert (report.provider, report.new_partitions) == ("rocksdb", 3)
    read = state_reader.read_state
    # compared as text: NaN is not equal to itself
    assert str(read(confs).sort_by("partition_id").to_pylist()) == str(
        read(shorthand).sort_by("partition_id").to_pylist()
    )
    assert _offset_conf(confs, _last_batch(confs))[CONF_PROVIDER] == ROCKSDB_PROVIDER


def test_the_docs_table_is_the_codes():
    spec = importlib.util.spec_from_file_location("confs_table", DOCS / "confs_table.py")
    assert spec is not None and spec.loader is not None
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    page = (DOCS / "rewrite.md").read_text(encoding="utf-8")
    assert hook.with_table(page) == page, "docs/rewrite.md is stale: run python docs/confs_table.py"
    for conf in FROZEN_CONFS:
        assert f"| `{conf.key}` |" in page
