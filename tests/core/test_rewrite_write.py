"""Writing a rewrite (``core/rewrite/write``): each new partition's snapshot from framed rows, then
the logs, schema files and operator metadata, and last the commit point; failures marked."""

from __future__ import annotations

import json

import pytest

import state_reader
from state_reader.core.rewrite.plan import RewriteOptions, RewritePlan, plan_rewrite
from state_reader.core.rewrite.rows import zip_extra_metadata
from state_reader.core.rewrite.write import counting_writer, failure_marked, finish_checkpoint, write_partition
from state_reader.errors import CorruptFileError, RewriteFailedError
from state_reader.io.destination import Destination
from state_reader.io.storage import Storage
from state_reader.model.checkpoint import numeric_names
from state_reader.providers.hdfs import frame_records
from tests.support.golden_dirs import golden_checkpoint, golden_path
from tests.support.oracle import arrow_rows


def _write(rewrite_plan: RewritePlan, dest: Destination) -> state_reader.RewriteReport:
    """Every store's partitions written where they are (the partition count kept), then the rest."""
    dest.begin(rewrite_plan.checkpoint.location)
    report = rewrite_plan.report(dest.display(), dry_run=False)
    put = counting_writer(dest, report)
    for rows in rewrite_plan.stores:
        for pid in rows.plan.partitions:
            keys, values = rows.convert(*rows.load(pid), rewrite_plan.to_rocksdb)
            framed, _ = frame_records(keys, values)
            unique_id = rewrite_plan.unique_id(rows.plan, pid)
            write_partition(
                rows.plan, pid, [framed], rewrite_plan.to_rocksdb, zip_extra_metadata(rows.plan), put, unique_id
            )
    finish_checkpoint(rewrite_plan, dest, put)
    return report


def _state(path: str, **kwargs) -> list:
    return sorted(arrow_rows(state_reader.read_state(path, **kwargs)), key=repr)


@pytest.mark.parametrize(
    ("name", "provider"),
    [("agg_window_hdfs", None), ("agg_window_hdfs", "rocksdb"), ("agg_window_rocksdb_cl", "hdfs")],
)
def test_a_checkpoint_written_back_reads_as_its_source(tmp_path, name, provider):
    source = golden_path(name)
    rewrite_plan = plan_rewrite(golden_checkpoint(name), RewriteOptions(provider=provider))
    dest = Destination(str(tmp_path / "out"))
    report = _write(rewrite_plan, dest)
    # every file but the checksum sidecars Destination writes beside each
    written = sorted(p for p in (tmp_path / "out").rglob("*") if p.is_file() and p.suffix != ".crc")
    assert report.files == len(written)
    assert report.bytes == sum(p.stat().st_size for p in written)
    assert _state(str(tmp_path / "out")) == _state(source)
    snapshot = "8.zip" if rewrite_plan.to_rocksdb else "8.snapshot"
    assert (tmp_path / "out" / "state" / "0" / "1" / snapshot).is_file()


def test_logs_are_copied_up_to_the_batch_with_the_new_confs_and_metadata_comes_last(tmp_path):
    name = "agg_window_hdfs"
    rewrite_plan = plan_rewrite(golden_checkpoint(name), RewriteOptions(batch_id=5, provider="rocksdb"))
    dest = Destination(str(tmp_path / "out"))
    written: list[str] = []
    report = rewrite_plan.report(dest.display(), dry_run=False)
    put = counting_writer(dest, report)
    finish_checkpoint(rewrite_plan, dest, lambda rel, data: (written.append(rel), put(rel, data)))
    out = Storage(str(tmp_path / "out"))
    assert written[-1] == "metadata"
    assert numeric_names(out.list_names("offsets")) == list(range(6))
    assert numeric_names(out.list_names("commits")) == list(range(6))
    conf = json.loads(out.read_bytes("offsets/5").decode().split("\n")[1])["conf"]
    assert conf["spark.sql.streaming.stateStore.providerClass"].endswith("RocksDBStateStoreProvider")
    assert conf["spark.sql.shuffle.partitions"] == "2"
    source = Storage(golden_path(name))
    # the rewritten batch's commit entry is written anew; the others are copied byte for byte
    assert out.read_bytes("commits/3") == source.read_bytes("commits/3")
    assert json.loads(out.read_bytes("commits/5").decode().split("\n")[1]) == rewrite_plan.commit_entry()
    assert out.read_bytes("metadata") == source.read_bytes("metadata")
    # sources' logs of later batches are left for the resumed query to plan afresh
    assert "sources/0/5" in written and not any(p.startswith("sources/") and p.endswith("/6") for p in written)
    doc = json.loads(out.read_bytes("state/0/_metadata/metadata").decode().split("\n", 1)[1])
    assert [s["numPartitions"] for s in doc["stateStoreInfo"]] == [2]
    assert out.read_bytes("state/0/0/_metadata/schema") == source.read_bytes("state/0/0/_metadata/schema")


def test_a_failure_while_writing_says_the_destination_is_marked_incomplete(tmp_path):
    rewrite_plan = plan_rewrite(golden_checkpoint("agg_window_hdfs"))
    dest = Destination(str(tmp_path / "out"))
    with pytest.raises(RewriteFailedError, match="marks the destination incomplete") as info:
        with failure_marked(rewrite_plan, dest):
            raise CorruptFileError("a state file is cut short")
    assert "a state file is cut short" in str(info.value)
    assert isinstance(info.value.__cause__, CorruptFileError)
    with pytest.raises(RewriteFailedError, match="disk full"), failure_marked(rewrite_plan, dest):
        raise OSError("disk full")
    # a bug is not a failure to write: it surfaces as it is
    with pytest.raises(KeyError), failure_marked(rewrite_plan, dest):
        raise KeyError("bug")
