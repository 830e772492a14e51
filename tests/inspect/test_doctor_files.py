"""``doctor``'s checks of the files (``inspect/doctor_files``): for each finding, a real query that has the
problem and a twin that does not (long delta chains, files past the last commit, storage waste, checksum files
that are not checksums)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from pyspark.sql import functions as F

import state_reader
from tests.support.keyed_queries import BATCHES, kinds, run_keyed
from tests.support.paths import ROOT
from tests.support.streaming_queries import ROCKSDB


def test_long_chain_when_snapshots_are_not_written(spark, tmp_path):
    agg = lambda df: df.groupBy("k").agg(F.sum("v").alias("total"))  # noqa: E731
    problem = run_keyed(
        spark, tmp_path, "no_snapshots", agg, confs={"spark.sql.streaming.stateStore.minDeltasForSnapshot": "1000"}
    )
    healthy = run_keyed(spark, tmp_path, "snapshots", agg)
    found = [f for f in state_reader.diagnose(problem, thresholds={"long-chain": 8}).findings if f.kind == "long-chain"]
    assert found and found[0].evidence["chain"] >= BATCHES, found
    assert found[0].evidence["snapshot_version"] is None
    assert "no snapshot" in found[0].summary and "none" not in found[0].summary, found[0].summary
    assert "long-chain" not in kinds(healthy, **{"long-chain": 8})


@pytest.mark.parametrize("name", ["agg_window", "rocksdb_cl_agg_window"])
def test_files_past_the_last_commit(checkpoints, tmp_path, name):
    """A user who removes the last commit to reprocess that batch (or rolls a checkpoint back) leaves its
    state files behind: doctor names them, their versions and batches. The untouched checkpoint has none."""
    healthy = Path(checkpoints(name))
    assert "files-past-commit" not in kinds(str(healthy))
    last = max(int(p.name) for p in (healthy / "commits").iterdir() if p.name.isdigit())
    version = last + 1  # the state files of batch `last` are those of version last + 1

    def without(log_dirs: tuple[str, ...], to: str) -> Path:
        copy = tmp_path / to
        shutil.copytree(healthy, copy)
        for log in log_dirs:
            for entry in (copy / log / str(last), copy / log / f".{last}.crc"):
                entry.unlink(missing_ok=True)
        return copy

    # the commit removed, the offsets kept: the query runs the batch again from them
    reprocess = without(("commits",), "reprocess")
    written = [p for p in (reprocess / "state" / "0").rglob(f"{version}.*") if not p.name.startswith(".")]
    assert written, "the last batch wrote no state file"
    found = [f for f in state_reader.diagnose(str(reprocess)).findings if f.kind == "files-past-commit"]
    assert len(found) == 1 and found[0].severity == "info", found
    evidence = found[0].evidence
    assert evidence["versions"] == [version] and evidence["batches"] == [last], evidence
    assert evidence["last_committed_batch"] == last - 1 and evidence["planned_batches"] == [last]
    assert evidence["files"] >= len(written) and evidence["bytes"] > 0
    assert all(f"/{version}." in e or "/SSTs/" in e for e in evidence["examples"]), evidence
    # commit and offsets both removed (a rolled-back checkpoint): nothing will run that batch as it was
    rolled_back = without(("commits", "offsets"), "rolled_back")
    diagnosis = state_reader.diagnose(str(rolled_back))
    found = [f for f in diagnosis.findings if f.kind == "files-past-commit"]
    assert len(found) == 1 and found[0].severity == "warning" and not diagnosis.healthy, found
    assert found[0].evidence["versions"] == [version] and found[0].evidence["planned_batches"] == []
    assert f"version {version}" in found[0].summary and "delete" in found[0].action, found[0]
    assert "uncommitted-batch" not in {f.kind for f in diagnosis.findings}


WITHOUT_MAINTENANCE = """
import sys
from pathlib import Path
from tests.support.spark_session import build_session
from tests.support.streaming_queries import ROCKSDB, Query, run_query
from tests.support.keyed_queries import SCHEMA, keyed_rows, new_keys

# maintenance (snapshots, cleanup) runs on a timer started once per executor: this session's never fires
spark = build_session(extra={"spark.sql.streaming.stateStore.maintenanceInterval": "1h"})
query = Query(lambda df: df.dropDuplicates(["k"]), output_mode="append", schema=SCHEMA,
              confs={**ROCKSDB, "spark.sql.streaming.minBatchesToRetain": "2"}, batches=keyed_rows(new_keys))
print(run_query(spark, query, Path(sys.argv[1])))
spark.stop()
"""


def test_storage_waste_when_cleanup_does_not_run(spark, tmp_path):
    script = tmp_path / "no_maintenance.py"
    script.write_text(WITHOUT_MAINTENANCE)
    # the suite's environment puts the repository's root on PYTHONPATH, for the tests package
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "stale")],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    problem = done.stdout.strip().splitlines()[-1]
    healthy = run_keyed(
        spark,
        tmp_path,
        "cleaned",
        lambda df: df.dropDuplicates(["k"]),
        output_mode="append",
        confs={**ROCKSDB, "spark.sql.streaming.minBatchesToRetain": "2"},
    )
    found = [f for f in state_reader.diagnose(problem).findings if f.kind == "storage-waste"]
    assert found and found[0].evidence["files"] >= 10, found
    assert "storage-waste" not in kinds(healthy)


@pytest.mark.parametrize(("name", "severity"), [("agg_window", "info"), ("rocksdb_v2_agg_window", "warning")])
def test_checksum_files_that_are_lfs_pointers(checkpoints, tmp_path, caplog, name, severity):
    """.crc files held as Git LFS pointers are a finding of their own, not damage: the state is read and
    every other check runs. Spark's own .crc files (checkpoint format 2) as pointers are a warning, as
    Spark fails to load the files beside them; Hadoop's, which Spark reads past, are info. The
    untouched checkpoint has no such finding."""
    from tests.support.damage import checksums_as_lfs_pointers

    healthy = checkpoints(name)
    assert "malformed-checksum-file" not in kinds(healthy)
    copy = tmp_path / "cp"
    shutil.copytree(healthy, copy)
    replaced = {str(p) for p in checksums_as_lfs_pointers(copy)}
    with caplog.at_level("WARNING", logger="state_reader.io"):
        diagnosis = state_reader.diagnose(str(copy))
    assert not [r for r in caplog.records if r.name == "state_reader.io"], "a finding, not a warning as well"
    found = [f for f in diagnosis.findings if f.kind == "malformed-checksum-file"]
    assert len(found) == 1 and found[0].severity == severity, diagnosis.findings
    evidence = found[0].evidence
    assert evidence["examples"] and set(evidence["examples"]) <= replaced, evidence
    assert evidence["checksum_files"] >= len(evidence["examples"])
    assert (evidence["spark_checksum_files"] > 0) == (severity == "warning"), evidence
    assert "Git LFS pointer" in found[0].summary and "nothing says they are damaged" in found[0].summary
    assert "git lfs pull" in found[0].action
    assert "unreadable-store" not in {f.kind for f in diagnosis.findings}
    assert not any("not read" in c for c in diagnosis.checked), diagnosis.checked
    assert {f.kind for f in diagnosis.findings} - {"malformed-checksum-file"} == kinds(healthy)
