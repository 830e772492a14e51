"""Which state files one store version needs (``providers/store_files``), on the committed golden
checkpoints Spark wrote and on copies with a file taken away: no Spark."""

from __future__ import annotations

import shutil
from pathlib import Path

from state_reader.core.options import from_kwargs
from state_reader.core.planner import plan_state_read
from state_reader.formats import snapshot_zip
from state_reader.io.storage import Storage
from state_reader.model.conf import ROCKSDB_PROVIDER
from state_reader.providers.store_files import StoreFiles, files_to_read
from tests.support.golden_dirs import golden_path

HDFS = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"
STORE = "state/0/0"


def _files(name: str, provider: str, root: str | None = None) -> StoreFiles:
    return StoreFiles(Storage(root or golden_path(name)), STORE, provider, "lz4")


def _size(name: str, rel: str) -> int:
    return (Path(golden_path(name)) / STORE / rel).stat().st_size


def test_an_hdfs_version_is_its_newest_snapshot_and_the_deltas_after_it():
    files = _files("agg_window_hdfs", HDFS)  # snapshots 3 and 6, deltas 1..8
    assert files.retained_versions(8) == list(range(1, 9))
    eight = files.version_files(8)
    assert (eight.files, eight.snapshot_version, eight.delta_chain) == (["6.snapshot", "7.delta", "8.delta"], 6, 2)
    assert eight.complete and eight.bytes_on_disk == sum(_size("agg_window_hdfs", f) for f in eight.files)
    two = files.version_files(2)  # before the first snapshot: from the empty state
    assert (two.files, two.snapshot_version, two.delta_chain) == (["1.delta", "2.delta"], None, 2)
    assert files.version_files(6).files == ["6.snapshot"]


def test_a_rocksdb_version_is_its_zip_the_ssts_it_lists_and_the_changelogs_after_it():
    name = "agg_window_rocksdb_cl"  # zips 2, 4, 6; changelogs 1..8
    files = _files(name, ROCKSDB_PROVIDER)
    assert files.looked_into(5) == f"{STORE}/4.zip"  # what version 5 opens to find the rest
    five = files.version_files(5)
    raw, _ = snapshot_zip.read_metadata_entry((Path(golden_path(name)) / STORE / "4.zip").read_bytes(), "4.zip")
    ssts = [f"SSTs/{f.dfs_name}" for f in snapshot_zip.parse_metadata(raw, "4.zip").sst_files]
    assert five.files == ["4.zip", *ssts, "5.changelog"]
    assert (five.snapshot_version, five.delta_chain, five.complete) == (4, 1, True)
    assert five.bytes_on_disk == sum(_size(name, f) for f in five.files)
    assert files.version_files(5, zip_data=False).files == ["4.zip", "5.changelog"]
    assert files.looked_into(5) is None  # looked into once: what it lists is kept


def test_rocksdb_without_changelogs_keeps_a_zip_per_version():
    files = _files("agg_window_rocksdb", ROCKSDB_PROVIDER)
    assert files.retained_versions(8) == list(range(1, 9))
    three = files.version_files(3)
    assert three.files[0] == "3.zip" and three.delta_chain == 0 and three.complete
    assert three.recorded_keys is not None  # the zip of the version itself records its keys


def test_a_version_whose_file_is_gone_is_not_complete(tmp_path):
    copy = tmp_path / "cp"
    shutil.copytree(golden_path("agg_window_hdfs"), copy)
    (copy / STORE / "7.delta").unlink()
    files = _files("agg_window_hdfs", HDFS, str(copy))
    eight = files.version_files(8)
    assert eight.files == ["6.snapshot", "7.delta", "8.delta"] and not eight.complete
    assert files.version_files(6).complete


def test_a_read_fetches_the_files_its_version_needs():
    plan = plan_state_read(from_kwargs(golden_path("agg_window_hdfs"), {}))
    rels, nbytes = files_to_read(plan, 0)
    assert rels == [f"{STORE}/6.snapshot", f"{STORE}/7.delta", f"{STORE}/8.delta"]
    assert nbytes == sum(_size("agg_window_hdfs", r.rsplit("/", 1)[1]) for r in rels)
    change_feed = plan_state_read(
        from_kwargs(golden_path("agg_window_hdfs"), {"read_change_feed": True, "change_start_batch_id": 1})
    )
    assert files_to_read(change_feed, 0) is None  # a change feed fetches as it goes
