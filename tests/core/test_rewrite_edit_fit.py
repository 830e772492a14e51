"""Rows written into a store are checked one way whatever form they come in (``core/rewrite/edit_fit``):
the same rows as pyarrow, Parquet, pandas (nested as ``to_pandas()`` gives them, or dotted), JSON lines,
a JSON array and CSV get the same verdict and the same bytes; a value the store's type does not hold
exactly is refused naming the row, the field and both types; and what ``export`` writes comes back
unchanged."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

import state_reader
from state_reader.core.rewrite.edit_fit import EditMode, conform_column, require_columns, require_non_null, typed_table
from state_reader.errors import EditNullError, EditSchemaError, EditValueError, InvalidEditError
from state_reader.formats.flatten import flatten_table, json_rows
from state_reader.formats.json_values import json_values
from state_reader.formats.spark_types import parse_ddl
from state_reader.formats.unsaferow_encode import encode_rows
from state_reader.fronts.cli import cli
from state_reader.fronts.cli_rewrite import read_rows_file
from state_reader.inspect.export import _CsvWriter, _JsonArrayWriter, _JsonlWriter
from tests.support.resume import assert_builtin_sees_same_state, digest, state_rows, stored_rows
from tests.support.streaming_queries import QUERIES, session_confs

# -- one store, every form: Spark-free --------------------------------------------------------------

KEY = parse_ddl("user STRING, window STRUCT<start: TIMESTAMP, end: TIMESTAMP>")
# an aggregation buffer repeats names (count, sum, sum), as Spark's avg and sum together keep them
VALUE = parse_ddl(
    "count BIGINT, sum INT, sum INT, avg DOUBLE, ratio FLOAT, price DECIMAL(10,2), raw BINARY, day DATE, "
    "seen TIMESTAMP, tags ARRAY<STRING>, totals MAP<STRING,BIGINT>, note STRING"
)
TYPED = [("key", KEY), ("value", VALUE)]
T = dt.datetime(2023, 11, 14, 22, 13, 50, tzinfo=dt.timezone.utc)


def _rows() -> pa.Table:
    """Three rows of the store, typed exactly as ``read_state`` types them (NaN, nulls, an empty map)."""
    key = pa.array(
        [{"user": u, "window": {"start": T, "end": T + dt.timedelta(minutes=5)}} for u in ("ann", "bob", "cy")],
        KEY.to_arrow(),
    )
    names = ["count", "sum", "sum#2", "avg", "ratio", "price", "raw", "day", "seen", "tags", "totals", "note"]
    fields = [f.to_arrow() for f in VALUE.fields]
    columns = [
        pa.array([1, 2, 3], pa.int64()),
        pa.array([10, None, -7], pa.int32()),
        pa.array([5, 6, 2**31 - 1], pa.int32()),
        pa.array([float("nan"), 1.5, float("-inf")]),
        pa.array([0.25, None, 3.5], pa.float32()),
        pa.array([Decimal("1.25"), Decimal("-0.50"), None], pa.decimal128(10, 2)),
        pa.array([b"\x00\xff", b"", None]),
        pa.array([dt.date(2024, 2, 29), None, dt.date(1970, 1, 1)]),
        pa.array([T, None, T + dt.timedelta(microseconds=123456)], pa.timestamp("us", "UTC")),
        pa.array([["a", None, ""], [], None], pa.list_(pa.string())),
        pa.array([[("x", 1)], [], None], pa.map_(pa.string(), pa.int64())),
        pa.array(["", None, "ü€😀"]),
    ]
    value = pa.StructArray.from_arrays(
        [c.cast(f.type) for c, f in zip(columns, fields, strict=True)],
        fields=[f.with_name(n) for f, n in zip(fields, names, strict=True)],
    )
    return pa.table({"key": key, "value": value})


def _written(path: Path, table: pa.Table) -> Path:
    """``table`` in the file format ``path`` names, as ``export`` writes it."""
    writers = {".csv": _CsvWriter, ".jsonl": _JsonlWriter, ".json": _JsonArrayWriter}
    if path.suffix == ".parquet":
        pq.write_table(table, path)
        return path
    writer = writers[path.suffix](str(path))
    for batch in table.to_batches():
        writer.write(batch)
    writer.close()
    return path


def _forms(table: pa.Table, tmp_path: Path) -> dict:
    """The same rows in every form a rewrite takes."""
    flat = flatten_table(table)
    return {
        "pyarrow": table,
        "pyarrow dotted": flat,
        "pandas": table.to_pandas(),
        "pandas dotted": flat.to_pandas(),
        **{
            suffix: read_rows_file(str(_written(tmp_path / f"rows{suffix}", table)), "--upsert")
            for suffix in (".parquet", ".jsonl", ".json", ".csv")
        },
    }


def _with_avg(table: pa.Table, row: int, avg) -> pa.Array:
    value = table.column("value").combine_chunks()
    avgs = value.field(3).to_pylist()
    avgs[row] = avg
    children = [value.field(i) if i != 3 else pa.array(avgs) for i in range(value.type.num_fields)]
    return pa.StructArray.from_arrays(children, fields=list(value.type))


def _verdict(rows) -> tuple[type, str] | bytes:
    """What the rewrite's check makes of ``rows``: the error (class, message), or the encoded bytes of
    the keys and values it would write."""
    try:
        table = typed_table(rows, EditMode.UPSERT, TYPED)
        require_columns(table, ("key", "value"), EditMode.UPSERT, "the store", typed=TYPED)
        notes: list[str] = []
        keys = conform_column(table.column("key"), KEY, "key", EditMode.UPSERT, notes)
        require_non_null(keys, KEY, "key", EditMode.UPSERT)
        values = conform_column(table.column("value"), VALUE, "value", EditMode.UPSERT, notes)
        require_non_null(values, VALUE, "value", EditMode.UPSERT)
    except InvalidEditError as exc:
        return type(exc), exc.message
    encoded = [encode_rows(keys, KEY, "key"), encode_rows(values, VALUE, "value")]
    return b"|".join(bytes(r.buf[s : s + n]) for r in encoded for s, n in zip(r.starts, r.lengths, strict=True))


def test_the_same_rows_in_every_form_are_written_as_the_same_bytes(tmp_path):
    table = _rows()
    expected = _verdict(table)
    assert isinstance(expected, bytes)
    forms = _forms(table, tmp_path)
    for form, rows in forms.items():
        if form != "pandas dotted":
            assert _verdict(rows) == expected, form
    # a flat pandas float column holds a null as NaN: which one a NaN there stands for is not guessed
    assert _verdict(forms["pandas dotted"]) == (
        EditValueError,
        "upsert row 0: value.avg is NaN in a pandas float64 column, where NaN stands for both a null and the "
        "number NaN: give the column as pandas' nullable Float64 (pd.NA for null), or the rows nested as "
        "read_state(...).to_pandas() gives them (None for null)",
    )
    frame = forms["pandas dotted"]
    for column in ("value.avg", "value.ratio"):
        frame[column] = frame[column].astype("Float64")
    frame.loc[0, "value.avg"] = np.nan  # pandas' Float64 keeps NaN apart from pd.NA only through its arrays
    assert _verdict(frame) == _verdict(table.set_column(1, "value", _with_avg(table, 0, None)))


def _mutated(change) -> pa.Table:
    """The rows with ``change`` applied to their JSON values (the mutation, once, for every form)."""
    table = _rows()
    rows = [{"key": k, "value": v} for k, v in zip(json_values(table["key"]), json_values(table["value"]), strict=True)]
    change(rows)
    return rows


def _drop(field):
    return lambda rows: [r["value"].pop(field) for r in rows]


def _set(row, path, value):
    def change(rows):
        *parents, leaf = path.split(".")
        node = rows[row]
        for p in parents:
            node = node[p]
        node[leaf] = value

    return change


def _rename_key(rows):
    for r in rows:
        r["key"]["usr"] = r["key"].pop("user")


def _extra(rows):
    for r in rows:
        r["value"]["extra"] = 1


def _no_value(rows):
    for r in rows:
        r.pop("value")


MUTATIONS = {
    "a key field renamed": (_rename_key, EditSchemaError, r"key\.usr"),
    "a value field missing": (_drop("avg"), EditSchemaError, r"value\.avg"),
    "an extra value field": (_extra, EditSchemaError, r"extra (field|column) value\.extra"),
    "text in an integer field": (_set(1, "value.count", "seven"), EditValueError, r"row 1: value\.count is 'seven'"),
    "1.5 in an integer field": (_set(2, "value.count", 1.5), EditValueError, r"row 2: value\.count is 1\.5 .*bigint"),
    "3e9 in an int field": (_set(0, "value.sum#2", 3e9), EditValueError, r"row 0: value\.sum#2 is 3000000000"),
    "a decimal past its scale": (_set(1, "value.price", "1.255"), EditValueError, r"row 1: value\.price is 1\.255"),
    "a null key field": (_set(0, "key.user", None), None, None),  # nullable in the schema: written
    "no value column": (_no_value, EditSchemaError, "missing column value"),
}


@pytest.mark.parametrize("mutation", list(MUTATIONS))
def test_a_mutation_gets_the_same_verdict_in_every_form(tmp_path, mutation):
    change, error, match = MUTATIONS[mutation]
    rows = _mutated(change)
    names = list(rows[0])
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    from_json = read_rows_file(str(path), "--upsert")
    verdicts = {"jsonl": _verdict(from_json)}
    if error is None:
        assert isinstance(verdicts["jsonl"], bytes)
        return
    assert verdicts["jsonl"][0] is error or issubclass(verdicts["jsonl"][0], error), verdicts
    import re

    assert re.search(match, verdicts["jsonl"][1]), verdicts["jsonl"][1]
    # pandas holds the JSON objects as they are; CSV flattens them (text typed by the store); every form refuses
    import pandas as pd

    verdicts["pandas"] = _verdict(pd.DataFrame({n: [r[n] for r in rows] for n in names}))
    for form, verdict in verdicts.items():
        assert not isinstance(verdict, bytes), form
        assert issubclass(verdict[0], EditSchemaError), (form, verdict)


def test_pyarrow_built_by_hand_takes_pythons_ints_and_floats_where_every_value_fits(tmp_path):
    """``pa.Table.from_pylist`` gives int64 and double where the store has int and float: accepted
    where each value fits exactly, and said in the report; refused naming the row where one does not."""
    table = _rows()
    rows = [{"key": k, "value": v} for k, v in zip(json_values(table["key"]), json_values(table["value"]), strict=True)]
    for r in rows:
        r["value"] = {k: (None if v in ("NaN",) else v) for k, v in r["value"].items()}
    hand = pa.Table.from_pylist(
        [{"key": {"user": r["key"]["user"], "window": None}, "value": {"count": 1, "sum": 2, "sum#2": 3}} for r in rows]
    )
    key = parse_ddl("user STRING, window STRUCT<start: TIMESTAMP, end: TIMESTAMP>")
    value = parse_ddl("count BIGINT, sum INT, sum INT")
    table = typed_table(hand, EditMode.UPSERT, [("key", key), ("value", value)])
    notes: list[str] = []
    out = conform_column(table.column("value"), value, "value", EditMode.UPSERT, notes)
    assert out.type == value.to_arrow()
    assert notes == [
        "upsert field value.sum: bigint converted to int, every value fits",
        "upsert field value.sum#2: bigint converted to int, every value fits",
    ]
    too_big = pa.Table.from_pylist([{"value": {"count": 1, "sum": 2**31, "sum#2": 0}}])
    with pytest.raises(
        EditValueError, match=r"upsert row 0: value\.sum is 2147483648 \(bigint\), which the store's int"
    ):
        conform_column(too_big.column("value"), value, "value", EditMode.UPSERT, [])


def test_a_double_into_a_float_is_rounded_as_sparks_cast_rounds_it():
    value = parse_ddl("ratio FLOAT")
    given = pa.table({"value": pa.array([{"ratio": 0.1}, {"ratio": 1e39}])})
    notes: list[str] = []
    with pytest.raises(EditValueError, match=r"row 1: value\.ratio is 1e\+39"):
        conform_column(given.column("value"), value, "value", EditMode.UPSERT, notes)
    out = conform_column(given.slice(0, 1).column("value"), value, "value", EditMode.UPSERT, notes)
    assert out.field(0).to_numpy()[0] == np.float32(0.1)  # round to nearest, as Java's (float) cast
    assert notes == ["upsert field value.ratio: double converted to float, rounded as Spark's cast rounds it"]


def test_a_flat_pandas_seed_is_told_the_columns_it_needs():
    import pandas as pd

    table = typed_table(pd.DataFrame({"user": ["ann"], "count": [1]}), EditMode.UPSERT, TYPED)
    with pytest.raises(EditSchemaError, match=r"key, value \(nested.*dotted columns key\.user, key\.window\.start"):
        require_columns(table, ("key", "value"), EditMode.UPSERT, "the store", typed=TYPED)


def test_pandas_nan_is_missing_in_an_integer_and_not_guessed_in_a_double():
    """A pandas float column: an integer column with a missing value (pandas holds it as floats) writes
    a null there; in a double, NaN could be the number or a null, and is refused."""
    import pandas as pd

    value = parse_ddl("n BIGINT, d DOUBLE")
    typed = [("key", parse_ddl("user STRING")), ("value", value)]
    frame = pd.DataFrame({"key.user": ["a", "b"], "value.n": [1.0, np.nan], "value.d": [0.5, 2.0]})
    out = conform_column(
        typed_table(frame, EditMode.UPSERT, typed).column("value"), value, "value", EditMode.UPSERT, []
    )
    assert json_values(out) == [{"n": 1, "d": 0.5}, {"n": None, "d": 2.0}]
    frame.loc[1, "value.d"] = np.nan
    with pytest.raises(EditValueError, match=r"row 1: value\.d is NaN in a pandas float64 column"):
        typed_table(frame, EditMode.UPSERT, typed)


def test_a_delete_naming_a_field_the_key_does_not_have_is_refused():
    import pandas as pd

    frame = pd.DataFrame({"key": [{"usr": "ann", "window": None}]})
    with pytest.raises(EditSchemaError, match=r"missing field key\.user; extra field key\.usr"):
        typed_table(frame, EditMode.DELETE, TYPED[:1])


def test_csv_takes_timestamps_as_show_prints_them(tmp_path):
    path = tmp_path / "keys.csv"
    path.write_text('"key.user","key.window.start","key.window.end"\n"ann",2023-11-14 22:13:50,2023-11-14T22:18:50Z\n')
    table = typed_table(read_rows_file(str(path), "--delete"), EditMode.DELETE, TYPED[:1])
    keys = conform_column(table.column("key"), KEY, "key", EditMode.DELETE, [])
    assert keys.to_pylist() == [{"user": "ann", "window": {"start": T, "end": T + dt.timedelta(minutes=5)}}]
    require_non_null(keys, KEY, "key", EditMode.DELETE)
    with pytest.raises(EditNullError):
        require_non_null(pa.nulls(1, KEY.to_arrow()), KEY, "key", EditMode.DELETE)


# -- export, then upsert: nothing changes ----------------------------------------------------------------

# a store of every kind the rewrite writes, on both providers, and every type the suite's stores hold
ROUND_TRIP = [
    ("agg_window", ()),
    ("agg_fmt1", ()),
    ("types", ()),
    ("dedup", ()),
    ("session_window", ()),
    ("apply_in_pandas", ()),
    ("rocksdb_cl_dedup", ()),
    ("rocksdb_agg_fmt2", ()),
    ("tws", ("--state-var-name", "profile")),
    ("tws", ("--state-var-name", "events")),
    ("tws", ("--state-var-name", "counters")),
    ("tws_avro", ("--state-var-name", "counters")),
]
FORMATS = ("parquet", "jsonl", "json", "csv")


def _sorted_rows(table: pa.Table) -> list[str]:
    return sorted(json.dumps(row, sort_keys=True) for row in json_rows(table))


def _cli(*args) -> str:
    result = CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.parametrize(("name", "selector"), ROUND_TRIP, ids=[f"{n}{'-' + s[1] if s else ''}" for n, s in ROUND_TRIP])
def test_export_then_upsert_changes_nothing(spark, checkpoints, tmp_path, name, selector):
    """``state-reader export CP --out f`` then ``state-reader rewrite CP DST --upsert f``, in every format
    export writes: every key replaced by itself, the same bytes written whatever the format, and Spark's
    built-in reader sees the source's state in the result."""
    src = checkpoints(name)
    before = digest(src)
    options = {"state_var_name": selector[1]} if selector else {}
    expected = state_reader.read_state(src, **options)
    assert expected.num_rows
    written = {}
    for fmt in FORMATS:
        out = tmp_path / f"rows.{fmt}"
        _cli("export", src, "--out", out, *selector)
        dst = tmp_path / fmt
        report = json.loads(_cli("rewrite", src, dst, "--upsert", out, *selector, "--allow-uncommitted", "--json"))
        (store,) = [s for s in report["stores"] if s.get("replaced")]
        # every key replaced by itself (a list's elements are one key's value)
        assert (store["gained"], store["lost"]) == (0, 0) and 0 < store["replaced"] <= expected.num_rows, fmt
        assert _sorted_rows(state_reader.read_state(str(dst), **options)) == _sorted_rows(expected), fmt
        written[fmt] = stored_rows(str(dst))
    assert all(w == written["parquet"] for w in written.values()), "the formats wrote different bytes"
    assert digest(src) == before, "the source changed"
    if selector:  # a variable of transformWithState: Spark's reader takes its name
        with session_confs(spark, QUERIES[name].confs):
            var = {"stateVarName": selector[1]}
            assert state_rows(spark, str(tmp_path / "parquet"), **var) == state_rows(spark, src, **var)
    else:
        assert_builtin_sees_same_state(spark, src, str(tmp_path / "parquet"), report["new"]["partitions"])


def test_values_inside_lists_and_maps_are_checked_and_named_by_their_row():
    value = parse_ddl("tags ARRAY<INT>, totals MAP<STRING,INT>")
    given = pa.table(
        {
            "value": pa.StructArray.from_arrays(
                [
                    pa.array([[1, 2], None, [3]], pa.list_(pa.int64())),
                    pa.array([[("a", 1)], [], None], pa.map_(pa.string(), pa.int64())),
                ],
                names=["tags", "totals"],
            )
        }
    )
    notes: list[str] = []
    out = conform_column(given.column("value"), value, "value", EditMode.UPSERT, notes)
    assert out.type == value.to_arrow()
    assert json_values(out) == [
        {"tags": [1, 2], "totals": {"a": 1}},
        {"tags": None, "totals": {}},
        {"tags": [3], "totals": None},
    ]
    assert notes == [
        "upsert field value.tags[]: bigint converted to int, every value fits",
        "upsert field value.totals.value: bigint converted to int, every value fits",
    ]
    wide = pa.table({"value": pa.array([{"tags": [1], "totals": None}, {"tags": [2, 2**40], "totals": None}])})
    wide = wide.set_column(
        0,
        "value",
        pa.StructArray.from_arrays(
            [wide["value"].combine_chunks().field(0), pa.nulls(2, pa.map_(pa.string(), pa.int64()))],
            names=["tags", "totals"],
        ),
    )
    with pytest.raises(EditValueError, match=r"upsert row 1: value\.tags\[\] is 1099511627776 \(bigint\)"):
        conform_column(wide.column("value"), value, "value", EditMode.UPSERT, [])


def test_an_edits_mode_is_the_word_its_messages_and_keywords_say():
    assert [mode.value for mode in EditMode] == ["upsert", "delete"]
    assert f"{EditMode.UPSERT} row 3" == "upsert row 3" and str(EditMode.DELETE) == "delete"
    with pytest.raises(EditNullError, match=r"^\[\w+\] delete row 0 has a null key"):
        require_non_null(pa.nulls(1, KEY.to_arrow()), KEY, "key", EditMode.DELETE)


# -- every store kind x every form x every mutation: refused, nothing written ------------------------------

MUTATED_STORES = [
    ("agg_window", {}),
    ("session_window", {}),
    ("apply_in_pandas", {}),
    ("rocksdb_cl_dedup", {}),
    ("rocksdb_agg_fmt2", {}),
    ("tws", {"state_var_name": "profile"}),
    ("tws", {"state_var_name": "counters"}),
]


def _value_column(row: dict) -> str:
    """The column holding a row's value: ``value``, a map entry's ``user_map_value``, a list's element."""
    return next(c for c in ("value", "user_map_value", "list_element") if c in row)


def _first_int_field(rows: list[dict]) -> str | None:
    value = rows[0].get(_value_column(rows[0]))
    if not isinstance(value, dict):
        return None
    return next((k for k, v in value.items() if isinstance(v, int) and not isinstance(v, bool)), None)


def _rename_first_key_field(rows):
    for r in rows:
        if isinstance(r["key"], dict):
            first = next(iter(r["key"]))
            r["key"] = {(f"{k}_x" if k == first else k): v for k, v in r["key"].items()}


def _drop_first_value_field(rows):
    for r in rows:
        value = r[_value_column(r)]
        value.pop(next(iter(value)))


def _set_first_int(value):
    def change(rows):
        rows[0][_value_column(rows[0])][_first_int_field(rows)] = value

    return change


def _add_extra(rows):
    for r in rows:
        r[_value_column(r)]["extra"] = 1


def _twice(rows):
    rows.append(dict(rows[0]))


def _without_value(rows):
    for r in rows:
        r.pop(_value_column(r))


STORE_MUTATIONS = {
    "a key field renamed": (_rename_first_key_field, EditSchemaError),
    "a value field missing": (_drop_first_value_field, EditSchemaError),
    "an extra value field": (_add_extra, EditSchemaError),
    "text in an integer field": (_set_first_int("seven"), EditSchemaError),
    "1.5 in an integer field": (_set_first_int(1.5), EditSchemaError),
    "the same key twice": (_twice, state_reader.DuplicateEditKeyError),
    "no value column": (_without_value, EditSchemaError),
}


def _json_ready(value):
    """A Python value as the JSON conventions write it (what export writes of the same value)."""
    from state_reader.formats.json_values import _scalar

    if isinstance(value, dict):
        return {k: _json_ready(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_ready(v) for v in value]
    return _scalar(value)


def _csv_text(rows: list[dict], path: Path) -> Path:
    """The rows flattened to dotted columns, as export writes a CSV (strings quoted, a null an empty cell)."""

    def flat(prefix, value, out):
        if isinstance(value, dict):
            for k, v in value.items():
                flat(f"{prefix}.{k}" if prefix else k, v, out)
        else:
            out[prefix] = value

    table = []
    for r in rows:
        out: dict = {}
        flat("", _json_ready(r), out)
        table.append(out)
    names = list(table[0])
    with open(path, "w", newline="", encoding="utf-8") as fh:
        fh.write(",".join(f'"{n}"' for n in names) + "\n")
        for out in table:
            cells = []
            for n in names:
                v = out.get(n)
                if v is None:
                    cells.append("")
                elif isinstance(v, str):
                    cells.append('"' + v.replace('"', '""') + '"')
                elif isinstance(v, (list, dict)):
                    cells.append('"' + json.dumps(v).replace('"', '""') + '"')
                else:
                    cells.append(json.dumps(v))
            fh.write(",".join(cells) + "\n")
    return path


def _mutated_forms(rows: list[dict], tmp_path: Path) -> dict:
    """The mutated rows in every form: pyarrow built from them, Parquet, pandas, JSON lines, JSON, CSV."""
    import pandas as pd

    forms: dict = {}
    try:
        table = pa.Table.from_pylist(rows)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        table = None  # text and numbers in one column: pyarrow itself refuses to build the table
    if table is not None:
        forms["pyarrow"] = table
        try:
            pq.write_table(table, tmp_path / "rows.parquet")
            forms["parquet"] = read_rows_file(str(tmp_path / "rows.parquet"), "--upsert")
        except pa.ArrowNotImplementedError:
            pass  # a struct left with no field: Parquet itself cannot hold it
    forms["pandas"] = pd.DataFrame({name: [r.get(name) for r in rows] for name in rows[0]})
    ready = [_json_ready(r) for r in rows]
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ready), encoding="utf-8")
    (tmp_path / "rows.json").write_text(json.dumps(ready), encoding="utf-8")
    forms["jsonl"] = read_rows_file(str(tmp_path / "rows.jsonl"), "--upsert")
    forms["json"] = read_rows_file(str(tmp_path / "rows.json"), "--upsert")
    forms["csv"] = read_rows_file(str(_csv_text(rows, tmp_path / "rows.csv")), "--upsert")
    return forms


@pytest.mark.parametrize("mutation", list(STORE_MUTATIONS))
@pytest.mark.parametrize(
    ("name", "options"), MUTATED_STORES, ids=[f"{n}{'-' + o['state_var_name'] if o else ''}" for n, o in MUTATED_STORES]
)
def test_a_mutated_seed_is_refused_in_every_form_and_nothing_is_written(checkpoints, tmp_path, name, options, mutation):
    src = checkpoints(name)
    base = state_reader.read_state(src, **options).drop(["partition_id"])
    rows = base.to_pylist()
    change, error = STORE_MUTATIONS[mutation]
    if "integer" in mutation and _first_int_field(rows) is None:
        pytest.skip("the store's value holds no integer field")
    change(rows)
    before = digest(src)
    forms = _mutated_forms(rows, tmp_path)
    assert {"pandas", "jsonl", "json", "csv"} <= set(forms)
    for form, given in forms.items():
        dst = tmp_path / f"dst-{form.replace(' ', '-')}"
        with pytest.raises(error) as refused:
            state_reader.rewrite(src, str(dst), upsert=given, allow_uncommitted=True, **options)
        assert not dst.exists() or not any(dst.iterdir()), f"{form}: something was written"
        assert refused.value.message, form
    # the unmutated rows in every form are taken (written in a dry run)
    for form, given in _mutated_forms(base.to_pylist(), tmp_path).items():
        report = state_reader.rewrite(src, upsert=given, dry_run=True, allow_uncommitted=True, **options)
        assert report.summary()["stores"], form
    assert digest(src) == before


def test_a_large_integer_beside_a_null_is_converted_exactly():
    """numpy holds an integer column with a null as floats: the check must not round 2**53 + 1 on the way."""
    value = parse_ddl("n BIGINT")
    given = pa.table({"value": pa.StructArray.from_arrays([pa.array([2**53 + 1, None], pa.uint64())], names=["n"])})
    out = conform_column(given.column("value"), value, "value", EditMode.UPSERT, [])
    assert out.field(0).to_pylist() == [2**53 + 1, None]
