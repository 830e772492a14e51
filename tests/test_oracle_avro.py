"""Avro-encoded transformWithState state (encodingFormat=avro) holding every type Avro state can
hold, against Spark's built-in reader: value, list and map state (map user keys included), with and
without TTL, TTL indexes, timers, change feeds; through the data source, the Spark-free API and the
command line."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from oracle import arrow_rows, assert_same_as_builtin

import state_reader

VARIABLES = ["info", "plain_info", "history", "scores", "ttl_scores"]


@pytest.fixture(scope="module")
def avro_cp(checkpoints):
    return checkpoints("tws_avro_types")


@pytest.mark.parametrize("var", VARIABLES)
@pytest.mark.parametrize("flatten", ["true", "false"])
def test_variable_matches_builtin(spark, avro_cp, var, flatten):
    assert assert_same_as_builtin(spark, avro_cp, {"stateVarName": var, "flattenCollectionTypes": flatten}) > 0


def test_earlier_batch_and_change_feed_match_builtin(spark, avro_cp):
    for var in VARIABLES:
        assert assert_same_as_builtin(spark, avro_cp, {"stateVarName": var, "batchId": "1"}) > 0
        assert assert_same_as_builtin(spark, avro_cp, {"stateVarName": var, "readChangeFeed": "true",
                                                       "changeStartBatchId": "0"}) > 0


def test_timers_match_builtin(spark, avro_cp):
    assert assert_same_as_builtin(spark, avro_cp, {"readRegisteredTimers": "true"}) > 0


def test_the_query_writes_the_edge_values(avro_cp):
    """Every update of one variable (its change feed) holds each edge value at least once, so the
    comparisons above are not vacuous."""
    import math

    feed = state_reader.read_state(avro_cp, state_var_name="plain_info", read_change_feed=True,
                                   change_start_batch_id=0)
    values = [v for v in feed.column("value").to_pylist() if v is not None]
    assert {"", "héllo", "日本🙂"} <= {v["name"] for v in values}
    totals = [v["total"] for v in values]
    assert any(math.isnan(x) for x in totals) and math.inf in totals and -math.inf in totals
    assert any(x == 0 and math.copysign(1, x) < 0 for x in totals)
    assert any(v["tags"] == [] for v in values) and any(v["tags"] for v in values)
    assert any(v["nested"] is None for v in values) and any(v["nested"] and v["nested"]["inner"] is None
                                                            for v in values)
    assert any(v["grid"] == [] for v in values) and any([] in (v["grid"] or []) for v in values)
    assert any(v["points"] for v in values) and any(v["attrs"] == {} or v["attrs"] == [] for v in values)


def test_command_line_shows_and_exports_avro_state(avro_cp, tmp_path):
    expected = arrow_rows(state_reader.read_state(avro_cp, state_var_name="scores"))
    out = tmp_path / "scores.parquet"
    proc = subprocess.run([sys.executable, "-m", "state_reader", "export", avro_cp, "--to", str(out),
                           "--state-var", "scores"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    import pyarrow.parquet as pq

    assert len(pq.read_table(out)) == len(expected)
    proc = subprocess.run([sys.executable, "-m", "state_reader", "show", avro_cp, "--state-var", "info", "--json"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["rows"]
