"""A stream-stream join rewritten into state formats 3 and 4 (column families of one RocksDB store) and back out of
them into format 2 (four separate stores), judged by Spark: the same query over inputs X then Y, (a) run in the new
format from the start, (b) run in another format over X, rewritten into the new one and resumed over Y. The batches
over Y emit the same rows, Spark's reader sees the same rows on each join side at the end, and the resumed query's
offset log records the new format.

One run per format over X serves every direction: format 2 (HDFS-backed, so that 2 -> 4 moves the provider in
the same pass), 3 and 4; each rewritten into the formats it can go to, every checkpoint resumed side by side.
4 -> 2 moves the inner join onto the HDFS-backed provider in the same pass; the outer join's stays on RocksDB."""

from __future__ import annotations

import dataclasses
import json
import uuid
from pathlib import Path

import pytest

import state_reader
from state_reader.model.checkpoint import JOIN_SIDES
from state_reader.model.conf import CONF_JOIN_FORMAT
from tests.support.parallel import side_by_side
from tests.support.resume import add_input, new_batches, restart_each, resume, state_rows, stored_rows
from tests.support.streaming_queries import QUERIES, ROCKSDB, Query, _with, run_query

# (source format, new format): the directions written
DIRECTIONS = (("2", "4"), ("3", "4"), ("2", "3"), ("4", "3"), ("4", "2"), ("3", "2"))
# (direction, join) rewritten through Spark's executors too, and judged against the local rewrite
THROUGH_SPARK = ((("2", "4"), "join_left_outer"), (("4", "2"), "join_left_outer"))


def _in_format(name: str, fmt: str) -> Query:
    """The join ``name`` over three batches of its input (X) in format ``fmt``: RocksDB from format 3 on."""
    query = QUERIES[name]
    batches = query.batches
    confs = {CONF_JOIN_FORMAT: fmt} if fmt == "2" else {**ROCKSDB, CONF_JOIN_FORMAT: fmt}
    return dataclasses.replace(_with(query, confs), batches=lambda: batches()[:3])


def _recorded(checkpoint: str) -> str:
    offsets = Path(checkpoint) / "offsets"
    last = max(int(p.name) for p in offsets.iterdir() if p.name.isdigit())
    return json.loads((offsets / str(last)).read_text().splitlines()[1])["conf"][CONF_JOIN_FORMAT]


def _own_query_id(checkpoint: str) -> str:
    """The checkpoint under a query id of its own, so that it resumes beside the run it was rewritten from."""
    (Path(checkpoint) / "metadata").write_text(json.dumps({"id": str(uuid.uuid4())}))
    return checkpoint


@pytest.mark.parametrize("name", ["join_inner", "join_left_outer"])
def test_join_rewritten_between_formats_2_3_and_4_resumes_as_spark_runs_them(spark, tmp_path, name):
    queries = {fmt: _in_format(name, fmt) for fmt in ("2", "3", "4")}
    runs = dict(
        zip(
            queries,
            side_by_side(*[lambda f=f: run_query(spark.newSession(), queries[f], tmp_path / f) for f in queries]),
            strict=True,
        )
    )
    rewritten = {}
    for old, new in DIRECTIONS:
        out = str(tmp_path / f"{old}-to-{new}")
        # 2 -> 4 moves the HDFS-backed format 2 onto RocksDB in the same pass, 4 -> 2 the inner join back
        through_spark = spark if ((old, new), name) in THROUGH_SPARK else None
        provider = "rocksdb" if old == "2" else "hdfs" if (old, new, name) == ("4", "2", "join_inner") else None
        report = state_reader.rewrite(
            runs[old], out, confs={CONF_JOIN_FORMAT: new}, provider=provider, spark=through_spark
        )
        assert [(c["old"], c["new"]) for c in report.confs if c["conf"] == CONF_JOIN_FORMAT] == [(old, new)]
        if through_spark is not None:
            local = str(tmp_path / f"{old}-to-{new}-local")
            state_reader.rewrite(runs[old], local, confs={CONF_JOIN_FORMAT: new}, provider=provider)
            assert stored_rows(local) == stored_rows(out)
        rewritten[(old, new)] = _own_query_id(out)
    for fmt in queries:
        add_input(tmp_path / fmt / "input", new_batches(queries[fmt]))

    # each checkpoint resumed in a session that says its source's format (the offset log decides), over its input
    source_of = {runs[f]: f for f in runs} | {cp: old for (old, _), cp in rewritten.items()}

    def restart(checkpoint: str) -> dict[int, list[str]]:
        fmt = source_of[checkpoint]
        return resume(spark.newSession(), queries[fmt], checkpoint, tmp_path / fmt / "input")

    checkpoints = [runs["2"], runs["3"], runs["4"], *rewritten.values()]
    got = dict(
        zip(
            checkpoints,
            restart_each(restart, checkpoints),
            strict=True,
        )
    )
    assert any(got[runs["4"]].values()), "the restarted query emitted no row"
    for (old, new), checkpoint in rewritten.items():
        ran_so = runs[new]
        assert got[checkpoint] == got[ran_so], (old, new)
        assert _recorded(checkpoint) == new
        for side in JOIN_SIDES:
            assert state_rows(spark, checkpoint, joinSide=side) == state_rows(spark, ran_so, joinSide=side), (
                old,
                new,
                side,
            )
