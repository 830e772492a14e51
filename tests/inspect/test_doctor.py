"""``doctor`` as a whole: its exit codes, JSON and thresholds, and every fixture operator looked at without
failing. The checks themselves, each with a real query that has the problem and a twin that does not, are in
``test_doctor_files.py`` (the files) and ``test_doctor_state.py`` (the logs and the state)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter

import pytest

import state_reader
from tests.support import latency_fs
from tests.support.keyed_queries import run_keyed, windowed


def test_cli_exit_codes_json_and_thresholds(spark, tmp_path):
    problem = run_keyed(spark, tmp_path, "complete", windowed, output_mode="complete")
    healthy = run_keyed(spark, tmp_path, "update", windowed)
    exe = [sys.executable, "-m", "state_reader"]
    proc = subprocess.run([*exe, "doctor", problem, "--json"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 3, proc.stderr
    report = json.loads(proc.stdout)
    assert {f["kind"] for f in report["findings"]} >= {"expired-rows"}
    assert all(f["severity"] in ("error", "warning", "info") for f in report["findings"])
    proc = subprocess.run([*exe, "doctor", healthy], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "nothing found" in proc.stdout, proc.stdout + proc.stderr
    proc = subprocess.run(
        [*exe, "doctor", healthy, "--threshold", "skw=2"], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 1 and "skew" in proc.stderr  # names the threshold it may have meant
    table = state_reader.diagnose(problem).table()
    assert set(table.column_names) >= {"kind", "severity", "operator_id", "store_name", "evidence", "action"}


def test_doctor_on_every_fixture_operator_does_not_fail(checkpoints):
    """Every operator the tests write, both providers: doctor runs through and says what it checked."""
    for name in (
        "agg_window",
        "rocksdb_cl_agg_window",
        "session_window",
        "join_inner",
        "rocksdb_cl_multi",
        "apply_in_pandas",
        "tws",
    ):
        diagnosis = state_reader.diagnose(checkpoints(name))
        assert diagnosis.checked and not any("not read" in c for c in diagnosis.checked), (name, diagnosis.checked)


@pytest.mark.parametrize("bad", [{"skew": "x"}, {"nope": 1}])
def test_bad_thresholds_are_refused(checkpoints, bad):
    with pytest.raises(state_reader.InvalidOptionError):
        state_reader.diagnose(checkpoints("agg_window"), thresholds=bad)


@pytest.mark.parametrize("name", ["agg_window", "rocksdb_cl_agg_window", "rocksdb_v2_agg_window"])
def test_doctor_on_an_object_store_fetches_each_file_once(checkpoints, name):
    """Through a filesystem that counts each request: the doctor's checks share the read's listing and its
    files. It lists no more than a read does (and ``state/``), fetches no file twice, and of the state
    fetches only what a read of the latest batch fetches, plus what names the files of the retained
    batches before it (their snapshot zips' SSTs, a format 2 changelog's lineage), from which the
    files no batch needs are told."""
    fs = latency_fs.LatencyFileSystem
    remote = latency_fs.register(0.0)
    path = checkpoints(name)
    local = state_reader.diagnose(path).as_dict()

    def fetched() -> Counter:
        return Counter(p.split(path, 1)[1].lstrip("/") for kind, p in fs.paths if kind == "get")

    fs.reset()
    state_reader.read_state(remote + path)
    read = set(fetched())
    read_lists = fs.calls["list"]
    fs.reset()
    diagnosis = state_reader.diagnose(remote + path).as_dict()
    assert {**diagnosis, "checkpoint": None} == {**local, "checkpoint": None}
    gets = fetched()
    assert max(gets.values()) == 1, sorted(p for p, n in gets.items() if n > 1)
    assert fs.calls["list"] <= read_lists + 1 and fs.calls["info"] == 0, fs.paths
    beyond = {p for p in gets if p.startswith("state/")} - read
    assert {p.removesuffix(".crc").rsplit(".", 1)[-1] for p in beyond} <= {"zip", "changelog"}, beyond
    if name == "agg_window":  # HDFS: the deltas and snapshots of the latest batch alone
        assert not beyond, beyond


def test_a_join_that_scans_many_rows_at_eviction_gets_the_format_4_command(tmp_path):
    """The suggestion's command runs as given, and the join it writes (format 4) gets no suggestion; nor does
    a small join (the default threshold)."""
    import shlex
    import shutil

    from state_reader.model.conf import CONF_JOIN_FORMAT
    from tests.support.cli import run as cli_run
    from tests.support.paths import GOLDEN

    hdfs, rocksdb = tmp_path / "hdfs", tmp_path / "rocksdb"
    shutil.copytree(GOLDEN / "spark-4.0.5" / "join_inner_hdfs", hdfs)
    shutil.copytree(GOLDEN / "spark-4.0.5" / "join_left_outer_rocksdb_cl", rocksdb)
    low = {"join-eviction-rows": 1}

    def suggested(path) -> list:
        found = state_reader.diagnose(str(path), thresholds=low).findings
        return [f for f in found if f.kind == "join-format-upgrade"]

    (found,) = suggested(hdfs)
    assert found.severity == "info" and found.evidence["rows"] > 0
    assert found.evidence["command"].endswith(f"--conf {CONF_JOIN_FORMAT}=4 --provider rocksdb")
    (found,) = suggested(rocksdb)
    command = shlex.split(found.evidence["command"])
    assert command[:3] == ["state-reader", "rewrite", str(rocksdb)]
    assert command[-2:] == ["--conf", f"{CONF_JOIN_FORMAT}=4"]
    done = cli_run(*command[1:])
    assert done.returncode == 0, done.stderr
    assert not suggested(command[3])
    assert not [f for f in state_reader.diagnose(str(rocksdb)).findings if f.kind == "join-format-upgrade"]
