"""``export``: state written to Parquet, CSV, JSON lines and JSON, equal to the table the API returns."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv
import pyarrow.parquet as pq

import state_reader
from tests.support.cli import run, run_json
from tests.support.oracle import arrow_rows


def test_export_parquet_csv_jsonl(agg, tmp_path):
    expected = state_reader.read_state(agg)
    out = tmp_path / "state.parquet"
    doc = run_json("export", agg, "--out", out)
    assert doc["rows"] == expected.num_rows and doc["format"] == "parquet"
    assert arrow_rows(pq.read_table(out)) == arrow_rows(expected)

    csv_path = tmp_path / "state.csv"
    assert run("export", agg, "--out", csv_path).returncode == 0
    table = pcsv.read_csv(csv_path)
    assert table.num_rows == expected.num_rows
    assert table.column_names[:3] == ["key.window.start", "key.window.end", "key.user"]

    jsonl = tmp_path / "state.jsonl"
    proc = run("export", agg, "--out", jsonl, "--key-filter", "user = 'bob'")
    assert proc.returncode == 0 and "wrote" in proc.stdout
    rows = [json.loads(line) for line in jsonl.read_text(encoding="utf-8").splitlines()]
    assert rows and all(r["key"]["user"] == "bob" for r in rows)
    assert len(rows) == state_reader.read_state(agg, key_filter="user = 'bob'").num_rows
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_export_json_is_one_array(agg, tmp_path):
    """A .json file holds what a user expects of one: a single JSON array of the rows (.jsonl: one a line)."""
    out = tmp_path / "q1.json"
    doc = run_json("export", agg, "--out", out, "--key-filter", "user = 'bob'")
    assert doc["format"] == "json"
    rows = json.loads(out.read_text(encoding="utf-8"))
    expected = state_reader.read_state(agg, key_filter="user = 'bob'")
    assert isinstance(rows, list) and len(rows) == doc["rows"] == expected.num_rows > 0
    jsonl = tmp_path / "q1.jsonl"
    assert run("export", agg, "--out", jsonl, "--key-filter", "user = 'bob'").returncode == 0
    assert rows == [json.loads(line) for line in jsonl.read_text(encoding="utf-8").splitlines()]
    none = tmp_path / "none.out"
    assert run("export", agg, "--out", none, "--format", "json", "--key-filter", "user = 'nobody'").returncode == 0
    assert json.loads(none.read_text(encoding="utf-8")) == []


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
