"""The `state-reader` command line against real checkpoints: in this process through the console script's
entry point (tests.support.cli.run), held here to what the installed console script does."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.compute as pc
import pytest

import state_reader
from tests.support.cli import assert_one_line_error, console_script, png_size, run, run_json, run_process
from tests.support.damage import without_schema_files

# -- overview ------------------------------------------------------------------


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


@pytest.mark.parametrize(
    "args",
    [
        ("overview", "{agg}"),
        ("show", "{agg}", "-n", "2", "--json"),
        ("stats", "{agg}", "--from", "0", "--batches", "0..1"),  # a deprecated flag with its replacement
        ("show", "{agg}", "--batch", "99"),
        ("show", "{agg}", "--no-such-option"),
        ("stats", "{agg}", "--batches", "0..1"),  # a warning on stderr
    ],
)
def test_the_commands_run_here_are_what_the_console_script_does(agg, args):
    """What :func:`run` gives in this process is what the installed console script gives: exit code,
    stdout and stderr, warnings included (a test that rests on it tests the command line)."""
    argv = [a.format(agg=agg) for a in args]
    here, there = run(*argv), run_process(*argv)
    assert (here.returncode, here.stdout, here.stderr) == (there.returncode, there.stdout, there.stderr)


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


def test_a_store_without_schema_file_shows_with_the_schema_flags(agg, tmp_path):
    (stored,) = run_json("schema", agg)["stores"]  # struct<...> text, which the flags take as it is
    cp = tmp_path / "cp"
    shutil.copytree(agg, cp)
    assert without_schema_files(cp)
    assert_one_line_error(run("show", cp), "_metadata/schema does not exist", "--key-schema", "--value-schema")
    flags = ("--key-schema", stored["key"], "--value-schema", stored["value"])
    doc = run_json("show", cp, *flags, "--limit", "0")
    assert doc["rows"] == run_json("show", agg, "--limit", "0")["rows"] and doc["row_count"] > 0
    changes = run_json("changes", cp, "--from", "1", *flags, "--limit", "0")
    assert changes["rows"] == run_json("changes", agg, "--from", "1", "--limit", "0")["rows"]
    # a schema the rows cannot hold: the error names it as the flag it came from
    wide = stored["value"].removesuffix(">") + ",extra:bigint>"
    proc = run("show", cp, "--key-schema", stored["key"], "--value-schema", wide)
    assert_one_line_error(proc, f"--value-schema '{wide}'", "needs at least")
    assert_one_line_error(run("show", cp, "--key-schema", stored["key"]), "--value-schema", "must be specified")


@pytest.fixture(scope="module")
def schemaless(agg, tmp_path_factory) -> tuple[str, tuple[str, ...]]:
    """A copy of ``agg`` without its schema files, and the flags that give its schemas."""
    (stored,) = run_json("schema", agg)["stores"]
    cp = tmp_path_factory.mktemp("schemaless") / "cp"
    shutil.copytree(agg, cp)
    assert without_schema_files(cp)
    return str(cp), ("--key-schema", stored["key"], "--value-schema", stored["value"])


# what each command that reads a store says of it, without the paths that differ between two copies
READERS = {
    # the timelines (a schema in DDL carries no watermark mark, which the verdict reads from the schema file)
    "why": (["-k", "user = 'ann'"], lambda doc: [(k["key"], k["timeline"]) for k in doc["keys"]]),
    "stats": (["--from", "1", "--to", "2"], lambda doc: (doc["summary"], doc["partitions"])),
    "plot": (["--out", "{tmp}/state.png"], lambda doc: (doc["width"], doc["height"], doc["stores"], doc["batches"])),
    "verify": ([], lambda doc: (doc["ok"], doc["versions_checked"], doc["versions_ok"], doc["problems"])),
    "doctor": ([], lambda doc: sorted(f["kind"] for f in doc["findings"])),
    "rewrite": (["--dry-run"], lambda doc: (doc["batch_id"], doc["current"], doc["new"])),
}


@pytest.mark.parametrize("command", sorted(READERS))
def test_every_command_that_reads_a_store_takes_the_schema_flags(agg, schemaless, tmp_path, command):
    cp, given = schemaless
    args, shown = READERS[command]
    args = [a.format(tmp=tmp_path) for a in args]
    if command in ("verify", "doctor"):
        # they report a store they cannot read rather than fail: the report names the flags
        proc = run(command, cp, *args, "--json")
        assert proc.returncode in (2, 3), proc.stderr
        doc = json.loads(proc.stdout)
        (told,) = [p["message"] for p in doc["problems"]] if command == "verify" else [doc["findings"][0]["summary"]]
        assert "_metadata/schema does not exist" in told and "--key-schema" in told and "--value-schema" in told
        assert "keySchema" not in told and "key_schema" not in told, told
    else:
        proc = run(command, cp, *args)
        assert_one_line_error(proc, "_metadata/schema does not exist", "--key-schema", "--value-schema")
        # the advice in the command line's words alone
        for other in ("keySchema", "key_schema", "in Python"):
            assert other not in proc.stderr, proc.stderr
    assert shown(run_json(command, cp, *args, *given)) == shown(run_json(command, agg, *args))


def test_a_checkpoint_without_schema_files_is_rewritten_with_the_schema_flags(agg, schemaless, tmp_path):
    cp, given = schemaless
    out = tmp_path / "out"
    proc = run("rewrite", cp, out, "--partitions", "3", *given)
    assert proc.returncode == 0, proc.stderr
    assert (
        run_json("show", out, "--limit", "0", *given)["row_count"] == run_json("show", agg, "--limit", "0")["row_count"]
    )
    # --operator and --store name the store the schemas describe; a store that is not there is refused
    assert run_json("rewrite", cp, "--dry-run", "-O", "0", "-s", "default", *given)["batch_id"] >= 0
    proc = run("rewrite", cp, "--dry-run", "--store", "nope", *given)
    assert_one_line_error(proc, "--store", "has no store 'nope'")


# -- one JSON shape per command, as docs/cli.md lists it ------------------------------------------


def _documented_shapes() -> dict[str, list[str]]:
    import re

    from tests.support.paths import DOCS

    text = (DOCS / "cli.md").read_text()
    table = text[text.index("<!-- json shapes") : text.index("<!-- end of json shapes -->")]
    shapes = {}
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 2 and cells[0].startswith("`"):
            shapes[cells[0].strip("`")] = re.findall(r"`([^`]+)`", cells[1])
    return shapes


def test_every_commands_json_has_the_documented_fields(agg, tmp_path):
    shapes = _documented_shapes()
    invocations = {
        "overview": [agg],
        "show": [agg],
        "stats": [agg, "--from", "1", "--to", "2"],
        "changes": [agg, "--from", "1"],
        "export": [agg, "--out", tmp_path / "state.parquet"],
        "verify": [agg],
        "doctor": [agg],
        "schema": [agg],
        "schema-diff": [agg, agg],
        "rewrite": [agg, "--dry-run", "--partitions", "3"],
        "plot": [agg, "--out", tmp_path / "state.png"],
        "why -k": [agg, "--key-filter", "window.start > '1970-01-01'"],
        "why": [agg],  # every key's verdict, summed up
    }
    assert set(shapes) == set(invocations), "a JSON shape documented for every command, and each one run"
    for command, args in invocations.items():
        proc = run(command.split()[0], *args, "--json")
        assert proc.returncode in (0, 3), (command, proc.stderr)  # doctor exits 3 on a finding
        assert list(json.loads(proc.stdout)) == shapes[command], command


# -- errors ------------------------------------------------------------------------


def test_bad_input_exits_1_with_one_line(agg, tmp_path):
    assert_one_line_error(run("overview", tmp_path / "missing"), "does not exist")
    assert_one_line_error(run("show", agg, "--batch", "99"), "--batch 99")
    assert_one_line_error(run("show", agg, "--key-filter", "nope = 1"), "nope", "key fields")
    assert_one_line_error(run("show", agg, "--partition", "7"), "partition 7")
    assert_one_line_error(run("show", agg, "--operator", "3"), "operator 3")
    assert_one_line_error(run("stats", agg, "--from", "5", "--to", "2"), "--to cannot be smaller than --from")
    assert_one_line_error(run("export", agg, "--out", tmp_path / "out.xlsx"), ".parquet")
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
    text = run("stats", agg, "--from", committed[1], "--to", committed[3], "--detail").stdout
    assert "stateStoreSave" in text and "skew at batch" in text and "largest/median" in text
    assert "every batch and partition" in text
    assert f"over batches {committed[1]}..{committed[3]}" in text


# -- export ------------------------------------------------------------------------------


# -- verify ----------------------------------------------------------------------------------


# -- plot ---------------------------------------------------------------------------------------


# -- change feed ----------------------------------------------------------------------------------


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


@pytest.mark.parametrize("name", ["join_inner", "join_v3"])
def test_reading_a_join_without_a_side_suggests_one(checkpoints, name):
    proc = run("show", checkpoints(name))
    assert_one_line_error(proc, "--join-side", "--store")


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
    assert png_size(tmp_path / "plan.png")[0] > 500
    text = run("rewrite", agg, "--partitions", "5", "--dry-run")
    assert text.returncode == 0 and "nothing written" in text.stdout and "skew (max/median)" in text.stdout
    # most of 40 partitions get no row: the median is empty, and a ratio to it says nothing
    text = run("rewrite", agg, "--partitions", "40", "--dry-run")
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


def test_ctrl_c_on_follow_exits_130(agg):
    """An interrupted command exits as shells report an interrupt (128 + SIGINT), not as an error."""
    import signal
    import time

    proc = subprocess.Popen(
        [sys.executable, "-m", "state_reader", "changes", agg, "--follow"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        line = ""
        while "following" not in line and time.monotonic() < deadline:
            line = proc.stderr.readline()
        assert "following" in line, "the follower did not start"
        time.sleep(1)  # past the first reads, into the polling
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 130
    finally:
        proc.kill()
        proc.communicate()
