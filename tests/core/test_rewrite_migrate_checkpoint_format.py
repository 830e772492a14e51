"""The RocksDB checkpoint format changed by a rewrite, without Spark's reader: the rows stay as they are, the
new files are named as the format names them, and the commit log says the format (``v2`` and the files'
unique ids, or ``v1`` and none, in every entry copied). The resume oracle in
tests/oracles/test_rewrite_store_formats.py judges it by Spark."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import state_reader
from state_reader.model.conf import CONF_CHECKPOINT_FORMAT, CONF_PROVIDER
from tests.core.test_rewrite_migrate_encoding import stored_rows
from tests.support.paths import GOLDEN

AGG_WINDOW_HDFS = str(GOLDEN / "spark-4.0.5" / "agg_window_hdfs")


def _commits(checkpoint: str) -> dict[int, tuple[str, dict]]:
    out = {}
    for path in (Path(checkpoint) / "commits").iterdir():
        if path.name.isdigit():
            header, entry = path.read_text().splitlines()[:2]
            out[int(path.name)] = (header, json.loads(entry))
    return out


def _zips(checkpoint: str) -> dict[int, list[str]]:
    """Each partition's snapshot zips of operator 0."""
    state = Path(checkpoint) / "state" / "0"
    return {int(p.name): sorted(z.name for z in p.glob("*.zip")) for p in state.iterdir() if p.name.isdigit()}


def _assert_format_2(checkpoint: str) -> None:
    commits = _commits(checkpoint)
    header, entry = commits[max(commits)]
    assert header == "v2"
    ids = entry["stateUniqueIds"]["0"]
    assert _zips(checkpoint) == {pid: [f"{max(commits) + 1}_{ids[pid][0]}.zip"] for pid in range(len(ids))}


def _assert_format_1(checkpoint: str) -> None:
    commits = _commits(checkpoint)
    assert all(header == "v1" and "stateUniqueIds" not in entry for header, entry in commits.values())
    assert set(map(tuple, _zips(checkpoint).values())) == {(f"{max(commits) + 1}.zip",)}


def test_format_1_to_2_and_back_names_files_and_keeps_rows(checkpoints, tmp_path):
    source = checkpoints("rocksdb_cl_agg_window")
    two, one = str(tmp_path / "two"), str(tmp_path / "one")
    report = state_reader.rewrite(source, two, confs={CONF_CHECKPOINT_FORMAT: "2"})
    assert [(c["old"], c["new"], c["migration"]) for c in report.confs] == [("1", "2", "checkpoint format")]
    _assert_format_2(two)
    state_reader.rewrite(two, one, confs={CONF_CHECKPOINT_FORMAT: "1"})
    _assert_format_1(one)
    assert stored_rows(two) == stored_rows(source) == stored_rows(one)


def test_format_2_to_1_drops_the_ids_of_every_commit_copied(checkpoints, tmp_path):
    source = checkpoints("rocksdb_v2_agg_window")
    assert all(header == "v2" for header, _ in _commits(source).values())
    one = str(tmp_path / "one")
    state_reader.rewrite(source, one, confs={CONF_CHECKPOINT_FORMAT: "1"})
    _assert_format_1(one)
    assert stored_rows(one) == stored_rows(source)


def test_format_2_moves_to_hdfs_only_through_format_1(checkpoints, tmp_path):
    source = checkpoints("rocksdb_v2_agg_window")
    with pytest.raises(state_reader.UnsupportedOptionError, match=f"{CONF_CHECKPOINT_FORMAT}=1"):
        state_reader.rewrite(source, str(tmp_path / "refused"), provider="hdfs")
    assert not (tmp_path / "refused").exists()
    hdfs = str(tmp_path / "hdfs")
    state_reader.rewrite(source, hdfs, provider="hdfs", confs={CONF_CHECKPOINT_FORMAT: "1"})
    commits = _commits(hdfs)
    assert all(header == "v1" and "stateUniqueIds" not in entry for header, entry in commits.values())
    assert any(p.name.endswith(".snapshot") for p in (Path(hdfs) / "state" / "0" / "0").iterdir())


def test_format_2_needs_rocksdb(tmp_path):
    with pytest.raises(state_reader.UnsupportedConfChangeError, match="rocksdb provider only"):
        state_reader.rewrite(AGG_WINDOW_HDFS, str(tmp_path / "refused"), confs={CONF_CHECKPOINT_FORMAT: "2"})
    assert not (tmp_path / "refused").exists()
    moved = str(tmp_path / "moved")
    state_reader.rewrite(AGG_WINDOW_HDFS, moved, confs={CONF_CHECKPOINT_FORMAT: "2", CONF_PROVIDER: "rocksdb"})
    _assert_format_2(moved)
