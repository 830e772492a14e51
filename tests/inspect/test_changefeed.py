"""Change feeds through the ``changes`` command (their rows against Spark's built-in change feed are in
``tests/oracles/``)."""

from __future__ import annotations

import state_reader
from tests.support.cli import assert_one_line_error, run, run_json


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
