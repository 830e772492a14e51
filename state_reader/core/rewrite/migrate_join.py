"""A stream-stream join's state format (``spark.sql.streaming.join.stateFormatVersion``) changed by a rewrite:
which directions are written, and how a side's buffered rows change between formats 1 and 2.

Formats 1 and 2 keep the same four stores; format 2 appends a ``matched`` boolean to each row of
``<side>-keyWithIndexToValue`` (whether the row has joined with a row of the other side; an outer join emits a
row never matched, padded with nulls, when it is evicted; a left semi join emits a row once). The counts
(``<side>-keyToNumValues``) and the keys are the same in both, so only those values change:

- 2 -> 1 drops the flag. Spark's format-1 code reads every row as not matched, whatever it was, so the rewritten
  state is what a format-1 run would hold (format 1 never tracked it).
- 1 -> 2 appends ``matched = false`` to every row: exactly what Spark's own format-1 code reads each of them as
  (``StreamingSymmetricHashJoinValueRowConverterFormatV1``), so the resumed query treats the rows buffered at
  the rewrite as the format-1 query would have (an outer join emits each, null-padded, at eviction even if it
  matched; a left semi join may emit it again), and the rows added after it by format 2's rules. An inner join
  never reads the flag: its output is that of a run in format 2 from the start.

Formats 3 and 4 keep the join in column families of one RocksDB store (4 indexed by event time): a join from
format 2, 3 or 4 into either is rewritten whole (:mod:`~state_reader.core.rewrite.migrate_join_families`), and
one in 3 or 4 is split back into the separate stores of format 2, or of format 1 through 2 in the same pass
(:mod:`~state_reader.core.rewrite.migrate_join_split`). Format 1 goes into 3 or 4 through 2 in two rewrites:
refused, with the reason.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from state_reader.errors import UnsupportedConfChangeError
from state_reader.formats.spark_types import DataType, StructField, StructType
from state_reader.formats.unsaferow import RowBuffer
from state_reader.formats.unsaferow_encode import splice_rows
from state_reader.model.checkpoint import MATCHED_FIELD
from state_reader.model.conf import CONF_JOIN_FORMAT
from state_reader.model.plan import StateReadPlan

# what a format change does to one store's values: (keys, values, old plan, new plan, source) -> new values
Convert = Callable[[RowBuffer, RowBuffer, StateReadPlan, StateReadPlan, str], RowBuffer]

# the formats whose stores are the four separate ones a value migration rewrites
SEPARATE_STORES = ("1", "2")
VALUES_STORE_SUFFIX = "-keyWithIndexToValue"
# an UnsafeRow of one boolean field, false: the null bits word and the field's slot, both zero
_FALSE_ROW = bytes(16)
# the flag format 2 appends, as Spark declares it
MATCHED = StructField(MATCHED_FIELD, DataType("boolean", json_name="boolean"), True)


# the formats a join is rewritten into as column families of one RocksDB store, from formats 2, 3 and 4
FAMILY_FORMATS = ("3", "4")


def into_families(old: str | None, new: str) -> bool:
    """Whether a change of the join format from ``old`` to ``new`` rewrites the join as column families
    (:mod:`~state_reader.core.rewrite.migrate_join_families`), rather than each store's values."""
    return new in FAMILY_FORMATS and old in ("2", *FAMILY_FORMATS)


def out_of_families(old: str | None, new: str) -> bool:
    """Whether a change of the join format from ``old`` to ``new`` splits the join's column families into the
    separate stores (:mod:`~state_reader.core.rewrite.migrate_join_split`): format 2's, and on to format 1."""
    return old in FAMILY_FORMATS and new in SEPARATE_STORES


def refusal(old: str | None, new: str) -> str | None:
    """Why a change of the join format from ``old`` to ``new`` is not written (None: it is)."""
    if old in SEPARATE_STORES and new in SEPARATE_STORES:
        return None
    if into_families(old, new) or out_of_families(old, new):
        return None
    return (
        f"format 1 keeps no matched flag, and Spark runs no outer join on it; rewrite it into format 2 first "
        f"({CONF_JOIN_FORMAT}=2), then into format {new}"
    )


def join_values(plan: StateReadPlan, old: str | None, new: str) -> tuple[StructType, Convert] | None:
    """The new value schema of one join store and how its values change, or None for a store that keeps its
    rows (the counts); a direction not written is refused (:class:`UnsupportedConfChangeError`)."""
    why = refusal(old, new)
    if why is not None:
        raise UnsupportedConfChangeError(
            f"operator {plan.operator_id} of {plan.checkpoint.location}: {CONF_JOIN_FORMAT} {old} -> {new} "
            f"refused: {why}",
            conf=CONF_JOIN_FORMAT,
            path=plan.checkpoint.location,
        )
    if not plan.store_name.endswith(VALUES_STORE_SUFFIX):
        return None
    where = f"operator {plan.operator_id} store {plan.store_name} of {plan.checkpoint.location}"
    fields = plan.value_schema.fields
    flagged = bool(fields) and fields[-1].name == MATCHED_FIELD and fields[-1].data_type.kind == "boolean"
    if new == "2":
        return StructType([*fields, MATCHED]), _append_unmatched
    if not flagged:
        raise UnsupportedConfChangeError(
            f"{where}: its rows do not end with the boolean {MATCHED_FIELD} that {CONF_JOIN_FORMAT}=2 appends; "
            "it is not format 2 state",
            conf=CONF_JOIN_FORMAT,
            path=plan.checkpoint.location,
        )
    return StructType(list(fields[:-1])), _drop_matched


def _append_unmatched(
    keys: RowBuffer, values: RowBuffer, old: StateReadPlan, new: StateReadPlan, source: str
) -> RowBuffer:
    """Format 1 -> 2: each row with ``matched = false`` after its fields (moved as bytes)."""
    n = len(values.starts)
    flags = RowBuffer(_FALSE_ROW, np.zeros(n, dtype=np.int64), np.full(n, len(_FALSE_ROW), dtype=np.int64), source)
    schema = old.stored_value_schema
    flag_schema = StructType([new.stored_value_schema.fields[-1]])
    return splice_rows([(values, schema, 0, len(schema.fields)), (flags, flag_schema, 0, 1)], source)


def _drop_matched(keys: RowBuffer, values: RowBuffer, old: StateReadPlan, new: StateReadPlan, source: str) -> RowBuffer:
    """Format 2 -> 1: each row without its ``matched`` flag (moved as bytes)."""
    schema = old.stored_value_schema
    return splice_rows([(values, schema, 0, len(schema.fields) - 1)], source)


__all__ = ["FAMILY_FORMATS", "SEPARATE_STORES", "into_families", "join_values", "out_of_families", "refusal"]
