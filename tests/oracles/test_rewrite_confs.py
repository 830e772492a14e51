"""Frozen confs changed by a rewrite, judged by Spark: the same query over inputs X then Y, (a) run under the
new value from the start, (b) run under the old one over X, rewritten with the new value and resumed over Y.
The batches over Y emit the same rows, Spark's reader sees the same state at the end, and the resumed query's
offset log records the new value (it really ran in the new format).

Each case runs a query under both values over X, rewrites each into the other's value and resumes all four:
both directions of a change from two runs."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

import state_reader
from state_reader.formats.schema_files import read_schema_v1v2, read_schema_v3
from state_reader.model.checkpoint import is_schema_file
from state_reader.model.conf import (
    CONF_AGG_FORMAT,
    CONF_ALWAYS_NULLABLE_OUTPUT,
    CONF_CODEC,
    CONF_DEDUP_KEY_ORDER,
    CONF_FMGWS_FORMAT,
)
from tests.support.parallel import side_by_side
from tests.support.resume import add_input, digest, new_batches, restart_each, resume, state_rows, stored_rows, stores
from tests.support.streaming_queries import (
    FMGWS_TIMEOUT_QUERIES,
    QUERIES,
    ROCKSDB_CHANGELOG,
    Query,
    _with,
    run_query,
)

NULLABLE_OFF, NULLABLE_ON = ({CONF_ALWAYS_NULLABLE_OUTPUT: v} for v in ("false", "true"))
KEY_ORDER_OFF, KEY_ORDER_ON = ({CONF_DEDUP_KEY_ORDER: v} for v in ("false", "true"))

TIMEOUT_FMT2 = _with(FMGWS_TIMEOUT_QUERIES["fmgws_timeout_fmt1"], {CONF_FMGWS_FORMAT: "2"})

# case -> (conf, (query, value), (query, value)): the same query under each value of the conf
CASES = {
    "aggregation-hdfs": (CONF_AGG_FORMAT, (QUERIES["agg_fmt1"], "1"), (QUERIES["agg_fmt2"], "2")),
    "aggregation-rocksdb": (
        CONF_AGG_FORMAT,
        (QUERIES["rocksdb_cl_agg_fmt1"], "1"),
        (QUERIES["rocksdb_cl_agg_fmt2"], "2"),
    ),
    "fmgws-hdfs": (CONF_FMGWS_FORMAT, (QUERIES["apply_in_pandas_fmt1"], "1"), (QUERIES["apply_in_pandas"], "2")),
    "fmgws-timeouts-hdfs": (CONF_FMGWS_FORMAT, (FMGWS_TIMEOUT_QUERIES["fmgws_timeout_fmt1"], "1"), (TIMEOUT_FMT2, "2")),
    "codec-hdfs": (
        CONF_CODEC,
        (QUERIES["agg_window"], "lz4"),
        (_with(QUERIES["agg_window"], {CONF_CODEC: "zstd"}), "zstd"),
    ),
    "codec-rocksdb": (
        CONF_CODEC,
        (_with(QUERIES["agg_window"], {**ROCKSDB_CHANGELOG, CONF_CODEC: "snappy"}), "snappy"),
        (_with(QUERIES["agg_window"], {**ROCKSDB_CHANGELOG, CONF_CODEC: "lzf"}), "lzf"),
    ),
    # a session window's key and value have fields Spark makes non-nullable unless the conf is on (v2 schema files)
    "nullable-output-hdfs": (
        CONF_ALWAYS_NULLABLE_OUTPUT,
        (_with(QUERIES["session_window"], NULLABLE_OFF), "false"),
        (_with(QUERIES["session_window"], NULLABLE_ON), "true"),
    ),
    # join format 4: its event-time index in a v3 schema file, whose key Spark makes non-nullable unless the conf is on
    "nullable-output-join-v4": (
        CONF_ALWAYS_NULLABLE_OUTPUT,
        (_with(QUERIES["join_v4"], NULLABLE_OFF), "false"),
        (_with(QUERIES["join_v4"], NULLABLE_ON), "true"),
    ),
    # two key columns: the same order under both values
    "dedup-key-order-hdfs": (
        CONF_DEDUP_KEY_ORDER,
        (_with(QUERIES["dedup"], KEY_ORDER_OFF), "false"),
        (_with(QUERIES["dedup"], KEY_ORDER_ON), "true"),
    ),
}
# the stores Spark's reader is asked for, where not every store on disk by its name: a join in column families
READ_OPTIONS = {"nullable-output-join-v4": [{"joinSide": "left"}, {"joinSide": "right"}]}
# Spark 4.3 cannot restart flatMapGroupsWithState format 1 with timeouts (its own such checkpoints fail validating
# the long timeout in an int slot), so the rewrite refuses the way back there: one direction only
ONE_WAY = {"fmgws-timeouts-hdfs"}
# the rewrite into the second value runs through Spark (spark=) here: the same resume judges it
THROUGH_SPARK = {"aggregation-hdfs", "nullable-output-hdfs"}


def _over_x(query: Query) -> Query:
    """The query over three batches of its input (X); ``new_batches`` of it is Y."""
    batches = query.batches
    return dataclasses.replace(query, batches=lambda: batches()[:3])


def _recorded(checkpoint: str, key: str) -> str:
    """``key`` as the latest offset log entry of ``checkpoint`` records it."""
    offsets = Path(checkpoint) / "offsets"
    last = max(int(p.name) for p in offsets.iterdir() if p.name.isdigit())
    return json.loads((offsets / str(last)).read_text().splitlines()[1])["conf"][key]


@pytest.mark.parametrize("case", sorted(CASES))
def test_conf_change_resumes_as_if_run_so_from_the_start(spark, tmp_path, case):
    key, (full_a, value_a), (full_b, value_b) = CASES[case]
    query_a, query_b = _over_x(full_a), _over_x(full_b)
    run_a, run_b = side_by_side(
        lambda: run_query(spark.newSession(), query_a, tmp_path / "a"),
        lambda: run_query(spark.newSession(), query_b, tmp_path / "b"),
    )
    # each run rewritten into the other's value (the source only read)
    a_to_b, b_to_a = str(tmp_path / "a-to-b"), str(tmp_path / "b-to-a")
    before = digest(run_a)
    report = state_reader.rewrite(run_a, a_to_b, confs={key: value_b}, spark=spark if case in THROUGH_SPARK else None)
    assert [(c["conf"], c["old"], c["new"], c["changed"]) for c in report.confs] == [(key, value_a, value_b, True)]
    assert digest(run_a) == before, "the source changed"
    if case in ONE_WAY:
        with pytest.raises(state_reader.UnsupportedConfChangeError, match="cannot restart"):
            state_reader.rewrite(run_b, b_to_a, confs={key: value_a})
    else:
        state_reader.rewrite(run_b, b_to_a, confs={key: value_a})
    if case in THROUGH_SPARK:
        local = str(tmp_path / "a-to-b-local")
        state_reader.rewrite(run_a, local, confs={key: value_b})
        assert stored_rows(local) == stored_rows(a_to_b)
        state_files = {k: v for k, v in digest(local).items() if k.startswith("state/")}
        assert state_files == {k: v for k, v in digest(a_to_b).items() if k.startswith("state/")}
    for query, full, run in ((query_a, full_a, tmp_path / "a"), (query_b, full_b, tmp_path / "b")):
        # Y: the query's own input continued where timeouts are set ahead of the watermark, else new_batches
        add_input(run / "input", full.batches()[3:5] if case in ONE_WAY else new_batches(query))

    # resumed in a session that says the old value: the offset log decides
    how = {run_a: (query_a, tmp_path / "a"), b_to_a: (query_b, tmp_path / "b")}
    how.update({run_b: (query_b, tmp_path / "b"), a_to_b: (query_a, tmp_path / "a")})
    checkpoints = [run_b, a_to_b] if case in ONE_WAY else [run_a, run_b, a_to_b, b_to_a]
    got = dict(
        zip(
            checkpoints,
            restart_each(lambda cp: resume(spark.newSession(), how[cp][0], cp, how[cp][1] / "input"), checkpoints),
            strict=True,
        )
    )
    assert got[run_b], "the restarted query ran no batch"
    assert _recorded(a_to_b, key) == value_b
    pairs = [(run_b, a_to_b)] if case in ONE_WAY else [(run_b, a_to_b), (run_a, b_to_a)]
    for ran_so, rewritten in pairs:
        assert got[rewritten] == got[ran_so]
        assert _recorded(rewritten, key) == _recorded(ran_so, key)
        reads = READ_OPTIONS.get(case) or [{"operatorId": op, "storeName": s} for op, s in stores(ran_so)]
        for options in reads:
            assert state_rows(spark, rewritten, **options) == state_rows(spark, ran_so, **options), options
        if key == CONF_ALWAYS_NULLABLE_OUTPUT:
            # widened as Spark widens them under true; kept so into false (Spark accepts a stored schema more
            # nullable than the query's, and keeps it)
            assert _schemas(rewritten) == _schemas(run_b)


def _schemas(checkpoint: str) -> dict[str, list[str]]:
    """Every state schema file's schemas as JSON, by path (a v3 file by its directory: its name is random)."""
    out = {}
    for path in sorted(Path(checkpoint, "state").rglob("*")):
        rel = path.relative_to(checkpoint).as_posix()
        if not path.is_file() or path.name.endswith(".crc") or not is_schema_file(rel):
            continue
        data = path.read_bytes()
        if "_stateSchema" in rel:
            families = read_schema_v3(data, rel)
            schemas = [s.json() for f in families for s in (f.key_schema, f.value_schema)]
            rel = path.parent.relative_to(checkpoint).as_posix()
        else:
            schemas = [s.json() for s in read_schema_v1v2(data, rel)]
        out[rel] = schemas
    return out


def test_a_dedup_key_order_change_is_refused_where_spark_orders_the_columns_anew(spark, tmp_path):
    """Five key columns: Spark Classic's old order is a hash set's, the new one the query's, recorded nowhere."""
    five = ["user", "ts", "grp", "n", "tag"]
    legacy = _over_x(_with(QUERIES["dedup"], KEY_ORDER_OFF))
    query = dataclasses.replace(legacy, build=lambda df: df.withWatermark("ts", "5 seconds").dropDuplicates(five))
    checkpoint = run_query(spark.newSession(), query, tmp_path / "five")
    with pytest.raises(state_reader.UnsupportedConfChangeError, match="5 columns"):
        state_reader.rewrite(checkpoint, str(tmp_path / "out"), confs={CONF_DEDUP_KEY_ORDER: "true"})
    assert not (tmp_path / "out").exists()
