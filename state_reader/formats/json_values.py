"""Arrow values as JSON values, and JSON values and text back as Arrow: one set of conventions for
what ``export`` writes (JSON, JSON lines, CSV cells) and what a rewrite reads back from those files.

Conventions: timestamps and dates ISO 8601, decimals as strings (exact), binary as base64,
day-time intervals as ISO 8601 durations (``P1DT2H3M4.5S``), calendar intervals as
``{"months", "days", "nanoseconds"}``, NaN/±Infinity as the strings ``"NaN"``, ``"Infinity"``,
``"-Infinity"``, maps with string keys as objects and other maps as lists of ``{"key", "value"}``,
repeated struct field names as ``name#2``, ``name#3``…

Reading back (:func:`objects_to_arrow`, :func:`text_to_arrow`) follows the structure of the
store's type and refuses what does not have it (a field missing or extra, a list where a struct
is), but leaves each plain value's type as the input gives it: a JSON number stays a number and a
CSV cell's number its number, for the rewrite's one check of values against the store's types.
Only text that a convention above writes for a type is parsed by that type (``"NaN"`` for a
double, ISO text for a timestamp, base64 for binary); CSV cells are all text, so each is parsed by
its field's type.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal, InvalidOperation
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from state_reader.errors import EditSchemaError, EditValueError

# ---------------------------------------------------------------------------
# Arrow -> JSON values


def unique_names(names: Iterable[str]) -> list[str]:
    """``names`` with repeats renamed ``name#2``, ``name#3``…"""
    seen: dict[str, int] = {}
    out = []
    for name in names:
        seen[name] = seen.get(name, 0) + 1
        out.append(name if seen[name] == 1 else f"{name}#{seen[name]}")
    return out


def _float(v: float) -> Any:
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "Infinity" if v > 0 else "-Infinity"
    return v


def _duration(td: dt.timedelta) -> str:
    sign = "-" if td < dt.timedelta(0) else ""
    td = abs(td)
    seconds = td.seconds + td.microseconds / 1e6
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    text = f"{sign}P{td.days}DT{int(hours)}H{int(minutes)}M"
    return text + (f"{secs:.6f}".rstrip("0").rstrip(".") + "S")


def _scalar(v: Any) -> Any:
    """One plain Python value (from ``to_pylist``) as a JSON value."""
    if v is None or isinstance(v, (bool, int, str)):
        return v
    if isinstance(v, float):
        return _float(v)
    if isinstance(v, Decimal):
        return str(v)
    if isinstance(v, dt.datetime):
        return v.isoformat()
    if isinstance(v, (dt.date, dt.time)):
        return v.isoformat()
    if isinstance(v, dt.timedelta):
        return _duration(v)
    if isinstance(v, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(v)).decode("ascii")
    if hasattr(v, "months") and hasattr(v, "days") and hasattr(v, "nanoseconds"):
        return {"months": v.months, "days": v.days, "nanoseconds": v.nanoseconds}
    return str(v)


def json_values(array: pa.Array | pa.ChunkedArray) -> list[Any]:
    """The values of ``array`` as JSON-ready Python values (None for null)."""
    if isinstance(array, pa.ChunkedArray):
        return [v for chunk in array.chunks for v in json_values(chunk)]
    typ = array.type
    if isinstance(array, pa.ExtensionArray):
        return json_values(array.storage)
    if pa.types.is_struct(typ):
        names = unique_names(f.name for f in typ)
        children = [json_values(child) for child in array.flatten()]  # flatten() honours slices and nulls
        valid = array.is_valid().to_pylist()
        return [
            dict(zip(names, (c[i] for c in children), strict=True)) if valid[i] else None for i in range(len(array))
        ]
    if pa.types.is_map(typ):
        # offsets index the whole key/item children, also for a sliced array
        offsets = array.offsets.to_pylist()
        keys, items = json_values(array.keys), json_values(array.items)
        valid = array.is_valid().to_pylist()
        string_keys = _string_keyed(typ)
        out: list[Any] = []
        for i in range(len(array)):
            if not valid[i]:
                out.append(None)
                continue
            lo, hi = offsets[i], offsets[i + 1]
            if string_keys:
                out.append(dict(zip(keys[lo:hi], items[lo:hi], strict=True)))
            else:
                out.append([{"key": k, "value": v} for k, v in zip(keys[lo:hi], items[lo:hi], strict=True)])
        return out
    if pa.types.is_list(typ) or pa.types.is_large_list(typ) or pa.types.is_fixed_size_list(typ):
        values = json_values(array.flatten())
        lengths = pc.list_value_length(array).to_pylist()
        out = []
        pos = 0
        for n in lengths:
            if n is None:
                out.append(None)
            else:
                out.append(values[pos : pos + n])
                pos += n
        return out
    return [_scalar(v) for v in array.to_pylist()]


def _string_keyed(typ: pa.MapType) -> bool:
    return bool(pa.types.is_string(typ.key_type) or pa.types.is_large_string(typ.key_type))


def render_compact(value: Any) -> str:
    """A JSON value as one short line: ``[1, 2, null]``, ``{"a": 1}``; strings bare."""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "))


# ---------------------------------------------------------------------------
# JSON values and text -> Arrow


def arrow_type_name(t: pa.DataType) -> str:
    """An Arrow type as Spark's ``simpleString`` names the type it stands for (``bigint``,
    ``struct<a:int>``); the Arrow name for types Spark has none of."""
    names = {
        pa.bool_(): "boolean",
        pa.int8(): "tinyint",
        pa.int16(): "smallint",
        pa.int32(): "int",
        pa.int64(): "bigint",
        pa.float32(): "float",
        pa.float64(): "double",
        pa.string(): "string",
        pa.large_string(): "string",
        pa.binary(): "binary",
        pa.large_binary(): "binary",
        pa.date32(): "date",
        pa.null(): "void",
    }
    if t in names:
        return names[t]
    if pa.types.is_timestamp(t):
        return "timestamp" if t.tz else "timestamp_ntz"
    if pa.types.is_decimal(t):
        return f"decimal({t.precision},{t.scale})"
    if pa.types.is_struct(t):
        return "struct<" + ",".join(f"{f.name}:{arrow_type_name(f.type)}" for f in t) + ">"
    if pa.types.is_map(t):
        return f"map<{arrow_type_name(t.key_type)},{arrow_type_name(t.item_type)}>"
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return f"array<{arrow_type_name(t.value_type)}>"
    return str(t)


def _row(rows: np.ndarray | None, i: int) -> int:
    return i if rows is None else int(rows[i])


def _shown(v: Any) -> str:
    text = str(v) if isinstance(v, (Decimal, dt.date, dt.datetime)) else repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


def refuse_value(what: str, row: int, path: str, value: Any, given: str, target: pa.DataType, why: str = "") -> None:
    """Raise the error for one value the store's type does not hold, naming the row, the field and both types."""
    raise EditValueError(
        f"{what} row {row}: {path} is {_shown(value)} ({given}), which the store's {arrow_type_name(target)} "
        f"does not hold{': ' + why if why else ''}"
    )


def _missing(v: Any) -> bool:
    # pandas marks a missing struct, list or map in an object column with None or NaN
    return v is None or (isinstance(v, float) and math.isnan(v))


def objects_to_arrow(
    values: Sequence[Any],
    target: pa.DataType,
    path: str,
    what: str,
    *,
    text: bool,
    rows: np.ndarray | None = None,
) -> pa.Array:
    """Python values (from JSON, or a pandas column of objects as ``to_pandas()`` gives them) as an
    Arrow array with ``target``'s structure: a struct from an object with exactly its fields
    (repeated names as ``name#2``), a list from a list, a map from an object, a list of
    ``{"key", "value"}`` or of pairs. Plain values keep the type Python gives them; with ``text``
    (values from a JSON file) a string is parsed where the conventions write the type as text.
    ``rows`` gives each value's row among the rows given (for messages)."""
    if pa.types.is_struct(target):
        return _struct(values, target, path, what, text, rows)
    if pa.types.is_map(target):
        return _map(values, target, path, what, text, rows)
    if pa.types.is_list(target) or pa.types.is_large_list(target):
        return _list(values, target, path, what, text, rows)
    return _plain(values, target, path, what, text, rows)


def _struct(
    values: Sequence[Any], target: pa.StructType, path: str, what: str, text: bool, rows: np.ndarray | None
) -> pa.Array:
    names = unique_names(f.name for f in target)
    expected = set(names)
    columns: list[list[Any]] = [[] for _ in names]
    valid = np.ones(len(values), dtype=bool)
    for i, v in enumerate(values):
        if _missing(v):
            valid[i] = False
            for column in columns:
                column.append(None)
            continue
        if not isinstance(v, Mapping):
            refuse_value(what, _row(rows, i), path, v, type(v).__name__, target)
        if v.keys() != expected:
            missing = [n for n in names if n not in v]
            extra = [str(k) for k in v if k not in expected]
            said = [f"missing field {path}.{n}" for n in missing] + [f"extra field {path}.{k}" for k in extra]
            raise EditSchemaError(
                f"{what} row {_row(rows, i)}: {path} does not have the store's fields ({', '.join(names)}): "
                f"{'; '.join(said)}"
            )
        for column, name in zip(columns, names, strict=True):
            column.append(v[name])
    children = [
        objects_to_arrow(column, f.type, f"{path}.{name}", what, text=text, rows=rows)
        for column, f, name in zip(columns, target, names, strict=True)
    ]
    mask = pa.array(~valid) if not valid.all() else None
    return pa.StructArray.from_arrays(children, names=names, mask=mask)


def _sequence(v: Any) -> bool:
    return isinstance(v, (list, tuple, np.ndarray))


def _list(
    values: Sequence[Any], target: pa.ListType, path: str, what: str, text: bool, rows: np.ndarray | None
) -> pa.Array:
    offsets = [0]
    flat: list[Any] = []
    parents: list[int] = []
    valid = np.ones(len(values), dtype=bool)
    for i, v in enumerate(values):
        if _missing(v):
            valid[i] = False
        elif _sequence(v):
            flat.extend(v)
            parents.extend([_row(rows, i)] * len(v))
        else:
            refuse_value(what, _row(rows, i), path, v, type(v).__name__, target)
        offsets.append(len(flat))
    elements = objects_to_arrow(
        flat, target.value_type, f"{path}[]", what, text=text, rows=np.asarray(parents, dtype=np.int64)
    )
    mask = pa.array(~valid) if not valid.all() else None
    return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), elements, mask=mask)


def _map(
    values: Sequence[Any], target: pa.MapType, path: str, what: str, text: bool, rows: np.ndarray | None
) -> pa.Array:
    offsets = [0]
    keys: list[Any] = []
    items: list[Any] = []
    parents: list[int] = []
    valid = np.ones(len(values), dtype=bool)
    for i, v in enumerate(values):
        if _missing(v):
            valid[i] = False
            offsets.append(len(keys))
            continue
        if isinstance(v, Mapping):
            pairs = list(v.items())
        elif _sequence(v) and all(_pair(p) for p in v):
            pairs = [(p["key"], p["value"]) if isinstance(p, Mapping) else tuple(p) for p in v]
        else:
            refuse_value(what, _row(rows, i), path, v, type(v).__name__, target)
        keys.extend(k for k, _ in pairs)
        items.extend(item for _, item in pairs)
        parents.extend([_row(rows, i)] * len(pairs))
        offsets.append(len(keys))
    at = np.asarray(parents, dtype=np.int64)
    key_array = objects_to_arrow(keys, target.key_type, f"{path}.key", what, text=text, rows=at)
    item_array = objects_to_arrow(items, target.item_type, f"{path}.value", what, text=text, rows=at)
    if key_array.null_count:
        first = int(np.flatnonzero(key_array.is_null().to_numpy(zero_copy_only=False))[0])
        raise EditValueError(f"{what} row {int(at[first])}: {path} has a null key; a map's keys cannot be null")
    return map_array(np.asarray(offsets, dtype=np.int64), key_array, item_array, valid)


def map_array(
    offsets: np.ndarray, keys: pa.Array, items: pa.Array, valid: np.ndarray | None, type: pa.DataType | None = None
) -> pa.MapArray:
    """A map array from its offsets, keys and items, entry ``i`` null where ``valid[i]`` is False."""
    if valid is None or valid.all():
        return pa.MapArray.from_arrays(pa.array(offsets, pa.int32()), keys, items, type=type)
    if (offsets[1:] != offsets[:-1])[~valid].any():
        # a null entry that spans elements: only a mask says it (pyarrow 17 and later)
        return pa.MapArray.from_arrays(pa.array(offsets, pa.int32()), keys, items, type=type, mask=pa.array(~valid))
    # before pyarrow 17 MapArray.from_arrays takes no mask: a null offset makes its entry null
    marked = [None if i < len(valid) and not valid[i] else int(o) for i, o in enumerate(offsets)]
    return pa.MapArray.from_arrays(pa.array(marked, pa.int32()), keys, items, type=type)


def _pair(p: Any) -> bool:
    if isinstance(p, Mapping):
        return p.keys() == {"key", "value"}
    return isinstance(p, tuple) and len(p) == 2


def _plain(
    values: Sequence[Any], target: pa.DataType, path: str, what: str, text: bool, rows: np.ndarray | None
) -> pa.Array:
    if text and _written_as_text(target):
        values = [
            _parse(v, target, path, what, _row(rows, i)) if isinstance(v, str) else v for i, v in enumerate(values)
        ]
    elif pa.types.is_interval(target):
        values = [_interval(v, target, path, what, _row(rows, i)) for i, v in enumerate(values)]
    if all(v is None for v in values):
        return pa.nulls(len(values), target)  # no value to type: nothing is converted
    try:
        return pa.array(values, from_pandas=False)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OverflowError, TypeError):
        pass
    # values of different kinds (text among numbers), or a number no Arrow type holds: name the first
    kinds = [_kind(v) for v in values]
    common = next((k for k in kinds if k is not None), None)
    for i, (v, kind) in enumerate(zip(values, kinds, strict=True)):
        if kind is not None and (kind != common or (isinstance(v, int) and not -(2**63) <= v < 2**63)):
            refuse_value(what, _row(rows, i), path, v, _kind_name(v), target)
    raise EditValueError(
        f"{what} {path}: values of kinds no one type holds ({', '.join(sorted(set(map(str, kinds))))})"
    )


def _kind(v: Any) -> str | None:
    if v is None:
        return None
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, (int, float, np.integer, np.floating)):
        return "number"
    if isinstance(v, dt.datetime):
        return "timestamp" if v.tzinfo is None else "timestamp with zone"
    return type(v).__name__


def _kind_name(v: Any) -> str:
    if isinstance(v, str):
        return "text"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int):
        return "integer"
    return type(v).__name__


def _written_as_text(target: pa.DataType) -> bool:
    return bool(
        pa.types.is_floating(target)
        or pa.types.is_decimal(target)
        or pa.types.is_date(target)
        or pa.types.is_timestamp(target)
        or pa.types.is_binary(target)
        or pa.types.is_large_binary(target)
        or pa.types.is_duration(target)
        or pa.types.is_time(target)
    )


_FLOAT_WORDS = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def _parse(v: str, target: pa.DataType, path: str, what: str, row: int) -> Any:
    """One value the conventions write as text, as the Python value it stands for."""
    try:
        if pa.types.is_floating(target):
            return _FLOAT_WORDS[v]
        if pa.types.is_decimal(target):
            number = Decimal(v)
            if not number.is_finite():
                raise ValueError
            return number
        if pa.types.is_date(target):
            return dt.date.fromisoformat(v)
        if pa.types.is_timestamp(target):
            return parse_timestamp(v, zoned=target.tz is not None)
        if pa.types.is_binary(target) or pa.types.is_large_binary(target):
            return base64.b64decode(v, validate=True)
        if pa.types.is_duration(target):
            return parse_duration(v)
        if pa.types.is_time(target):
            return dt.time.fromisoformat(v)
    except (KeyError, ValueError, InvalidOperation, binascii.Error):
        pass
    refuse_value(what, row, path, v, "text", target, _text_form(target))
    raise AssertionError("unreachable")


# what a type's text looks like, said when text does not parse as it
_TEXT_FORMS = (
    (pa.types.is_floating, 'a number, or "NaN", "Infinity", "-Infinity"'),
    (pa.types.is_timestamp, "ISO 8601 text such as 2023-11-14T22:13:50+00:00 (no offset: UTC)"),
    (pa.types.is_date, "ISO 8601 text such as 2023-11-14"),
    (lambda t: pa.types.is_binary(t) or pa.types.is_large_binary(t), "base64 text"),
    (pa.types.is_duration, "ISO 8601 duration such as P1DT2H3M4.5S"),
)


def _text_form(target: pa.DataType) -> str:
    return next((form for check, form in _TEXT_FORMS if check(target)), "")


_TIMESTAMP = re.compile(
    r"(\d{4}-\d{2}-\d{2})(?:[T ](\d{2}):(\d{2})(?::(\d{2})(?:\.(\d{1,9}))?)?)?\s*(Z|UTC|[+-]\d{2}(?::?\d{2})?)?"
)


def parse_timestamp(text: str, *, zoned: bool) -> dt.datetime:
    """ISO 8601 text (``T`` or a space between date and time, as ``show`` prints it) as a datetime:
    with ``zoned``, aware (text without an offset is UTC, the zone state is read in); else naive
    (text with an offset is refused: a ``timestamp_ntz`` has no zone). Digits past microseconds
    must be zeros."""
    m = _TIMESTAMP.fullmatch(text.strip())
    if m is None:
        raise ValueError(text)
    day, hour, minute, second, fraction, zone = m.groups()
    if fraction and fraction[6:].strip("0"):
        raise ValueError(text)  # below a microsecond: a timestamp does not hold it
    micros = int((fraction or "0")[:6].ljust(6, "0"))
    value = dt.datetime.combine(
        dt.date.fromisoformat(day), dt.time(int(hour or 0), int(minute or 0), int(second or 0), micros)
    )
    if zone is None or zone in ("Z", "UTC"):
        offset = dt.timedelta(0)
    else:
        digits = zone[1:].replace(":", "")
        offset = dt.timedelta(hours=int(digits[:2]), minutes=int(digits[2:] or 0))
        offset = -offset if zone[0] == "-" else offset
    if not zoned:
        if zone is not None:
            raise ValueError(text)
        return value
    return value.replace(tzinfo=dt.timezone(offset)).astimezone(dt.timezone.utc)


_DURATION = re.compile(r"(-)?P(\d+)DT(\d+)H(\d+)M(\d+(?:\.\d{1,6})?)S")


def parse_duration(text: str) -> dt.timedelta:
    """The ISO 8601 duration the conventions write (``P1DT2H3M4.5S``, ``-P0DT0H0M1S``)."""
    m = _DURATION.fullmatch(text.strip())
    if m is None:
        raise ValueError(text)
    sign, days, hours, minutes, seconds = m.groups()
    whole, _, fraction = seconds.partition(".")
    value = dt.timedelta(
        days=int(days),
        hours=int(hours),
        minutes=int(minutes),
        seconds=int(whole),
        microseconds=int(fraction.ljust(6, "0")),
    )
    return -value if sign else value


def _interval(v: Any, target: pa.DataType, path: str, what: str, row: int) -> Any:
    if v is None or not pa.types.is_interval(target):
        return v
    if isinstance(v, Mapping) and v.keys() == {"months", "days", "nanoseconds"}:
        return (v["months"], v["days"], v["nanoseconds"])
    if hasattr(v, "months") and hasattr(v, "days") and hasattr(v, "nanoseconds"):
        return v
    refuse_value(what, row, path, v, type(v).__name__, target, '{"months", "days", "nanoseconds"}')
    raise AssertionError("unreachable")


def text_to_arrow(cells: pa.Array, target: pa.DataType, path: str, what: str) -> pa.Array:
    """A CSV column (text, null where the cell is empty) as Arrow: a list, map or struct from its
    JSON text, text as it is, a number as the number it spells (for the check against the store's
    type), any other value parsed by ``target``'s convention."""
    if isinstance(cells, pa.ChunkedArray):
        cells = cells.combine_chunks()
    if pa.types.is_string(target) or pa.types.is_large_string(target):
        return cells
    if pa.types.is_nested(target):
        values = []
        for i, cell in enumerate(cells.to_pylist()):
            try:
                values.append(None if cell is None else json.loads(cell))
            except json.JSONDecodeError as exc:
                refuse_value(what, i, path, cell, "text", target, f"not JSON ({exc})")
        return objects_to_arrow(values, target, path, what, text=True)
    if pa.types.is_integer(target) or pa.types.is_floating(target):
        for spelled in (pa.int64(), pa.float64()):
            try:
                return cells.cast(spelled)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                continue
        _refuse_first(cells, target, path, what, lambda s: float(s))
    if pa.types.is_boolean(target):
        try:
            return pc.utf8_lower(cells).cast(pa.bool_())
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            _refuse_first(cells, target, path, what, lambda s: {"true": True, "false": False}[s.lower()])
    return _plain(cells.to_pylist(), target, path, what, True, None)


def _refuse_first(cells: pa.Array, target: pa.DataType, path: str, what: str, parse: Any) -> None:
    for i, cell in enumerate(cells.to_pylist()):
        if cell is None:
            continue
        try:
            parse(cell)
        except (ValueError, KeyError):
            refuse_value(what, i, path, cell, "text", target)
    raise EditValueError(f"{what} {path}: text that {arrow_type_name(target)} does not hold")
