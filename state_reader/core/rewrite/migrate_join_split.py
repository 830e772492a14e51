"""A stream-stream join rewritten out of column families (state formats 3 and 4, one RocksDB store) into the four
separate stores of format 2, which every Spark from 3.0 runs (the rollback of Spark itself to a version before
4.1), and on into format 1 in the same pass (format 2's rows without their ``matched`` flag,
:mod:`~state_reader.core.rewrite.migrate_join`).

Each side's buffered rows, with their flags, are taken out of the source's families
(:func:`~state_reader.core.rewrite.migrate_join_families.load_sides`) and written as the two stores a
format-2 query keeps: ``<side>-keyToNumValues`` (each join key and how many rows it holds) and
``<side>-keyWithIndexToValue`` (each row under its join key and an index 0..n-1), on either provider. The
operator's files are those Spark writes when it starts a query in format 2: a schema v2 file per store under
partition 0 and operator metadata v1 listing the four stores; the families' schema v3 file and operator
metadata v2 are left behind.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, replace

from state_reader.core.rewrite.migrate_join import Convert, join_values
from state_reader.core.rewrite.migrate_join_families import (
    COUNT_VALUE,
    INDEX_FIELD,
    indexed_side,
    load_sides,
    side_schemas,
)
from state_reader.core.rewrite.rows import FamilyStoreRows, StoreRows
from state_reader.formats.schema_files import write_schema_v2
from state_reader.formats.spark_types import StructType
from state_reader.formats.unsaferow import RowBuffer
from state_reader.model.conf import PROVIDER_NAMES
from state_reader.model.plan import StateReadPlan
from state_reader.model.store_names import JOIN_SIDES, JOIN_STORES

COUNTS_SUFFIX = "-keyToNumValues"
# what Spark (4.0+) writes in a snapshot's metadata beside SSTs and key counts for a store without column families
SEPARATE_ZIP_METADATA = {
    "numInternalKeys": 0,
    "columnFamilyMapping": {},
    "columnFamilyTypeMap": {},
    "maxColumnFamilyId": 0,
}


@dataclass(frozen=True)
class SplitLayout:
    """The four stores a join is split into: their plans (in Spark's store order), and the operator's files."""

    plans: tuple[StateReadPlan, ...]

    def files(self, num_partitions: int) -> dict[str, bytes]:
        """The files beside the partitions, as Spark writes them when it starts a query in format 2: each store's
        schema v2 file (partition 0's), and operator metadata v1 listing the stores."""
        first = self.plans[0]
        op = first.operator_id
        out = {
            first.checkpoint.schema_file(op, plan.store_name): write_schema_v2(plan.key_schema, plan.value_schema)
            for plan in self.plans
        }
        doc = {
            "operatorInfo": {"operatorId": op, "operatorName": "symmetricHashJoin"},
            "stateStoreInfo": [
                {"storeName": plan.store_name, "numColsPrefixKey": 0, "numPartitions": num_partitions}
                for plan in self.plans
            ],
        }
        out[f"state/{op}/_metadata/metadata"] = ("v1\n" + json.dumps(doc, separators=(",", ":"))).encode("utf-8")
        return out


class SplitJoinRows(StoreRows):
    """One of the four separate stores of a join in format 2 (or 1), its rows taken from the source's column
    families: the side's rows of each old partition, regrouped by join key (counts) or indexed under it."""

    def __init__(
        self,
        source: FamilyStoreRows,
        old: str,
        target: StateReadPlan,
        layout: SplitLayout,
        schemas: dict[str, tuple[StructType, StructType]],
        values: tuple[StateReadPlan, Convert] | None,
    ) -> None:
        super().__init__(target)
        self.source = source
        self.old = old
        self.layout = layout
        self.schemas = schemas
        # format 1: format 2's values (plan) turned by ``convert``
        self.values = values
        self.side = target.store_name.partition("-")[0]
        self.counts = target.store_name.endswith(COUNTS_SUFFIX)
        self.where = f"operator {target.operator_id} of {target.checkpoint.location}"
        self.rocksdb = False  # load() gives plain UnsafeRows; convert() encodes them for RocksDB

    def zip_metadata(self) -> dict[str, object]:
        return dict(SEPARATE_ZIP_METADATA)

    def load(self, pid: int) -> tuple[RowBuffer, RowBuffer]:
        source = f"{self.where}, partition {pid}, store {self.plan.store_name}"
        rows = load_sides([self.source], self.old, pid, self.schemas, self.where, sides=(self.side,))[self.side]
        count_keys, counts, keys, values = indexed_side(rows, self.schemas[self.side][0], source)
        if self.counts:
            return count_keys, counts
        if self.values is not None and len(values.starts):
            format_2, convert = self.values
            values = convert(keys, values, format_2, self.plan, source)
        return keys, values

    def state_metadata(self, batch: int, num_partitions: int, qualified: Callable[[str], str]) -> dict[str, bytes]:
        # every store of the operator gives the same files (the writer keeps one set per operator)
        return self.layout.files(num_partitions)


def split_join_rows(source: FamilyStoreRows, old: str, new: str, provider: str, codec: str | None) -> list[StoreRows]:
    """The four stores a join in column families (format ``old``, 3 or 4) is written as in format ``new`` (2 or
    1), on ``provider`` (``hdfs``, ``rocksdb``), compressed with ``codec``."""
    base = source.plan
    where = f"operator {base.operator_id} of {base.checkpoint.location}"
    schemas = {side: side_schemas([source], old, side, where) for side in JOIN_SIDES}
    store_conf = replace(base.store_conf, codec=codec) if codec is not None else base.store_conf
    format_2 = {}
    for name in JOIN_STORES:
        key, value = schemas[name.partition("-")[0]]
        if name.endswith(COUNTS_SUFFIX):
            value = COUNT_VALUE
        else:
            key = StructType([*key.fields, INDEX_FIELD])
        format_2[name] = replace(
            base,
            store_name=name,
            key_schema=key,
            value_schema=value,
            provider_class=PROVIDER_NAMES[provider],
            store_conf=store_conf,
            key_encoder=None,
            num_cols_prefix_key=0,
            variable=None,
            join=None,
            value_long_slots=(),
        )
    changes: dict[str, tuple[StateReadPlan, Convert] | None] = {}
    plans = []
    for name, plan in format_2.items():
        change = join_values(plan, "2", new) if new != "2" else None
        changes[name] = None if change is None else (plan, change[1])
        plans.append(plan if change is None else replace(plan, value_schema=change[0]))
    layout = SplitLayout(tuple(plans))
    return [SplitJoinRows(source, old, plan, layout, schemas, changes[plan.store_name]) for plan in plans]


__all__ = ["SEPARATE_ZIP_METADATA", "SplitJoinRows", "split_join_rows"]
