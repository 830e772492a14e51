"""``verify``: every state file of a checkpoint read and checked, clean or naming what is damaged."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

import state_reader
from tests.support.cli import run, run_json


def test_verify_ok_and_damaged(agg, tmp_path):
    ok = run("verify", agg)
    assert ok.returncode == 0, ok.stderr
    assert "OK:" in ok.stdout
    doc = run_json("verify", agg)
    committed = sorted(int(n) for n in os.listdir(os.path.join(agg, "commits")) if n.isdigit())
    assert doc["ok"] and doc["versions_checked"] == 2 * len(committed)

    damaged = tmp_path / "cp"
    shutil.copytree(agg, damaged)
    delta = damaged / "state" / "0" / "1" / "1.delta"
    data = bytearray(delta.read_bytes())
    for i in range(len(data) // 3, len(data) // 3 + 8):
        data[i] ^= 0xA5
    delta.write_bytes(bytes(data))
    proc = run("verify", damaged)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "DAMAGED" in proc.stdout and "state/0/1/1.delta" in proc.stdout
    report = json.loads(run("verify", damaged, "--json").stdout)
    assert not report["ok"]
    assert {p["partition_id"] for p in report["problems"]} == {1}
    assert report["problems"][0]["version"] == 1 and report["problems"][0]["batch_id"] == 0
    assert all(p["path"].endswith("1.delta") for p in report["problems"])
    # the other partition and the versions after the next snapshot still decode
    assert report["versions_ok"] == report["versions_checked"] - len(report["problems"])


def test_verify_says_which_checksum_files_are_not_checksums(agg, tmp_path):
    """.crc files held as Git LFS pointers: every version still decodes, and verify says the files beside
    those were checked by their formats alone, not that they are damaged."""
    from tests.support.damage import checksums_as_lfs_pointers

    copy = tmp_path / "cp"
    shutil.copytree(agg, copy)
    replaced = {str(p) for p in checksums_as_lfs_pointers(copy)}
    proc = run("verify", copy)
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    assert "NOT VERIFIED" in proc.stdout and "Git LFS pointer" in proc.stdout and "OK:" in proc.stdout
    assert "DAMAGED" not in proc.stdout and not proc.stderr, proc.stderr
    report = run_json("verify", copy)
    assert report["ok"] and not report["problems"] and report["versions_ok"] == report["versions_checked"]
    found = report["malformed_checksums"]
    assert found and {m["sidecar"] for m in found} <= replaced, found
    assert all(m["kind"] == "hadoop" and "Git LFS pointer" in m["reason"] for m in found)
    # the state files verify decodes are among the files read unverified, snapshots and deltas alike
    assert {os.path.splitext(m["file"])[1] for m in found} >= {".delta", ".snapshot"}, found
    assert all(os.path.isfile(m["file"]) for m in found)


# a healthy checkpoint of every operator and store layout the suite writes: verify must pass on each (a false
# "damaged" sends a user to restore a good checkpoint)
HEALTHY = [
    "agg_window",  # HDFS
    "rocksdb_agg_window",  # RocksDB without changelogs: every version a snapshot
    "rocksdb_cl_agg_window",  # with changelogs
    "rocksdb_v2_agg_window",  # checkpoint format 2 (unique ids)
    "dedup",
    "dedup_within",
    "session_window",
    "rocksdb_session_window",  # prefix-scan keys in RocksDB
    "limit",
    "multi",  # two stateful operators
    "apply_in_pandas",
    "fmgws_timeout_fmt1",  # flatMapGroupsWithState format 1 with timeouts
    "join_inner",  # join format 2: four stores in directories of their own
    "join_left_outer_rocksdb_cl",
    "join_v3",  # join format 3: column families
    "join_v4",  # join format 4: lists of rows
    "tws",  # transformWithState: value, list, map, TTL, processing-time timers
    "tws_avro",  # the same in Avro
    "tws_avro_event_time",  # event-time timers
    "tws_lists_rocksdb",  # lists with and without TTL, map, value, timers; RocksDB without changelogs
]


@pytest.mark.parametrize("name", HEALTHY)
def test_verify_passes_on_a_healthy_checkpoint_of_every_operator(checkpoints, name):
    cp = checkpoints(name)
    proc = run("verify", cp)
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    report = run_json("verify", cp)
    assert report["ok"] and not report["problems"] and not report["skipped"], report["problems"][:3]
    assert report["versions_checked"] == report["versions_ok"] > 0


def _families(cp: str) -> set[str]:
    from state_reader.io.storage import Storage
    from state_reader.model.checkpoint import CheckpointDir
    from state_reader.model.state_variables import family_schemas

    logs = CheckpointDir(Storage(cp))
    meta = logs.operator_metadata(0, logs.latest_committed_batch())
    return set(family_schemas(logs, 0, meta.store("default")))


def test_transform_with_state_families_spark_never_creates_are_not_damage(spark, checkpoints):
    """A list with TTL: its schema file names a ``$rowCounter_`` family its store never holds (Spark counts
    such a list in ``$count_``/``$min_``). Spark's reader reads every variable row for row as ours does, and
    verify checks every family the schema files name, calling none of them damaged."""
    from tests.support.oracle import assert_same_as_builtin

    cp = checkpoints("tws_lists_rocksdb")
    assert not list((Path(cp) / "state" / "0" / "0").glob("*.changelog"))
    families = _families(cp)
    assert {"$rowCounter_all", "$rowCounter_recent", "$count_recent", "$min_recent"} <= families
    for var in ("recent", "all", "tags", "total"):
        assert assert_same_as_builtin(spark, cp, {"stateVarName": var}) > 0, var
    report = run_json("verify", cp)
    assert report["ok"], report["problems"][:3]
    assert {store["store_name"] for store in report["stores"]} == families
    # the family the files never hold reads as Spark's reader reads it: no rows
    assert state_reader.read_state(cp, state_var_name="recent").num_rows > 0


def test_verify_still_finds_a_transform_with_state_store_damaged(checkpoints, tmp_path):
    """The same checkpoint with an SST file of its latest snapshot gone: damaged, and verify says which."""
    copy = tmp_path / "cp"
    shutil.copytree(checkpoints("tws_lists_rocksdb"), copy)
    ssts = sorted((copy / "state" / "0" / "1" / "SSTs").glob("*.sst"), key=lambda p: p.stat().st_mtime)
    ssts[-1].unlink()
    proc = run("verify", copy)
    assert proc.returncode == 2 and "DAMAGED" in proc.stdout, (proc.stdout, proc.stderr)
    report = json.loads(run("verify", copy, "--json").stdout)
    assert not report["ok"] and {p["partition_id"] for p in report["problems"]} == {1}
    assert any(ssts[-1].name in (p["message"] + (p["path"] or "")) for p in report["problems"])
