"""``state-reader rewrite --upsert ROWS --delete KEYS``: rows from Parquet, JSON lines and CSV files
written into a store, and the dry run's count of the keys each partition gains, replaces and loses."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq

import state_reader
from state_reader.formats.flatten import flatten_table
from tests.support.cli import assert_one_line_error, run, run_json
from tests.support.paths import GOLDEN
from tests.support.resume import digest


def _plain(value):
    """A value as JSON holds it: timestamps as ISO text, NaN as null."""
    if hasattr(value, "isoformat"):
        return value.isoformat()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, float) and value != value:
        return None
    return value


def _rows_key_set(table: pa.Table) -> list[str]:
    return sorted(json.dumps(_plain(k), sort_keys=True) for k in table.column("key").to_pylist())


def test_the_dry_run_counts_what_each_partition_gains_replaces_and_loses(agg, tmp_path):
    rows = state_reader.read_state(agg)
    pq.write_table(rows, tmp_path / "rows.parquet")
    plan = run_json("rewrite", agg, "--dry-run", "--upsert", tmp_path / "rows.parquet")
    store = plan["stores"][0]
    assert (store["gained"], store["replaced"], store["lost"]) == (0, rows.num_rows, 0)
    per_partition = [0] * plan["new"]["partitions"]
    for p in rows.column("partition_id").to_pylist():
        per_partition[p] += 1
    assert store["replaced_per_partition"] == per_partition
    text = run("rewrite", agg, "--dry-run", "--upsert", tmp_path / "rows.parquet")
    assert text.returncode == 0, text.stderr
    assert f"rows written: 0 keys gained, {rows.num_rows:,} replaced, 0 lost" in text.stdout
    assert f"partition 0 gains 0, replaces {per_partition[0]:,}, loses 0" in text.stdout


def test_json_lines_rows_and_csv_keys_are_written(agg, tmp_path):
    """Half the keys deleted (CSV, dotted column names), the other half upserted from JSON lines with
    one value changed: the new checkpoint holds exactly that."""
    before = digest(agg)
    rows = state_reader.read_state(agg)
    half = rows.num_rows // 2
    kept, gone = rows.slice(0, half), rows.slice(half)
    with open(tmp_path / "rows.jsonl", "w", encoding="utf-8") as fh:
        for i, row in enumerate(kept.to_pylist()):
            row = _plain(row)
            if i == 0:
                row["value"]["count"] += 1000
            fh.write(json.dumps(row) + "\n")
    pa_csv.write_csv(flatten_table(gone.select(["key"])), tmp_path / "keys.csv")
    dst = tmp_path / "dst"
    done = run_json(
        "rewrite", agg, dst, "--upsert", tmp_path / "rows.jsonl", "--delete", tmp_path / "keys.csv", "--operator", "0"
    )
    store = done["stores"][0]
    assert (store["gained"], store["replaced"], store["lost"]) == (0, half, rows.num_rows - half)
    after = state_reader.read_state(str(dst))
    assert _rows_key_set(after) == _rows_key_set(kept)
    counts = {json.dumps(_plain(r["key"]), sort_keys=True): r["value"]["count"] for r in after.to_pylist()}
    first = kept.to_pylist()[0]
    assert counts[json.dumps(_plain(first["key"]), sort_keys=True)] == first["value"]["count"] + 1000
    assert digest(agg) == before


def test_bad_rows_are_one_line_and_nothing_is_written(agg, tmp_path):
    rows = state_reader.read_state(agg)
    pq.write_table(rows.drop(["value"]), tmp_path / "keys-only.parquet")
    dst = tmp_path / "dst"
    assert_one_line_error(
        run("rewrite", agg, dst, "--upsert", tmp_path / "keys-only.parquet"),
        "missing column value",
        "keys-only.parquet",
    )
    assert not dst.exists()
    pq.write_table(rows, tmp_path / "rows.parquet")
    assert_one_line_error(
        run("rewrite", agg, dst, "--upsert", tmp_path / "rows.parquet", "--store", "nope"), "store 'nope'"
    )
    Path(tmp_path / "rows.txt").write_text("x")
    assert_one_line_error(run("rewrite", agg, dst, "--upsert", tmp_path / "rows.txt"), ".parquet, .jsonl")
    assert_one_line_error(run("rewrite", agg, dst, "--store", "default"), "--upsert")
    assert not dst.exists()


def test_join_side_rows_and_keys(checkpoints, tmp_path):
    """--join-side: a side's rows as show gives them replace each join key's buffered rows (the dry
    run counts both of the side's stores), and keys from CSV take every row of theirs out."""
    src = checkpoints("join_inner")
    rows = state_reader.read_state(src, join_side="right")
    pq.write_table(rows, tmp_path / "rows.parquet")
    plan = run_json("rewrite", src, "--dry-run", "--join-side", "right", "--upsert", tmp_path / "rows.parquet")
    replaced = {s["store_name"]: s["replaced"] for s in plan["stores"] if s.get("replaced")}
    assert replaced["right-keyWithIndexToValue"] == rows.num_rows
    assert replaced["right-keyToNumValues"] == len(set(_rows_key_set(rows)))
    pa_csv.write_csv(flatten_table(rows.select(["key"])), tmp_path / "keys.csv")
    dst = tmp_path / "dst"
    run_json("rewrite", src, dst, "--join-side", "right", "--delete", tmp_path / "keys.csv")
    assert state_reader.read_state(str(dst), join_side="right").num_rows == 0
    assert (
        state_reader.read_state(str(dst), join_side="left").num_rows
        == state_reader.read_state(src, join_side="left").num_rows
    )


def test_timers_rows_and_keys(checkpoints, tmp_path):
    """--timers: the timers of a transformWithState operator as show --timers gives them, written back
    after all were deleted (the timer family's name is never typed)."""
    src = checkpoints("tws")
    timers = state_reader.read_state(src, read_registered_timers=True)
    assert timers.num_rows
    pq.write_table(timers, tmp_path / "timers.parquet")
    emptied = tmp_path / "emptied"
    # the query runs on a processing-time trigger: it may have been stopped while planning a batch
    run_json("rewrite", src, emptied, "--timers", "--delete", tmp_path / "timers.parquet", "--allow-uncommitted")
    assert state_reader.read_state(str(emptied), read_registered_timers=True).num_rows == 0
    back = tmp_path / "back"
    run_json("rewrite", emptied, back, "--timers", "--upsert", tmp_path / "timers.parquet")
    again = state_reader.read_state(str(back), read_registered_timers=True)
    assert sorted(map(str, again.to_pylist())) == sorted(map(str, timers.to_pylist()))
    # the other variables are untouched
    assert state_reader.read_state(str(back), state_var_name="profile").equals(
        state_reader.read_state(src, state_var_name="profile")
    )


def test_conf_flags_change_frozen_confs_and_refusals_are_one_line(tmp_path):
    src = str(GOLDEN / "spark-4.0.5" / "agg_fmt1_hdfs")
    agg, codec = (
        "spark.sql.streaming.aggregation.stateFormatVersion",
        "spark.sql.streaming.stateStore.compression.codec",
    )
    out = run_json("rewrite", src, "--dry-run", "--conf", f"{agg}=2", "--conf", f"{codec}=zstd")
    assert {c["conf"]: (c["old"], c["new"], c["changed"]) for c in out["confs"]} == {
        agg: ("1", "2", True),
        codec: ("lz4", "zstd", True),
    }
    text = run("rewrite", src, "--dry-run", "--conf", f"{agg}=2")
    assert f"conf {agg}: 1 -> 2 (aggregation format; would change)" in text.stdout
    dst = tmp_path / "dst"
    join = "spark.sql.streaming.join.stateFormatVersion"
    assert_one_line_error(run("rewrite", src, dst, "--conf", f"{join}=4"), join, "not applicable")
    assert_one_line_error(run("rewrite", src, dst, "--conf", f"{agg}=7"), agg, "its values: 1, 2")
    assert_one_line_error(
        run("rewrite", src, dst, "--partitions", "3", "--conf", "spark.sql.shuffle.partitions=4"), "asked for twice"
    )
    assert not dst.exists()
    assert run("rewrite", src, dst, "--conf", f"{agg}=2").returncode == 0
    overview = run_json("overview", str(dst))
    assert {"conf": agg, "value": "2", "recorded": True, "migration": "aggregation format"} in overview["frozen_confs"]
