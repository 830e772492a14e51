"""A stream-stream join's state format changed by a rewrite, judged by Spark. Spark 4.3 refuses to start a query
on format 1 but resumes one, so the format-1 checkpoint is the rewrite of a format-2 run over X: a query run in
format 2 over X is rewritten into format 1, that one back into format 2, and all three resume over Y.

An inner join never reads the ``matched`` flag: all three emit the same rows over Y, end with the same rows in
every store (Spark's reader), and each records its format. Spark runs no other join on format 1 (SPARK-26154:
an outer join there emitted matched rows again at eviction), and refuses one rewritten into it."""

from __future__ import annotations

import dataclasses
import json
import uuid
from pathlib import Path

import pytest
from pyspark.errors import StreamingQueryException

import state_reader
from state_reader.model.checkpoint import JOIN_SIDES
from state_reader.model.conf import CONF_JOIN_FORMAT
from tests.support.resume import add_input, new_batches, restart_each, resume, state_rows, stored_rows, stores
from tests.support.streaming_queries import QUERIES, Query, run_query


def _over_x(query: Query) -> Query:
    batches = query.batches
    return dataclasses.replace(query, batches=lambda: batches()[:3])


def _recorded(checkpoint: str) -> str:
    offsets = Path(checkpoint) / "offsets"
    last = max(int(p.name) for p in offsets.iterdir() if p.name.isdigit())
    return json.loads((offsets / str(last)).read_text().splitlines()[1])["conf"][CONF_JOIN_FORMAT]


def _own_query_id(checkpoint: str) -> str:
    """The checkpoint under a query id of its own, so that it resumes beside the run it was rewritten from."""
    (Path(checkpoint) / "metadata").write_text(json.dumps({"id": str(uuid.uuid4())}))
    return checkpoint


def test_inner_join_formats_1_and_2_resume_as_spark_runs_them(spark, tmp_path):
    query = _over_x(QUERIES["join_inner"])
    run = run_query(spark.newSession(), query, tmp_path / "run")
    to1, back, local = str(tmp_path / "to1"), str(tmp_path / "back"), str(tmp_path / "to1-local")
    # through Spark (spark=): the same rows as the rewrite without it
    state_reader.rewrite(run, to1, confs={CONF_JOIN_FORMAT: "1"}, spark=spark)
    state_reader.rewrite(run, local, confs={CONF_JOIN_FORMAT: "1"})
    assert stored_rows(local) == stored_rows(to1)
    state_reader.rewrite(to1, back, confs={CONF_JOIN_FORMAT: "2"})
    _own_query_id(to1)
    _own_query_id(back)
    add_input(tmp_path / "run" / "input", new_batches(query))
    checkpoints = [run, to1, back]
    got = dict(
        zip(
            checkpoints,
            restart_each(lambda cp: resume(spark.newSession(), query, cp, tmp_path / "run" / "input"), checkpoints),
            strict=True,
        )
    )
    assert any(got[run].values()), "the restarted query emitted no row"
    assert (_recorded(run), _recorded(to1), _recorded(back)) == ("2", "1", "2")
    assert got[to1] == got[run]
    assert got[back] == got[run]
    for op, store in stores(run):
        options = {"operatorId": op, "storeName": store}
        assert state_rows(spark, back, **options) == state_rows(spark, run, **options), store
    for side in JOIN_SIDES:
        assert state_rows(spark, to1, joinSide=side) == state_rows(spark, run, joinSide=side), side


def test_spark_refuses_an_outer_join_rewritten_into_format_1(spark, tmp_path):
    query = _over_x(QUERIES["join_left_outer"])
    run = run_query(spark.newSession(), query, tmp_path / "run")
    to1 = str(tmp_path / "to1")
    state_reader.rewrite(run, to1, confs={CONF_JOIN_FORMAT: "1"})
    add_input(tmp_path / "run" / "input", new_batches(query))
    # the checkpoint does not say the join's type, so the rewrite cannot refuse it; Spark does, at the first batch
    with pytest.raises(StreamingQueryException, match="LeftOuter join with state format version 1"):
        resume(spark.newSession(), query, to1, tmp_path / "run" / "input")
