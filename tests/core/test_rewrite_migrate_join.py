"""A stream-stream join's state format changed by a rewrite, without Spark: formats 1 and 2 turned into each other
(only the ``matched`` flag of each buffered row changes), formats 3 and 4 refused on the HDFS-backed provider
before anything is written (tests/oracles/test_rewrite_join_format.py judges the written ones by Spark)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import state_reader
from state_reader.core.rewrite.migrate_join import refusal
from state_reader.errors import UnsupportedConfChangeError
from state_reader.model.checkpoint import JOIN_SIDES, JOIN_STORES, MATCHED_FIELD
from state_reader.model.conf import CONF_JOIN_FORMAT
from tests.support.paths import GOLDEN

FMT1 = str(GOLDEN / "spark-3.5.8" / "join_fmt1_hdfs")
FMT2 = str(GOLDEN / "spark-4.0.5" / "join_inner_hdfs")
FMT2_ROCKSDB = str(GOLDEN / "spark-4.0.5" / "join_left_outer_rocksdb_cl")


def _rows(checkpoint: str, **options) -> list[dict]:
    """The rows in a fixed order (a RocksDB store's order is its key bytes', which a rewrite may re-encode)."""
    return sorted(state_reader.read_state(checkpoint, **options).to_pylist(), key=repr)


def _recorded(checkpoint: str) -> set[str]:
    offsets = Path(checkpoint) / "offsets"
    entries = [p for p in offsets.iterdir() if p.name.isdigit()]
    return {json.loads(p.read_text().splitlines()[1])["conf"][CONF_JOIN_FORMAT] for p in entries}


def _without_flag(rows: list[dict]) -> list[dict]:
    return [{**r, "value": {k: v for k, v in r["value"].items() if k != MATCHED_FIELD}} for r in rows]


def test_format_1_to_2_appends_matched_false_and_keeps_every_other_byte_of_the_state(tmp_path):
    dst = str(tmp_path / "fmt2")
    report = state_reader.rewrite(FMT1, dst, confs={CONF_JOIN_FORMAT: "2"})
    assert [(c["old"], c["new"], c["changed"]) for c in report.confs] == [("1", "2", True)]
    assert _recorded(dst) == {"2"}
    for store in JOIN_STORES:
        before, after = _rows(FMT1, store_name=store), _rows(dst, store_name=store)
        assert len(after) == len(before) > 0
        if store.endswith("keyWithIndexToValue"):
            # format 1 tracked nothing: Spark's own format-1 code reads every row as not matched
            assert [r["value"] for r in after] == [{**r["value"], MATCHED_FIELD: False} for r in before]
            assert [r["key"] for r in after] == [r["key"] for r in before]
        else:
            assert after == before
    for side in JOIN_SIDES:
        assert _rows(dst, join_side=side) == _rows(FMT1, join_side=side)


@pytest.mark.parametrize("checkpoint", [FMT2, FMT2_ROCKSDB], ids=["hdfs", "rocksdb"])
def test_format_2_to_1_drops_matched_and_back_reads_every_row_unmatched(tmp_path, checkpoint):
    to1, back = str(tmp_path / "fmt1"), str(tmp_path / "back")
    state_reader.rewrite(checkpoint, to1, confs={CONF_JOIN_FORMAT: "1"})
    assert _recorded(to1) == {"1"}
    values = [s for s in JOIN_STORES if s.endswith("keyWithIndexToValue")]
    for store in values:
        source = _rows(checkpoint, store_name=store)
        assert any(r["value"][MATCHED_FIELD] for r in source), "the source holds no matched row to lose"
        assert _rows(to1, store_name=store) == _without_flag(source)
    state_reader.rewrite(to1, back, confs={CONF_JOIN_FORMAT: "2"})
    for store in values:
        assert [r["value"][MATCHED_FIELD] for r in _rows(back, store_name=store)] == [False] * len(
            _rows(checkpoint, store_name=store)
        )
    for side in JOIN_SIDES:
        assert _rows(back, join_side=side) == _rows(to1, join_side=side) == _rows(checkpoint, join_side=side)


def test_a_dry_run_names_the_change_and_writes_nothing(tmp_path):
    report = state_reader.rewrite(FMT2, dry_run=True, confs={CONF_JOIN_FORMAT: "1"})
    assert [(c["conf"], c["old"], c["new"], c["changed"]) for c in report.confs] == [(CONF_JOIN_FORMAT, "2", "1", True)]
    assert {s.rows for s in report.stores} != {0}


@pytest.mark.parametrize(
    ("confs", "words"),
    [
        ({CONF_JOIN_FORMAT: "3"}, "on the rocksdb provider only"),
        ({CONF_JOIN_FORMAT: "4"}, "on the rocksdb provider only"),
    ],
)
def test_formats_3_and_4_on_the_hdfs_provider_are_refused_before_anything_is_written(tmp_path, confs, words):
    dst = tmp_path / "dst"
    with pytest.raises(UnsupportedConfChangeError, match=words) as caught:
        state_reader.rewrite(FMT2, str(dst), confs=confs)
    assert caught.value.conf == CONF_JOIN_FORMAT
    assert not dst.exists()


def test_which_directions_are_written():
    assert refusal("1", "2") is None and refusal("2", "1") is None
    assert refusal("3", "2") is None and refusal("4", "2") is None
    assert refusal("3", "1") is None and refusal("4", "1") is None
    assert refusal("2", "4") is None and refusal("3", "4") is None
    assert refusal("2", "3") is None and refusal("4", "3") is None
    assert "rewrite it into format 2 first" in str(refusal("1", "4"))
    assert "rewrite it into format 2 first" in str(refusal("1", "3"))


def test_rows_written_with_a_join_format_change_are_refused_before_anything_is_written(tmp_path):
    """Rows given for a join side are checked against its stores as the rewrite writes them: one layout at a
    time, so an edit beside a join format change is refused, naming both and the way round it."""
    side = state_reader.read_state(FMT2, join_side="left").slice(0, 1)
    dst = tmp_path / "dst"
    with pytest.raises(UnsupportedConfChangeError, match=r"2 -> 1\) in one rewrite .* the format first, then the rows"):
        state_reader.rewrite(FMT2, str(dst), confs={CONF_JOIN_FORMAT: "1"}, upsert=side, join_side="left")
    assert not dst.exists() or not any(dst.iterdir())
