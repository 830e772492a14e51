"""scan_state: the read_state read as a pyarrow.RecordBatchReader, one partition at a time,
queried by DuckDB."""

from __future__ import annotations

import shutil

import duckdb
import pyarrow as pa
import pytest

import state_reader
from tests.support.oracle import arrow_rows


@pytest.mark.parametrize(
    ("name", "options"),
    [
        ("agg_window", {}),
        ("rocksdb_cl_agg_window", {}),
        ("join_inner", {"join_side": "left"}),
        ("tws", {"state_var_name": "events"}),
        ("lookup_types", {}),
        ("rocksdb_lookup_types", {}),
    ],
)
def test_scan_equals_read(checkpoints, name, options):
    cp = checkpoints(name)
    table = state_reader.read_state(cp, **options)
    reader = state_reader.scan_state(cp, **options)
    assert isinstance(reader, pa.RecordBatchReader)
    assert reader.schema == table.schema
    assert reader.schema.metadata == table.schema.metadata  # it names the batch it was read at
    scanned = reader.read_all()
    assert arrow_rows(scanned) == arrow_rows(table) and scanned.num_rows == table.num_rows > 0
    # one partition per batch (or none for an empty one), in partition order
    owners = [set(b.column("partition_id").to_pylist()) for b in state_reader.scan_state(cp, **options)]
    assert all(len(o) == 1 for o in owners)
    assert [o.pop() for o in owners] == sorted({p for p in table.column("partition_id").to_pylist()})


def test_scan_takes_the_same_options(checkpoints):
    cp = checkpoints("agg_window")
    for options in (
        {"batch_id": 1},
        {"key_filter": "user >= 'b'"},
        {"exact_schema": True},
        {"read_change_feed": True, "change_start_batch_id": 0},
    ):
        want = state_reader.read_state(cp, **options)
        got = state_reader.scan_state(cp, **options).read_all()
        assert got.schema == want.schema and arrow_rows(got) == arrow_rows(want), options
    # the whole read is checked before the reader is handed out
    with pytest.raises(state_reader.InvalidOptionError, match="nope"):
        state_reader.scan_state(cp, key_filter="nope = 1")
    with pytest.raises(state_reader.StateReaderError, match="operator"):
        state_reader.scan_state(cp, operator_id=42)


def test_scan_decodes_partitions_as_it_is_read(checkpoints, tmp_path):
    """Partitions are decoded lazily, one at a time: a damaged partition fails only when reached."""
    cp = tmp_path / "cp"
    shutil.copytree(checkpoints("agg_window"), cp)
    table = state_reader.read_state(str(cp))
    pids = sorted(set(table.column("partition_id").to_pylist()))
    last = pids[-1]
    for f in (cp / "state" / "0" / str(last)).rglob("*"):
        if f.is_file() and not f.name.startswith((".", "_")):
            f.write_bytes(b"not a state file")
    reader = state_reader.scan_state(str(cp))  # plans; decodes nothing yet
    first = [reader.read_next_batch() for _ in pids[:-1]]
    assert [b.column("partition_id")[0].as_py() for b in first] == pids[:-1]
    with pytest.raises(state_reader.StateReaderError, match=f"/{last}/"):
        reader.read_next_batch()


def test_scan_lookup_reads_one_partition(checkpoints):
    cp = checkpoints("agg_window")
    row = state_reader.read_state(cp).to_pylist()[0]
    window = row["key"]["window"]
    expr = (
        f"user = '{row['key']['user']}' and window.start = '{window['start']:%Y-%m-%d %H:%M:%S}' "
        f"and window.end = '{window['end']:%Y-%m-%d %H:%M:%S}'"
    )
    batches = list(state_reader.scan_state(cp, key_filter=expr))
    assert [b.num_rows for b in batches] == [1]  # the one partition the key hashes to, nothing else
    assert batches[0].to_pylist() == [row]


def test_duckdb_queries_the_reader(checkpoints):
    cp = checkpoints("agg_window")
    table = state_reader.read_state(cp)
    reader = state_reader.scan_state(cp)  # noqa: F841 - DuckDB finds it by its name
    got = duckdb.sql(
        'select key."user" as u, sum(value."count") as n, count(*) as rows '
        "from reader group by all order by u nulls last"
    ).fetchall()
    expected: dict[str, list[int]] = {}
    for row in table.to_pylist():
        n = expected.setdefault(row["key"]["user"], [0, 0])
        n[0] += row["value"]["count"]
        n[1] += 1
    nulls_last = sorted(expected.items(), key=lambda kv: (kv[0] is None, kv[0] or ""))
    assert got == [(u, n, rows) for u, (n, rows) in nulls_last]
    assert sum(r for _, _, r in got) == table.num_rows > 0


@pytest.mark.spark
@pytest.mark.example("query_state_with_duckdb.py")
def test_duckdb_example_runs(example):
    """examples/query_state_with_duckdb.py: its own streaming query, SQL over the state, one key."""
    # 500 customers, 100 per country; c7 bought in all three batches: 49 + 50 + 51
    assert [
        line.split(":")[1].split(",")[0].strip() for line in example.splitlines() if line.startswith("  country-")
    ] == ["100 customers"] * 5
    assert "customer c7: 3 purchases, 150 spent, in state partition" in example
