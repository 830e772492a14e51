"""The `state-reader` console script, run as a subprocess against real checkpoints."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv
import pyarrow.parquet as pq
import pytest

import state_reader
from tests.support.cli import assert_one_line_error, console_script, run, run_json
from tests.support.oracle import arrow_rows
from tests.support.paths import GOLDEN

SPARK35 = GOLDEN / "spark-3.5.8"


@pytest.fixture(scope="module")
def agg(checkpoints) -> str:
    return checkpoints("agg_window")


# -- overview ------------------------------------------------------------------


def test_overview_text_and_json(agg):
    proc = run("overview", agg)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""  # no progress bar or colour codes in a pipe
    assert "\x1b[" not in proc.stdout
    for fragment in ("stateStoreSave", "hdfs", "codec lz4", "aggregation v2", "recorded"):
        assert fragment in proc.stdout
    info = run_json("overview", agg)
    committed = sorted(int(n) for n in os.listdir(os.path.join(agg, "commits")) if n.isdigit())
    assert info["batches"] == {
        "first": committed[0],
        "last": committed[-1],
        "count": len(committed),
        "latest_committed": committed[-1],
    }
    assert info["provider"] == "hdfs" and info["codec"] == "lz4"
    assert info["state_format_versions"]["aggregation"] == 2
    assert info["shuffle_partitions"] == 2
    [op] = info["operators"]
    assert op["operator_id"] == 0 and op["operator_name"] == "stateStoreSave"
    assert op["stores"] == [{"store_name": "default", "num_partitions": 2}]
    assert op["partitions_on_disk"] == 2


def test_metadata_is_a_hidden_alias_of_overview(agg):
    """`metadata`, the command's earlier name, prints what `overview` prints and is not listed."""
    overview, metadata = run("overview", agg), run("metadata", agg)
    assert metadata.returncode == 0, metadata.stderr
    assert metadata.stdout == overview.stdout and "stateStoreSave" in metadata.stdout
    assert run_json("metadata", agg) == run_json("overview", agg)
    listed = run("--help").stdout.split("Commands:")[1].split()
    assert "overview" in listed and "metadata" not in listed
    assert "Usage: state-reader metadata" in run("metadata", "--help").stdout


def test_cheap_commands_import_only_what_they_use(agg):
    """A cold start is mostly imports: `overview` on a local checkpoint loads no pandas, numba, pyspark,
    fsspec or pyarrow.compute, `--help` no numpy either."""
    probe = (
        "import sys; from state_reader.fronts.cli import main; code = main(sys.argv[1:]); "
        "print(sorted(m for m in ('pandas', 'numba', 'pyspark', 'numpy', 'pyarrow', 'pyarrow.compute', "
        "'fsspec', 'matplotlib') if m in sys.modules))"
    )
    loaded = {}
    for args in (["overview", agg], ["--help"]):
        proc = subprocess.run([sys.executable, "-c", probe, *args], capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        loaded[args[0]] = proc.stdout.strip().splitlines()[-1]
    assert loaded["overview"] == "['numpy', 'pyarrow']"
    assert loaded["--help"] == "[]"


def test_overview_before_spark_4_is_inferred():
    info = run_json("overview", SPARK35 / "session_window_hdfs")
    assert info["operator_metadata"].startswith("inferred")
    assert [o["operator_name"] for o in info["operators"]] == ["sessionWindowStateStoreSaveExec"]
    joins = run_json("overview", SPARK35 / "join_inner_hdfs")
    assert sorted(s["store_name"] for s in joins["operators"][0]["stores"]) == [
        "left-keyToNumValues",
        "left-keyWithIndexToValue",
        "right-keyToNumValues",
        "right-keyWithIndexToValue",
    ]
    text = run("overview", SPARK35 / "agg_window_rocksdb").stdout
    assert "rocksdb" in text and "inferred from files" in text


# -- show ------------------------------------------------------------------------


def test_show_matches_read_state(agg):
    expected = state_reader.read_state(agg)
    doc = run_json("show", agg, "--limit", "0")
    assert doc["row_count"] == expected.num_rows and not doc["truncated"]
    assert doc["batch_id"] == max(int(n) for n in os.listdir(os.path.join(agg, "commits")) if n.isdigit())
    users = sorted(str(r["key"]["user"]) for r in doc["rows"])
    assert users == sorted(str(u) for u in pc.struct_field(expected.column("key"), [1]).to_pylist())
    # nested keys flattened to dotted columns in the text table
    text = run("show", agg, "--limit", "0", "--layout", "table").stdout
    assert "key.window.start" in text and "key.user" in text and "partition_id" in text
    assert f"{expected.num_rows} rows" in text


def test_show_filters_limits_and_records(agg):
    expected = state_reader.read_state(agg, batch_id=2, key_filter="user = 'ann'")
    assert expected.num_rows > 0
    doc = run_json("show", agg, "--batch", "2", "--key-filter", "user = 'ann'", "--limit", "0")
    assert doc["row_count"] == expected.num_rows
    assert {r["key"]["user"] for r in doc["rows"]} == {"ann"}
    one = run_json("show", agg, "--partition", "1", "--limit", "0")
    assert {r["partition_id"] for r in one["rows"]} == {1}
    limited = run_json("show", agg, "--limit", "2")
    # one meaning in show and changes: row_count counts the result (unknown when the limit stopped the read),
    # rows_shown the rows listed
    assert limited["rows_shown"] == 2 and limited["row_count"] is None and limited["truncated"]
    few = run_json("changes", agg, "--from", "1", "--to", "3", "--limit", "2")
    assert few["rows_shown"] == 2 and few["row_count"] == state_reader.changes(agg, 1, 3).num_rows > 2
    records = run("show", agg, "--limit", "1", "--layout", "records").stdout
    assert "row 1" in records and "key.window.end" in records and "there are more" in records


# -- errors ------------------------------------------------------------------------


def test_bad_input_exits_1_with_one_line(agg, tmp_path):
    assert_one_line_error(run("overview", tmp_path / "missing"), "does not exist")
    assert_one_line_error(run("show", agg, "--batch", "99"), "--batch 99")
    assert_one_line_error(run("show", agg, "--key-filter", "nope = 1"), "nope", "key fields")
    assert_one_line_error(run("show", agg, "--partition", "7"), "partition 7")
    assert_one_line_error(run("show", agg, "--operator", "3"), "operator 3")
    assert_one_line_error(run("stats", agg, "--batches", "5..2"), "end is before the start")
    assert_one_line_error(run("export", agg, "--to", tmp_path / "out.xlsx"), ".parquet")
    assert_one_line_error(run("show", agg, "--no-such-option"), "--no-such-option")
    # --json: a parseable error object too; --debug: the traceback
    proc = run("show", agg, "--batch", "99", "--json")
    assert json.loads(proc.stdout)["error"]["class"] == "STDS_COMMITTED_BATCH_UNAVAILABLE"
    debug = run("show", agg, "--batch", "99", "--debug")
    assert debug.returncode == 1 and "Traceback" in debug.stderr


def test_python_dash_m_and_help():
    proc = subprocess.run(
        [sys.executable, "-m", "state_reader", "--version"], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0 and state_reader.__version__ in proc.stdout
    bare = run()
    assert bare.returncode == 0 and "overview" in bare.stdout and "verify" in bare.stdout


# -- stats ---------------------------------------------------------------------------


def test_stats_text_and_json(agg):
    doc = run_json("stats", agg)
    committed = sorted(int(n) for n in os.listdir(os.path.join(agg, "commits")) if n.isdigit())
    assert doc["batches"] == committed
    assert len(doc["summary"]) == len(committed)
    assert len(doc["partitions"]) == 2 * len(committed)
    last = doc["summary"][-1]
    assert last["rows"] == state_reader.read_state(agg).num_rows
    assert last["max_partition_rows"] == max(p["rows"] for p in doc["partitions"] if p["batch_id"] == committed[-1])
    text = run("stats", agg, "--batches", f"{committed[1]}..{committed[3]}", "--detail").stdout
    assert "stateStoreSave" in text and "skew at batch" in text and "largest/median" in text
    assert "every batch and partition" in text
    assert f"over batches {committed[1]}..{committed[3]}" in text


# -- export ------------------------------------------------------------------------------


def test_export_parquet_csv_jsonl(agg, tmp_path):
    expected = state_reader.read_state(agg)
    out = tmp_path / "state.parquet"
    doc = run_json("export", agg, "--to", out)
    assert doc["rows"] == expected.num_rows and doc["format"] == "parquet"
    assert arrow_rows(pq.read_table(out)) == arrow_rows(expected)

    csv_path = tmp_path / "state.csv"
    assert run("export", agg, "--to", csv_path).returncode == 0
    table = pcsv.read_csv(csv_path)
    assert table.num_rows == expected.num_rows
    assert table.column_names[:3] == ["key.window.start", "key.window.end", "key.user"]

    jsonl = tmp_path / "state.jsonl"
    proc = run("export", agg, "--to", jsonl, "--key-filter", "user = 'bob'")
    assert proc.returncode == 0 and "wrote" in proc.stdout
    rows = [json.loads(line) for line in jsonl.read_text(encoding="utf-8").splitlines()]
    assert rows and all(r["key"]["user"] == "bob" for r in rows)
    assert len(rows) == state_reader.read_state(agg, key_filter="user = 'bob'").num_rows
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_export_json_is_one_array(agg, tmp_path):
    """A .json file holds what a user expects of one: a single JSON array of the rows (.jsonl: one a line)."""
    out = tmp_path / "q1.json"
    doc = run_json("export", agg, "--to", out, "--key-filter", "user = 'bob'")
    assert doc["format"] == "json"
    rows = json.loads(out.read_text(encoding="utf-8"))
    expected = state_reader.read_state(agg, key_filter="user = 'bob'")
    assert isinstance(rows, list) and len(rows) == doc["rows"] == expected.num_rows > 0
    jsonl = tmp_path / "q1.jsonl"
    assert run("export", agg, "--to", jsonl, "--key-filter", "user = 'bob'").returncode == 0
    assert rows == [json.loads(line) for line in jsonl.read_text(encoding="utf-8").splitlines()]
    none = tmp_path / "none.out"
    assert run("export", agg, "--to", none, "--format", "json", "--key-filter", "user = 'nobody'").returncode == 0
    assert json.loads(none.read_text(encoding="utf-8")) == []


# -- verify ----------------------------------------------------------------------------------


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


# -- plot ---------------------------------------------------------------------------------------


def _png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", head
    assert head[12:16] == b"IHDR"
    return struct.unpack(">II", head[16:24])


def test_plot_writes_png(agg, tmp_path):
    out = tmp_path / "state.png"
    doc = run_json("plot", agg, "--out", out)
    width, height = _png_size(out)
    assert (width, height) == (doc["width"], doc["height"]) == (1200, 400)
    assert out.stat().st_size > 20_000  # drawn lines and labels, not an empty canvas
    two = tmp_path / "multi.png"
    assert run("plot", GOLDEN / "spark-4.0.5" / "multi_op_hdfs", "--out", two).returncode == 0
    assert _png_size(two) == (1200, 800)  # one row of charts per store


# -- change feed ----------------------------------------------------------------------------------


def test_changes_command(agg):
    full = state_reader.changes(agg, 1, 3)
    doc = run_json("changes", agg, "--from", "1", "--to", "3", "--limit", "0")
    assert doc["row_count"] == full.num_rows > 0
    assert {r["batch_id"] for r in doc["rows"]} <= {1, 2, 3}
    assert sum(c["rows"] for c in doc["counts"]) == full.num_rows
    assert [r["batch_id"] for r in doc["rows"]] == sorted(r["batch_id"] for r in doc["rows"])
    text = run("changes", agg, "--from", "1", "--to", "3").stdout
    assert "changes in batches 1..3" in text and "batch 1:" in text
    assert_one_line_error(run("changes", agg, "--from", "4", "--to", "2"), "--to cannot be smaller than --from")


# -- progress --------------------------------------------------------------------------------------


def test_progress_bar_only_on_a_terminal(agg):
    pty = pytest.importorskip("pty")
    quiet = run("verify", agg, env={"STATE_READER_PROGRESS_DELAY": "0"})
    assert quiet.returncode == 0 and quiet.stderr == ""
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [*console_script(), "verify", agg],
        stdin=follower,
        stdout=follower,
        stderr=follower,
        env={**os.environ, "STATE_READER_PROGRESS_DELAY": "0", "STATE_READER_PROGRESS": "", "COLUMNS": "120"},
    )
    os.close(follower)
    chunks = []
    try:
        while True:  # read while it runs: a full terminal buffer would block it
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(leader)
        proc.wait(timeout=300)
    screen = b"".join(chunks).decode("utf-8", "replace")
    assert proc.returncode == 0
    assert "verifying" in screen and "OK:" in screen


def test_export_api_matches_table(agg, tmp_path):
    from state_reader.core.options import from_kwargs
    from state_reader.core.planner import plan_state_read
    from state_reader.inspect.export import export_state

    plan = plan_state_read(from_kwargs(agg, {"batch_id": 1}))
    result = export_state(
        plan, str(tmp_path / "b1.parquet"), key_filter=lambda k: pc.is_valid(k.field("user")), show_progress=False
    )
    expected = state_reader.read_state(agg, batch_id=1)
    expected = expected.filter(pc.is_valid(pc.struct_field(expected.column("key"), [1])))
    assert result.rows == expected.num_rows
    assert arrow_rows(pq.read_table(tmp_path / "b1.parquet")) == arrow_rows(expected)
    assert isinstance(pq.read_table(tmp_path / "b1.parquet").schema, pa.Schema)


# -- joins with column families ----------------------------------------------------------------


@pytest.mark.parametrize("name", ["join_v3", "join_v4"])
def test_join_column_families_in_stats_verify_and_show(checkpoints, name):
    path = checkpoints(name)
    families = {
        "join_v3": [
            "left-keyToNumValues",
            "left-keyWithIndexToValue",
            "right-keyToNumValues",
            "right-keyWithIndexToValue",
        ],
        "join_v4": ["left-keyWithTsToValues", "left-tsWithKey", "right-keyWithTsToValues", "right-tsWithKey"],
    }[name]
    # each join store is measured and verified on its own, although all live in one RocksDB store
    doc = run_json("stats", path)
    assert sorted({p["store_name"] for p in doc["partitions"]}) == sorted(families)
    last = max(doc["batches"])
    for store in families:
        rows = sum(p["rows"] for p in doc["partitions"] if p["store_name"] == store and p["batch_id"] == last)
        assert rows == state_reader.read_state(path, store_name=store).num_rows
    report = run_json("verify", path)
    assert report["ok"] and sorted(s["store_name"] for s in report["stores"]) == sorted(families)
    side = run_json("show", path, "--join-side", "left", "--limit", "0")
    assert side["store_name"] == "joinSide=left"
    assert side["row_count"] == state_reader.read_state(path, join_side="left").num_rows > 0
    assert all("matched" not in r["value"] for r in side["rows"])


@pytest.mark.parametrize("name", ["agg_window", "rocksdb_cl_agg_window"])
def test_show_with_a_limit_does_not_hide_an_unreadable_partition(checkpoints, tmp_path, name):
    import shutil

    cp = tmp_path / name
    shutil.copytree(checkpoints(name), cp)
    latest = max(int(p.name) for p in (cp / "commits").iterdir() if p.name.isdigit())
    version = latest + 1
    last = cp / "state" / "0" / "1"
    removed = [
        p
        for p in last.iterdir()
        if p.name.split(".")[0] == str(version) or p.name.lstrip(".").split(".")[0] == str(version)
    ]
    assert removed
    for p in removed:
        p.unlink()
    for limit in ("1", "3", "10"):
        proc = run("show", cp, "--limit", limit)
        assert_one_line_error(proc, str(last))


def test_errors_name_the_flags_that_were_typed(agg):
    assert_one_line_error(run("show", agg, "--batch", "-1"), "--batch cannot be negative")
    proc = run("changes", agg, "--from", "4", "--to", "2")
    assert_one_line_error(proc, "--to", "--from")
    assert "changeEndBatchId" not in proc.stderr
    proc = run("show", agg, "--key-filter", "nope=")
    assert_one_line_error(proc, "--key-filter")
    assert "key_filter" not in proc.stderr


def test_one_name_for_a_state_variable_and_errors_name_the_flag_typed(agg):
    """--state-var-name is the state variable's flag, as state_var_name and stateVarName are its names in Python
    and Spark; --state-var, its earlier spelling, still works, and an error names the flag the user typed.
    The keys a rewrite drops come as --drop-keys (drop_keys in Python), and that is what their errors name."""
    for command in ("show", "changes", "export"):
        shown = run(command, "--help").stdout
        assert "--state-var-name" in shown and "--state-var " not in shown and "--state-var," not in shown, shown
    for flag in ("--state-var-name", "--state-var"):
        proc = run("show", agg, flag, "count")
        assert_one_line_error(proc, f"Invalid value for {flag}: Providing state variable names")
        assert "stateVarName" not in proc.stderr
    assert_one_line_error(run("changes", agg, "--from", "1", "--state-var=count"), "Invalid value for --state-var:")
    proc = run("rewrite", agg, "--dry-run", "--drop-keys", "nope = 1")
    assert_one_line_error(proc, "Invalid value for --drop-keys: key field nope does not exist")
    assert "--key-filter" not in proc.stderr and "key_filter" not in proc.stderr
    with pytest.raises(state_reader.InvalidOptionError, match="option 'drop_keys': key field nope") as caught:
        state_reader.rewrite(agg, None, dry_run=True, drop_keys="nope = 1")
    assert "key_filter" not in str(caught.value)


@pytest.mark.parametrize("name", ["join_inner", "join_v3"])
def test_reading_a_join_without_a_side_suggests_one(checkpoints, name):
    proc = run("show", checkpoints(name))
    assert_one_line_error(proc, "--join-side", "--store")


def test_overview_reports_what_the_checkpoint_has(checkpoints):

    agg = run_json("overview", checkpoints("agg_window"))
    assert agg["state_format_versions"] == {"aggregation": 2}  # not the join and fmgws confs every query records
    assert agg["row_checksum"] is False and agg["changelog_checkpointing"] is None
    assert agg["operators"][0]["batches"]["last"] == agg["batches"]["latest_committed"]
    rocks = run_json("overview", checkpoints("rocksdb_cl_agg_window"))
    assert rocks["changelog_checkpointing"] is True and rocks["checkpoint_format_version"] == 1
    # format 2 is not in the offset log's confs: the commit log's unique ids tell
    assert run_json("overview", checkpoints("rocksdb_v2_agg_window"))["checkpoint_format_version"] == 2
    golden = GOLDEN / "spark-3.5.8"
    names = {op["operator_name"] for op in run_json("overview", golden / "multi_op_hdfs")["operators"]}
    assert "dedupeWithinWatermark" in names
    assert run_json("overview", golden / "dedup_hdfs")["operators"][0]["operator_name"] == "dedupe"


def test_hdfs_without_its_libraries_is_one_line():
    proc = run("show", "hdfs://namenode:8020/checkpoint", env={"JAVA_HOME": "/nonexistent-java"})
    assert_one_line_error(proc, "hdfs:// needs pyarrow's HDFS client", "webhdfs://")


# -- rewrite ----------------------------------------------------------------------------------


def test_rewrite_dry_run_then_rewrite(agg, tmp_path):
    before = sorted((p.relative_to(agg), p.read_bytes()) for p in Path(agg).rglob("*") if p.is_file())
    plan = run_json("rewrite", agg, "--partitions", "5", "--dry-run", "--plot", tmp_path / "plan.png")
    assert plan["dry_run"] and plan["destination"] is None and plan["files"] == 0
    assert plan["current"]["partitions"] == 2 and plan["new"]["partitions"] == 5
    assert plan["new"]["rows"] == plan["current"]["rows"] > 0
    assert _png_size(tmp_path / "plan.png")[0] > 500
    text = run("rewrite", agg, "-n", "5", "--dry-run")
    assert text.returncode == 0 and "nothing written" in text.stdout and "skew (max/median)" in text.stdout
    # most of 40 partitions get no row: the median is empty, and a ratio to it says nothing
    text = run("rewrite", agg, "-n", "40", "--dry-run")
    assert text.returncode == 0 and "inf" not in text.stdout, text.stdout
    assert [line for line in text.stdout.splitlines() if "new:" in line and "of 40 partitions empty" in line]
    dst = tmp_path / "dst"
    done = run_json("rewrite", agg, dst, "--partitions", "5")
    assert not done["dry_run"] and done["files"] > 0
    # what the dry run projected is what the rewrite wrote, partition by partition
    assert done["new"] == plan["new"] and done["stores"] == plan["stores"]
    assert sorted((p.relative_to(agg), p.read_bytes()) for p in Path(agg).rglob("*") if p.is_file()) == before
    again = run("rewrite", agg, dst, "--partitions", "3")
    assert_one_line_error(again, "not empty")
    assert_one_line_error(run("rewrite", agg, "--partitions", "3"), "DESTINATION is required")
    text = run("rewrite", agg, tmp_path / "moved", "--provider", "rocksdb")
    assert text.returncode == 0 and "hdfs -> rocksdb" in text.stdout, text.stdout
    assert run_json("overview", tmp_path / "moved")["provider"] == "rocksdb"
