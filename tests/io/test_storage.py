"""Reads of a checkpoint on a filesystem where every request is a round trip (``latencyfile://``, the
local disk with each request counted): the same rows as a local read, from a number of listings that
does not grow with the partitions, each file fetched once, and no per-file ``info``."""

from __future__ import annotations

import shutil
import threading
from collections import Counter
from pathlib import Path
from typing import ClassVar

import fsspec
import pyarrow as pa
import pytest

import state_reader
from state_reader.core.key_filter import And, Comparison, NullCheck, Predicate
from state_reader.core.planner import plan_state_read
from state_reader.core.scan import read_table
from state_reader.errors import MissingStateFileError
from state_reader.io.calls import io_counts, io_counts_since
from tests.support import latency_fs

FS = latency_fs.LatencyFileSystem


@pytest.fixture(scope="module")
def remote() -> str:
    return latency_fs.register(0.0)


def _rows(table) -> list:
    return sorted(map(str, table.to_pylist()))


@pytest.mark.parametrize("name", ["lookup_types", "rocksdb_lookup_types"])
def test_read_lists_once_and_fetches_each_file_once(remote, checkpoints, name):
    path = checkpoints(name)
    local = state_reader.read_state(path)
    FS.reset()
    before = io_counts()
    table = state_reader.read_state(remote + path)
    assert _rows(table) == _rows(local)
    calls = FS.calls
    # the commit log (twice: once as the read starts, once as it plans), the offset log, and the operator's
    # state in one recursive listing: however many partitions there are
    assert calls["list"] <= 4, FS.paths
    assert calls["info"] == 0, [p for k, p in FS.paths if k == "info"]
    fetched = Counter(p for k, p in FS.paths if k == "get")
    assert max(fetched.values()) == 1, [p for p, n in fetched.items() if n > 1]
    assert {p.split("/state/0/")[1].split("/")[0] for p in fetched if "/state/0/" in p} >= set(map(str, range(8)))
    # what the process counted matches what the filesystem saw
    counted = io_counts_since(before)
    assert counted["get"] == calls["get"] and counted["list"] == calls["list"] and counted["bytes"] > 0


def _pinned(value: object, typ: pa.DataType, path: tuple[str, ...]) -> list[Predicate]:
    """``path = value`` for every scalar field under ``path`` (IS NULL for a null)."""
    if pa.types.is_struct(typ):
        return [p for f in typ for p in _pinned(None if value is None else value[f.name], f.type, (*path, f.name))]
    return [NullCheck(path) if value is None else Comparison(path, "=", value)]


@pytest.mark.parametrize("name", ["lookup_types", "rocksdb_lookup_types"])
def test_one_key_lookup_fetches_one_partition(remote, checkpoints, name):
    path = checkpoints(name)
    full = state_reader.read_state(path)
    key_type = full.schema.field("key").type
    # every key field pinned (a key whose double is a number: NaN equals nothing), so the key hashes to one partition
    key = next(k for k in full.column("key").to_pylist() if k["d"] is not None and k["d"] == k["d"])
    predicate = And(tuple(p for f in key_type for p in _pinned(key[f.name], f.type, (f.name,))))
    local = state_reader.read_state(path, key_filter=predicate)
    assert local.num_rows == 1
    FS.reset()
    table = state_reader.read_state(remote + path, key_filter=predicate)
    assert _rows(table) == _rows(local)
    wanted = str(table.column("partition_id")[0].as_py())
    state_parts = {p.split("/state/0/")[1].split("/")[0] for k, p in FS.paths if k == "get" and "/state/0/" in p}
    # the key's partition (and partition 0's schema file): no other partition's files are fetched
    assert state_parts - {"_metadata", "0"} <= {wanted} and wanted in state_parts | {"0"}, state_parts
    assert FS.calls["list"] <= 4 and FS.calls["info"] == 0, FS.paths
    gets = [p for k, p in FS.paths if k == "get"]
    assert len(gets) == len(set(gets)) <= 16, gets


def test_file_gone_between_listing_and_fetch(remote, checkpoints, tmp_path):
    """Planned from a listing that shows a delta; the delta is deleted before the read fetches it."""
    copy = tmp_path / "cp"
    shutil.copytree(checkpoints("lookup_types"), copy)
    plan = plan_state_read({"path": remote + str(copy)})
    store = copy / "state" / "0" / "3"
    delta = max(store.glob("*.delta"), key=lambda p: int(p.name.split(".")[0]))
    delta.unlink()
    with pytest.raises(MissingStateFileError, match=delta.name):
        read_table(plan)


def test_verbose_reports_calls_and_bytes(remote, checkpoints, capsys):
    """``--verbose`` (anywhere on the line) says on stderr how many listings and fetches the command made,
    and the bytes: what the filesystem saw."""
    from state_reader.fronts.cli import main

    path = checkpoints("lookup_types")
    FS.reset()
    assert main(["show", remote + path, "--limit", "3", "--verbose"]) == 0
    err = capsys.readouterr().err
    gets, lists = FS.calls["get"], FS.calls["list"]
    assert gets > 8 and f"{lists} listings, {gets} fetches (" in err and "0 info calls" in err, (err, FS.calls)
    assert main(["--verbose", "metadata", remote + path]) == 0
    assert "listings" in capsys.readouterr().err
    main(["metadata", remote + path])
    assert "listings" not in capsys.readouterr().err


class _HeldZips(FS):
    """``heldzipfile://``: ``latencyfile://`` whose snapshot zips are held, once asked for, until released,
    so that a test sees which zips are in flight together (one round trip) before any comes back."""

    protocol = "heldzipfile"
    held: ClassVar[set[str]] = set()
    arrived = threading.Condition()
    release = threading.Event()

    def _open(self, path, *args, **kwargs):
        if str(path).endswith(".zip"):
            with self.arrived:
                self.held.add(str(path))
                self.arrived.notify_all()
            self.release.wait(60)
        return super()._open(path, *args, **kwargs)


def test_rocksdb_display_looks_into_every_snapshot_zip_in_one_round(checkpoints):
    """The display of a RocksDB store sizes its batches from their snapshot zips (the SSTs and keys each
    names): every zip it looks into is asked for before any has come back, one round trip for the store
    however many partitions and batches; which batches are still rebuildable comes from the listing."""
    path = checkpoints("rocksdb_lookup_types")
    local = state_reader.open(path)
    expected = repr(local)
    batches = local.batches
    zips = {str(p) for p in Path(path, "state", "0").glob("*/*.zip") if int(p.stem) - 1 in batches}
    assert len(zips) == 8 * len(batches) and len(batches) >= 2
    fsspec.register_implementation(_HeldZips.protocol, _HeldZips, clobber=True)
    _HeldZips.reset(0.0)
    _HeldZips.held, _HeldZips.release = set(), threading.Event()
    shown: list[str] = []
    display = threading.Thread(target=lambda: shown.append(repr(state_reader.open(f"heldzipfile://{path}"))))
    display.start()
    try:
        with _HeldZips.arrived:
            _HeldZips.arrived.wait_for(lambda: len(_HeldZips.held) >= len(zips), timeout=20)
            in_flight = set(_HeldZips.held)
    finally:
        _HeldZips.release.set()
        display.join()
    assert in_flight == zips, sorted(zips - in_flight)
    assert shown == [expected.replace(path, f"heldzipfile://{path}")]
    calls = _HeldZips.calls
    # the commit log, the offset log, the state directory and the operator's state (one recursive listing)
    assert calls["list"] <= 4 and calls["info"] == 0, _HeldZips.paths
    gets = [p for k, p in _HeldZips.paths if k == "get"]
    assert len(gets) == len(set(gets)), gets


def test_files_under_walks_a_tree_in_one_remote_listing(remote, checkpoints):
    """Every file below a directory, at any depth, the same on a local disk and remote (there in one call)."""
    from state_reader.io.storage import Storage

    path = checkpoints("agg_window")
    want = sorted(str(p.relative_to(path)) for p in (Path(path) / "state").rglob("*") if p.is_file())
    assert want and Storage(path).files_under("state") == want
    FS.reset()
    assert Storage(remote + path).files_under("state/") == want
    assert FS.calls["list"] == 1, FS.paths
    assert Storage(path).files_under("no/such/dir") == []
    assert Storage(remote + path).files_under("no_such_dir") == []
