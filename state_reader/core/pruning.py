"""One-key lookups read one partition: the partitions a key filter can match.

Spark keeps every state row in partition ``pmod(hash(partition key), N)``
(:mod:`state_reader.formats.spark_hash`), where the partition key is the
leading fields of the store's key that the operator's input is shuffled by
(:attr:`StateReadPlan.partition_key_fields`). When a key filter fixes every
one of those fields to a few values (``=``, ``IN`` or ``IS NULL``, joined by
``AND``, or alternatives joined by ``OR`` that each do), only the partitions
those values hash to can hold a matching row; the others are not read at all.
Anything else (ranges, ``NOT``, a callable filter, a field left open) reads
every partition. Either way the filter is still applied to the rows read, so
the result is the same rows as a full read filtered.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pyarrow as pa

from state_reader.core.key_filter import (
    And,
    Comparison,
    InList,
    NullCheck,
    Or,
    Predicate,
    literal_scalar,
    resolve_field,
)
from state_reader.errors import InvalidOptionError, UnsupportedOptionError
from state_reader.formats.spark_hash import partition_ids
from state_reader.model.plan import StateReadPlan

# more combinations of fixed values than this are not worth hashing: read every partition
MAX_LOOKUP_KEYS = 10_000

Leaf = tuple[int, ...]


def _leaves(typ: pa.StructType, count: int, prefix: Leaf = ()) -> Iterator[tuple[Leaf, pa.DataType]]:
    """The scalar fields of the first ``count`` fields of ``typ``, depth first (the order Spark hashes them)."""
    for i in range(count):
        field = typ.field(i)
        if pa.types.is_struct(field.type):
            yield from _leaves(field.type, field.type.num_fields, (*prefix, i))
        else:
            yield (*prefix, i), field.type


def _conjuncts(predicate: Predicate) -> Iterator[Predicate]:
    if isinstance(predicate, And):
        for part in predicate.parts:
            yield from _conjuncts(part)
    else:
        yield predicate


class _Lookup:
    """The partition key's scalar fields, and how to hash values given for them."""

    def __init__(self, key_type: pa.StructType, fields: int, num_partitions: int) -> None:
        self.key_type = key_type
        self.leaves = dict(_leaves(key_type, fields))
        self.num_partitions = num_partitions

    def _values(self, predicate: Predicate) -> tuple[Leaf, list] | None:
        """(leaf, the values it may take) that ``predicate`` pins a partition-key field to; None if it does not."""
        if isinstance(predicate, Comparison) and predicate.op == "=":
            path, values = predicate.path, [predicate.value]
        elif isinstance(predicate, InList) and not predicate.negated:
            path, values = predicate.path, list(predicate.values)
        elif isinstance(predicate, NullCheck) and not predicate.negated:
            return self._resolve(predicate.path, [None])
        else:
            return None
        return self._resolve(path, values)

    def _resolve(self, path: tuple[str, ...], values: list) -> tuple[Leaf, list] | None:
        try:
            leaf, typ = resolve_field(path, self.key_type)
        except InvalidOptionError:
            return None
        if leaf not in self.leaves:
            return None
        out: list = []
        for value in values:
            if value is None:
                out.append(None)
                continue
            scalar = literal_scalar(value, typ, ".".join(path))
            if scalar.type != typ:
                return None  # compared in another type (a wider decimal, a float for an int field)
            out.append(scalar.as_py())
        return leaf, out

    def partitions(self, predicate: Predicate) -> set[int] | None:
        """The partitions rows matching ``predicate`` can be in; None: any."""
        if isinstance(predicate, Or):
            found: set[int] = set()
            for part in predicate.parts:
                sub = self.partitions(part)
                if sub is None:
                    return None
                found |= sub
            return found
        pinned: dict[Leaf, list] = {}
        narrowed: set[int] | None = None
        for part in _conjuncts(predicate):
            if isinstance(part, Or):
                sub = self.partitions(part)
                if sub is not None:
                    narrowed = sub if narrowed is None else narrowed & sub
                continue
            fixed = self._values(part)
            if fixed is not None and fixed[0] not in pinned:  # a second condition on a field only narrows rows
                pinned[fixed[0]] = fixed[1]
        if len(pinned) == len(self.leaves):
            own = self._hash(pinned)
            if own is not None:
                narrowed = own if narrowed is None else narrowed & own
        return narrowed

    def _hash(self, pinned: dict[Leaf, list]) -> set[int] | None:
        order = list(self.leaves)
        sizes = [len(pinned[leaf]) for leaf in order]
        total = 1
        for size in sizes:
            total *= size
        if total > MAX_LOOKUP_KEYS:
            return None
        combos = list(itertools.product(*(pinned[leaf] for leaf in order)))
        if not combos:
            return set()
        columns = [pa.array([c[i] for c in combos], type=self.leaves[leaf]) for i, leaf in enumerate(order)]
        return {int(p) for p in partition_ids(columns, self.num_partitions)}


def lookup_partitions(plan: StateReadPlan, predicate: Predicate | None) -> list[int] | None:
    """The plan's partitions that can hold keys matching ``predicate``, ascending; None: all of them.

    Pruning needs the operator's partition count and a store in each of its
    partitions, as a shuffled operator has (a global limit keeps its state in
    partition 0 alone and is never pruned); otherwise, or for a filter that leaves
    a partition-key field open, every partition is read.
    """
    fields, n = plan.partition_key_fields, plan.num_partitions
    if predicate is None or not fields or not n or plan.partitions != list(range(n)):
        return None
    key_type = plan.arrow_schema.field("key").type
    try:
        lookup = _Lookup(key_type, fields, n)
        found = lookup.partitions(predicate)
    except (InvalidOptionError, UnsupportedOptionError, pa.ArrowException, ValueError):
        return None  # a literal this hash cannot take: the filter itself decides, on every partition
    if found is None:
        return None
    return [p for p in plan.partitions if p in found]
