"""``state_reader.verdicts``: every key's verdict equals ``explain``'s for that key, and its last change is
the last batch Spark's own change feed shows it in, on the checkpoints the suite already writes."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

import state_reader
from state_reader.core.verdicts import COLUMNS, per_key
from state_reader.formats.flatten import json_values
from state_reader.io.calls import io_counts, io_counts_since


def _canonical(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)


def _every_key(keys: pa.Array) -> pa.Array:
    return pa.array([True] * len(keys))


def _by_key(table: pa.Table) -> dict[tuple[str | None, str], dict]:
    """Each row of a verdicts table by (join side, key as canonical JSON)."""
    keys = [_canonical(k) for k in json_values(table.column("key"))]
    sides = table.column("join_side").to_pylist() if "join_side" in table.column_names else [None] * len(keys)
    rows = table.drop_columns(["key"]).to_pylist()
    out = {(side, key): row for side, key, row in zip(sides, keys, rows, strict=True)}
    assert len(out) == len(keys), "one row per key"
    return out


def _assert_verdicts_are_explains(cp: str, **selectors: object) -> dict[tuple[str | None, str], dict]:
    """Every key's row of ``verdicts`` against ``explain`` of that key (its verdict, its last change)."""
    table = state_reader.verdicts(cp, **selectors)
    assert table.column_names[:2] == ["key", "partition_id"]
    assert set(COLUMNS) <= set(table.column_names)
    ours = _by_key(table)
    result = state_reader.explain(cp, key_filter=_every_key, max_keys=10**6, **selectors)
    theirs = {(s.join_side, _canonical(s.key)): s for s in result.keys if s.in_state}
    assert ours.keys() == theirs.keys()
    assert ours, "the checkpoint has keys in state"
    for at, story in theirs.items():
        verdict = story.verdict
        row = ours[at]
        assert (row["event"], row["when_watermark_ms"], row["when_time_ms"], row["overdue"]) == (
            verdict.event,
            verdict.when_watermark_ms,
            verdict.when_time_ms,
            verdict.overdue,
        ), at
        changed = [e.batch_id for e in story.timeline if e.change_type in ("insert", "update")]
        assert row["last_changed_batch_id"] == (changed[-1] if changed else None), at
    return ours


def _spark_last_changes(spark, cp: str, start: int) -> dict[str, int]:
    """Each key (canonical JSON) -> the last batch Spark's built-in change feed shows it in, from ``start``."""
    df = (
        spark.read.format("statestore")
        .option("readChangeFeed", "true")
        .option("changeStartBatchId", start)
        .load(cp)
        .select("batch_id", "key")
    )
    table = df.toArrow()
    out: dict[str, int] = {}
    for key, batch in zip(json_values(table.column("key")), table.column("batch_id").to_pylist(), strict=True):
        name = _canonical(key)
        out[name] = max(out.get(name, -1), batch)
    return out


@pytest.mark.parametrize(
    ("name", "change_feed"),
    [
        # Spark's change feed checks the last changes of one store per kind of change log (the rest are held
        # to explain's timelines, whose changes the change feed tests hold to Spark's)
        ("agg_window", True),  # HDFS-backed
        ("rocksdb_cl_agg_window", True),  # RocksDB with changelogs
        ("rocksdb_dedup", False),  # RocksDB without changelogs: changes by comparing snapshots
        ("dedup_within", False),
        ("session_window", False),
        ("rocksdb_cl_session_window", False),
        ("apply_in_pandas", False),  # timeouts
        ("rocksdb_apply_in_pandas", False),
    ],
)
def test_every_keys_verdict_is_explains_and_its_last_change_sparks(spark, checkpoints, name, change_feed):
    cp = checkpoints(name)
    ours = _assert_verdicts_are_explains(cp)
    if not change_feed:
        return
    first = state_reader.explain(cp, key_filter=lambda k: pa.array([False] * len(k))).first_batch_id
    expected = _spark_last_changes(spark, cp, first + 1)
    for (_, key), row in ours.items():
        assert row["last_changed_batch_id"] == expected.get(key), key


@pytest.mark.parametrize(
    ("name", "selectors"),
    [
        ("join_inner", {}),  # both sides, HDFS-backed
        ("join_v4", {}),  # both sides, RocksDB column families
        ("tws", {"state_var_name": "profile"}),  # a value with a TTL, and a timer per key
        ("tws", {"state_var_name": "events"}),  # a list: one row per key
        ("tws", {"state_var_name": "counters"}),  # a map
    ],
)
def test_joins_timers_and_timeouts_give_explains_verdict(checkpoints, name, selectors):
    _assert_verdicts_are_explains(checkpoints(name), **selectors)


def test_per_key_takes_the_highest_of_equal_keys():
    keys = pa.array([{"k": "a"}, {"k": "b"}, {"k": None}])
    other = pa.array([{"x": "b"}, {"x": "a"}, {"x": "b"}, {"x": "c"}])
    assert per_key(keys, other, [3, 1, 7, 9], highest=True).to_pylist() == [1, 7, None]
    assert per_key(keys, other, [3, 1, 7, 9], highest=False).to_pylist() == [1, 3, None]


@pytest.mark.parametrize("name", ["lookup_types", "rocksdb_lookup_types"])  # HDFS; RocksDB comparing snapshots
def test_a_key_filtered_verdicts_reads_only_the_keys_partition(checkpoints, tmp_path, name):
    from tests.core.test_pruning import one_partition_left

    cp = checkpoints(name)
    row, expr, copy = one_partition_left(cp, state_reader.verdicts(cp), tmp_path)
    with pytest.raises(state_reader.StateReaderError):
        state_reader.verdicts(str(copy))
    before = io_counts()
    found = state_reader.verdicts(str(copy), key_filter=expr)
    fetched = io_counts_since(before)["get"]
    # the same rows as every key's verdicts filtered afterwards: the key's, and its last change
    assert found.to_pylist() == [row]
    before = io_counts()
    state_reader.verdicts(cp)
    assert fetched < io_counts_since(before)["get"]
