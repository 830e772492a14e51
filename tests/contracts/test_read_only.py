"""Reading never changes a checkpoint: every kind of read, through both fronts, leaves
every file and directory (names, sizes, bytes, modes, mtimes) exactly as it was."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import state_reader
from state_reader.core.options import snake_case
from tests.support.damage import fingerprint
from tests.support.streaming_queries import ROCKSDB_CHANGELOG, Query, _join, run_query

JOIN_STORE = "left-keyWithIndexToValue"


def _snapshot_batch(cp: Path, store: str = "") -> int:
    """A batch whose state partition 0 has a snapshot (HDFS) or zip (RocksDB) of."""
    part = cp / "state" / "0" / "0" / store
    versions = sorted(int(p.stem) for p in part.iterdir() if p.suffix in (".snapshot", ".zip") and p.stem.isdigit())
    assert versions, f"no snapshot in {part}: snapshot replay would not be exercised"
    return versions[0] - 1


def _reads(cp: Path, join: bool) -> list[tuple[str, dict[str, str]]]:
    """(format, options) of every kind of read, as data source options."""
    batches = sorted(int(p.name) for p in (cp / "commits").iterdir() if p.name.isdigit())
    if join:
        return [
            ("statestore", {"joinSide": "left"}),
            ("statestore", {"joinSide": "right"}),
            ("statestore", {"storeName": JOIN_STORE, "batchId": str(batches[1])}),
            ("statestore", {"readChangeFeed": "true", "changeStartBatchId": "0", "storeName": JOIN_STORE}),
            ("state-metadata", {}),
        ]
    return [
        ("statestore", {}),
        ("statestore", {"batchId": str(batches[1])}),
        ("statestore", {"readChangeFeed": "true", "changeStartBatchId": "0"}),
        ("statestore", {"snapshotStartBatchId": str(_snapshot_batch(cp)), "snapshotPartitionId": "0"}),
        ("state-metadata", {}),
        ("state-metadata", {"inferMissingMetadata": "true", "includeHiddenColumns": "true"}),
    ]


def _spark_free(cp: Path, fmt: str, options: dict[str, str]) -> int:
    kwargs = {
        snake_case(k): (int(v) if v.isdigit() else v == "true" if v in ("true", "false") else v)
        for k, v in options.items()
    }
    read = state_reader.read_state if fmt == "statestore" else state_reader.read_metadata
    return read(str(cp), **kwargs).num_rows


@pytest.fixture(scope="module")
def rocksdb_join(spark, tmp_path_factory) -> str:
    """A stream-stream join with the RocksDB provider and changelog checkpointing."""
    query = Query(_join("inner"), output_mode="append", confs=ROCKSDB_CHANGELOG, sources=2)
    return run_query(spark, query, tmp_path_factory.mktemp("readonly_join") / "q")


@pytest.mark.parametrize(
    ("name", "join"),
    [("agg_window", False), ("join_inner", True), ("rocksdb_cl_agg_window", False), ("rocksdb_join", True)],
)
def test_reads_change_nothing(spark, checkpoints, request, tmp_path, name, join):
    source = request.getfixturevalue("rocksdb_join") if name == "rocksdb_join" else checkpoints(name)
    cp = tmp_path / "checkpoint"
    shutil.copytree(source, cp)  # copy2 keeps mtimes; the copy is ours alone
    before = fingerprint(tmp_path)
    rows = 0
    for fmt, options in _reads(cp, join):
        for verify in ("true", "false"):
            rows += _spark_free(cp, fmt, {**options, "verifyChecksums": verify})
        rows += spark.read.format(f"state_reader.{fmt}").options(**options).load(str(cp)).count()
        after = fingerprint(tmp_path)
        changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
        assert not changed, f"{fmt} {options} changed {changed[:5]}"
    assert rows > 0, "the reads returned nothing, so they may not have opened the state files"
