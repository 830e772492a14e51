"""What people turn a Spark-free result into (pandas, Python rows, the CLI's exports) keeps every field,
also the repeated field names of aggregation buffers; ``exact_schema=True`` keeps Spark's names."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

import state_reader
from tests.support.cli import run as cli_run


def _value_names(table: pa.Table) -> list[str]:
    return [f.name for f in table.schema.field("value").type]


def test_repeated_value_fields_survive_pandas_and_pylist(agg):
    exact = state_reader.read_state(agg, exact_schema=True)
    names = _value_names(exact)
    assert len(set(names)) < len(names), names  # the checkpoint has the repeated names this is about
    table = state_reader.read_state(agg)
    unique = _value_names(table)
    assert len(set(unique)) == len(unique) == len(names)
    assert [n.split("#")[0] for n in unique] == names
    rows = table.to_pylist()
    assert all(len(r["value"]) == len(names) for r in rows if r["value"] is not None)
    frame = table.to_pandas()
    assert all(len(v) == len(names) for v in frame["value"] if v is not None)
    # the same values, field by field, as Spark's exact schema holds them (repr: NaN equals NaN)
    ours, spark = table.column("value").combine_chunks(), exact.column("value").combine_chunks()
    for i in range(len(names)):
        assert repr(ours.field(i).to_pylist()) == repr(spark.field(i).to_pylist())


def test_change_feed_and_sliced_tables_keep_every_field(agg):
    feed = state_reader.changes(agg, 0)
    assert len(set(_value_names(feed))) == len(_value_names(feed))
    sliced = state_reader.with_unique_field_names(state_reader.read_state(agg, exact_schema=True).slice(1, 3))
    assert sliced.num_rows == min(3, max(0, state_reader.read_state(agg).num_rows - 1))
    assert sliced.to_pylist() == state_reader.read_state(agg).slice(1, 3).to_pylist()


def test_parquet_export_keeps_every_field(agg, tmp_path):
    out = tmp_path / "state.parquet"
    proc = cli_run("export", agg, "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    exported = pq.read_table(out)
    names = _value_names(state_reader.read_state(agg, exact_schema=True))
    assert len(_value_names(exported)) == len(set(_value_names(exported))) == len(names)
    assert all(len(r["value"]) == len(names) for r in exported.to_pylist() if r["value"] is not None)
