"""Group ids of decoded keys: equal rows share an id, numbered by first appearance."""

from __future__ import annotations

import datetime
import decimal

import numpy as np
import pyarrow as pa

from state_reader.grouping import dense_ids, group_ids


def _reference(values: list) -> list[int]:
    seen: dict[str, int] = {}
    return [seen.setdefault(repr(v), len(seen)) for v in values]


def test_struct_rows_with_nulls_at_every_level():
    rows = [
        {"s": "a", "n": 1, "w": {"start": datetime.datetime(2024, 1, 1), "end": None}},
        {"s": None, "n": 1, "w": None},
        {"s": "a", "n": 1, "w": {"start": datetime.datetime(2024, 1, 1), "end": None}},
        {"s": "a", "n": None, "w": {"start": None, "end": None}},
        {"s": None, "n": 1, "w": None},
        {"s": "", "n": 1, "w": {"start": None, "end": None}},
        {"s": "a", "n": None, "w": None},
        None,
        None,
    ]
    arr = pa.array(
        rows,
        pa.struct(
            [
                ("s", pa.string()),
                ("n", pa.int64()),
                ("w", pa.struct([("start", pa.timestamp("us")), ("end", pa.timestamp("us"))])),
            ]
        ),
    )
    assert group_ids(arr).tolist() == _reference(rows)


def test_types_that_arrow_cannot_dictionary_encode_fall_back_to_text():
    rows = [
        {"l": [1, 2], "d": decimal.Decimal("1.50")},
        {"l": [1], "d": decimal.Decimal("1.50")},
        {"l": [1, 2], "d": decimal.Decimal("1.50")},
        {"l": None, "d": None},
    ]
    arr = pa.array(rows, pa.struct([("l", pa.list_(pa.int32())), ("d", pa.decimal128(10, 2))]))
    assert group_ids(arr).tolist() == [0, 1, 0, 2]


def test_dense_ids_keep_first_appearance_order():
    assert dense_ids(np.array([7, 3, 7, 9, 3])).tolist() == [0, 1, 0, 2, 1]
    assert dense_ids(np.zeros(0, dtype=np.int64)).tolist() == []
    assert group_ids(pa.array([], pa.struct([("a", pa.int32())]))).tolist() == []
