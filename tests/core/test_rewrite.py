"""The rewrite's own rules, apart from Spark's judgement (``tests/oracles/test_rewrite.py``): what it refuses,
its report's sizes equal to ``stats``'s, and its one pipeline with another row mover."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import state_reader


def test_refusals(checkpoints, tmp_path):
    src = checkpoints("agg_window")
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "x").write_text("x")
    with pytest.raises(state_reader.DestinationNotEmptyError, match="not empty"):
        state_reader.repartition(src, str(busy), 3)
    running = tmp_path / "running"
    shutil.copytree(src, running)
    last = max(int(p.name) for p in (running / "offsets").iterdir() if p.name.isdigit())
    shutil.copy(running / "offsets" / str(last), running / "offsets" / str(last + 1))
    with pytest.raises(state_reader.UncommittedBatchError, match="never committed"):
        state_reader.repartition(str(running), str(tmp_path / "a"), 3)
    assert not (tmp_path / "a").exists()
    report = state_reader.repartition(str(running), str(tmp_path / "b"), 3, allow_uncommitted=True)
    assert report.batch_id == last
    with pytest.raises(state_reader.UnsupportedOptionError, match="RocksDB provider only"):
        state_reader.rewrite(checkpoints("join_v3"), str(tmp_path / "f"), provider="hdfs")
    with pytest.raises(state_reader.InvalidOptionError):
        state_reader.repartition(src, str(tmp_path / "d"), 0)
    # a drop_keys filter that does not fit the key fails before anything is written
    with pytest.raises(state_reader.StateReaderError, match="drop_keys"):
        state_reader.rewrite(src, str(tmp_path / "e"), num_partitions=3, drop_keys="no_such_field = 1")
    assert not (tmp_path / "e").exists()


def test_transform_refusals(checkpoints, tmp_path):
    import pyarrow as pa

    def same(batch: pa.RecordBatch) -> pa.RecordBatch:
        return batch

    with pytest.raises(state_reader.InvalidOptionError, match="operator_id"):
        state_reader.rewrite(checkpoints("multi"), str(tmp_path / "a"), transform=same)
    with pytest.raises(state_reader.UnsupportedOptionError, match="several stores"):
        state_reader.rewrite(checkpoints("join_inner"), str(tmp_path / "b"), transform=same)
    # found while writing: the destination is left marked incomplete
    with pytest.raises(state_reader.RewriteFailedError, match="one row per row"):
        state_reader.rewrite(checkpoints("agg_window"), str(tmp_path / "c"), transform=lambda b: b.slice(0, 1))
    # an unchanged transform writes the same state and the same schema file, byte for byte
    src = checkpoints("agg_window")
    state_reader.rewrite(src, str(tmp_path / "d"), transform=same)
    schema = Path("state/0/0/_metadata/schema")
    assert (tmp_path / "d" / schema).read_bytes() == (Path(src) / schema).read_bytes()
    assert sorted(map(str, state_reader.read_state(str(tmp_path / "d")).drop(["partition_id"]).to_pylist())) == sorted(
        map(str, state_reader.read_state(src).drop(["partition_id"]).to_pylist())
    )


@pytest.mark.parametrize("name", ["agg_window", "rocksdb_cl_agg_window"])
def test_stats_and_the_rewrite_report_give_one_size(checkpoints, name):
    """A state's rows and bytes are the same in ``stats`` and in a rewrite report's current layout,
    and a transform changes the new layout's size, never the current one's."""
    import pyarrow as pa

    src = checkpoints(name)
    latest = max(state_reader.stats(src).column("batch_id").to_pylist())
    measured = [r for r in state_reader.stats(src, change_start_batch_id=latest).to_pylist() if r["batch_id"] == latest]
    by_partition = sorted((r["partition_id"], r["rows"], r["state_bytes"]) for r in measured)
    report = state_reader.rewrite(src, dry_run=True)
    current = report.summary()["current"]
    assert (
        list(
            zip(
                range(current["partitions"]), current["rows_per_partition"], current["bytes_per_partition"], strict=True
            )
        )
        == by_partition
    )
    # one line of text (what the command line prints is fronts/console's)
    assert "\n" not in str(report) and f"{current['rows']:,} rows" in str(report)

    def noted(batch: pa.RecordBatch) -> pa.RecordBatch:
        value = batch.column(1)
        fields = [value.type.field(i) for i in range(value.type.num_fields)]
        note = pa.array(["a note that makes every value longer"] * len(value), pa.string())
        widened = pa.StructArray.from_arrays([*value.flatten(), note], fields=[*fields, pa.field("note", pa.string())])
        return pa.RecordBatch.from_arrays([batch.column(0), widened], names=["key", "value"])

    transformed = state_reader.rewrite(src, dry_run=True, transform=noted).summary()
    assert transformed["current"] == current
    assert transformed["new"]["rows"] == current["rows"] and transformed["new"]["bytes"] > current["bytes"]


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


class _FailsAfterOnePartition:
    """A row mover that writes one new partition of the first store the Spark-free way, then fails
    (as a Spark job whose second task dies would)."""

    def __init__(self) -> None:
        self.stores = 0

    def move(self, rp, rows, drop, target, edit=None):
        from state_reader.core.rewrite import write_partition, zip_extra_metadata

        self.stores += 1
        plan = rows.plan
        write_partition(plan, 0, (), rp.to_rocksdb, zip_extra_metadata(plan), target.put, rp.unique_id(plan, 0))
        raise state_reader.StateReaderError("the executor running new partition 1 was lost")


def test_a_failing_row_mover_leaves_the_destination_marked_and_rerunnable(checkpoints, tmp_path):
    """Whatever moves the rows, the pipeline marks the destination first and commits last: a mover
    that fails leaves nothing Spark would start from, and the same rewrite run again into it writes
    what a rewrite into a fresh directory writes."""
    from state_reader.core.rewrite import LocalRows, RewriteOptions, rewrite_checkpoint
    from state_reader.io.destination import INCOMPLETE_PREFIX, Destination
    from state_reader.io.storage import Storage

    src = checkpoints("agg_window")
    dst = tmp_path / "dst"
    failing = _FailsAfterOnePartition()
    with pytest.raises(state_reader.RewriteFailedError, match="executor running new partition 1 was lost") as err:
        rewrite_checkpoint(Storage(src), Destination(str(dst)), RewriteOptions(num_partitions=3), mover=failing)
    assert "incomplete" in str(err.value) and failing.stores == 1
    assert (dst / "metadata").read_bytes().startswith(INCOMPLETE_PREFIX)
    assert list((dst / "state" / "0" / "0").glob("*.snapshot"))  # what the mover wrote before it failed
    assert not (dst / "commits").exists() and not (dst / "offsets").exists()
    with pytest.raises(state_reader.IncompleteRewriteError):
        state_reader.read_state(str(dst))

    again = rewrite_checkpoint(Storage(src), Destination(str(dst)), RewriteOptions(num_partitions=3), mover=LocalRows())
    fresh = rewrite_checkpoint(Storage(src), Destination(str(tmp_path / "fresh")), RewriteOptions(num_partitions=3))
    assert again.summary() | {"destination": None} == fresh.summary() | {"destination": None}
    assert _files(dst) == _files(tmp_path / "fresh")


def test_a_dry_run_counts_on_this_machine_whatever_the_mover(checkpoints):
    """A dry run writes nothing, so no mover is asked: the counts are the Spark-free ones."""
    from state_reader.core.rewrite import RewriteOptions, rewrite_checkpoint
    from state_reader.io.storage import Storage

    src = checkpoints("agg_window")
    failing = _FailsAfterOnePartition()
    dry = rewrite_checkpoint(Storage(src), None, RewriteOptions(num_partitions=3, dry_run=True), mover=failing)
    assert failing.stores == 0 and dry.dry_run
    assert dry.stores == state_reader.rewrite(src, num_partitions=3, dry_run=True).stores
    with pytest.raises(state_reader.InvalidOptionError, match="needs a destination"):
        rewrite_checkpoint(Storage(src), None, RewriteOptions(num_partitions=3), mover=failing)
