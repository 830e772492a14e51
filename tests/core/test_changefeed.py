"""Change feeds through the ``changes`` command (their rows against Spark's built-in change feed are in
``tests/oracles/``)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import state_reader
from tests.support.cli import assert_one_line_error, run, run_json
from tests.support.oracle import arrow_rows


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


# -- follow() against the change feed, on every store the tests write ----------------------------------


def _stores(cp: str) -> list[dict[str, object]]:
    """The selectors of every store of ``cp`` a change feed reads (transformWithState: each variable)."""
    from state_reader.core.retained import operator_stores
    from state_reader.io.storage import Storage
    from state_reader.model import operators
    from state_reader.model.checkpoint import CheckpointDir

    out: list[dict[str, object]] = []
    for op, name, op_name in operator_stores(CheckpointDir(Storage(cp)), variables=True):
        if operators.is_transform_with_state(op_name):
            if not name.startswith("$"):  # the timers have no change feed of their own
                out.append({"operator_id": op, "state_var_name": name})
        else:
            out.append({"operator_id": op, "store_name": name})
    return out


def _follow_equals_changes(cp: str) -> int:
    """``follow`` from its default start to the last committed batch hands out exactly ``changes`` over
    the same batches, for every store of ``cp``, or fails with the same error; the rows compared."""
    from state_reader.errors import StateReaderError
    from state_reader.io.storage import Storage
    from state_reader.model.checkpoint import CheckpointDir
    from tests.support.oracle import arrow_rows

    last = CheckpointDir(Storage(cp)).latest_committed_batch()
    compared = 0
    for selector in _stores(cp):
        items: list[tuple[int, pa.Table]] = []
        try:
            for batch, table in state_reader.follow(cp, poll_seconds=0.01, **selector):
                items.append((batch, table))
                if batch >= last:
                    break
        except StateReaderError as exc:
            with pytest.raises(type(exc)):
                state_reader.changes(cp, 0, last, **selector)
            continue
        first = items[0][0]
        assert [b for b, _ in items] == list(range(first, last + 1)), (cp, selector)
        feed = state_reader.changes(cp, first, last, **selector)
        followed = [t for _, t in items if t.num_rows]
        got = arrow_rows(pa.concat_tables(followed)) if followed else []
        assert got == arrow_rows(feed), (cp, selector)
        compared += len(got)
    return compared


# follow() hands out what changes() reads, whatever the operator: what can differ is how a provider and layout
# keep versions. Every provider and layout (HDFS and its codecs, RocksDB without and with changelogs, row
# checksums, checkpoint format 2, column families of transformWithState and joins 3 and 4), each operator at
# least once, rather than all the written queries (the change feed itself is held to Spark's in the oracles)
FOLLOWED = (
    "agg_fmt1",
    "agg_zstd",
    "apply_in_pandas_fmt1",
    "dedup_within",
    "exotic_types",
    "fmgws_timeout_fmt1",
    "join_left_outer",
    "join_left_outer_rocksdb_cl",
    "join_v3",
    "join_v4_checksum",
    "limit",
    "multi",
    "rocksdb_apply_in_pandas",
    "rocksdb_cl_agg_zstd",
    "rocksdb_cl_checksum_agg_window",
    "rocksdb_cl_session_window",
    "rocksdb_dedup",
    "rocksdb_v2_multi",
    "rocksdb_v2_session_window",
    "session_window",
    "tws_avro_event_time",
    "tws_checksum",
    "tws_lists_rocksdb",
    "types",
)


@pytest.mark.parametrize("name", FOLLOWED)
def test_follow_hands_out_the_change_feed_of_every_store(checkpoints, name):
    _follow_equals_changes(checkpoints(name))


@pytest.mark.parametrize("name", ["fmgws_v1", "mgws_kryo", "aggregator"])
def test_follow_hands_out_the_change_feed_of_scala_stores(scala_checkpoints, name):
    _follow_equals_changes(scala_checkpoints(name))


def _golden_checkpoints() -> list[str]:
    from tests.support.paths import GOLDEN

    return sorted(str(p.relative_to(GOLDEN)) for p in GOLDEN.glob("spark-*/*") if (p / "commits").is_dir())


@pytest.mark.parametrize("name", _golden_checkpoints())
def test_follow_hands_out_the_change_feed_of_older_writers(name):
    from tests.support.paths import GOLDEN

    _follow_equals_changes(str(GOLDEN / name))


@pytest.mark.parametrize("name", ["spark-3.5.8/session_window_hdfs", "spark-4.0.5/join_inner_hdfs"])
def test_follow_reads_deletes_of_values_with_required_fields(name):
    # the defect this guards: a batch that deletes a key whose value struct has required fields (typed
    # aggregation buffers, session windows, join rows) made follow() fail where changes() read it
    from tests.support.paths import GOLDEN

    cp = str(GOLDEN / name)
    selector = {"store_name": "left-keyWithIndexToValue"} if "join" in name else {}
    feed = state_reader.changes(cp, 0, **selector)
    assert pc.sum(pc.equal(feed.column("change_type"), "delete")).as_py() > 0
    assert any(not f.nullable for f in feed.schema.field("value").type), "the value struct has required fields"
    assert _follow_equals_changes(cp) > 0


@pytest.mark.parametrize("compiled", ["1", "0"])
def test_changes_from_snapshots_equal_the_changelogs_of_the_same_query(checkpoints, monkeypatch, compiled):
    """RocksDB without changelogs: the changes computed from consecutive snapshots, each SST file read once
    and only the rows that differ compared (compiled), or both versions loaded and matched by their bytes
    (not), equal what the changelogs of the same query, run with changelog checkpointing, say."""
    if compiled == "1":
        pytest.importorskip("numba")
    monkeypatch.setenv("STATE_READER_NUMBA", compiled)
    plain, logged = checkpoints("rocksdb_dedup"), checkpoints("rocksdb_cl_dedup")
    ours = state_reader.changes(plain, 1, change_feed_from_snapshots=True)
    theirs = state_reader.changes(logged, 1)
    assert "delete" in theirs.column("change_type").to_pylist()
    assert arrow_rows(ours) == arrow_rows(theirs)
