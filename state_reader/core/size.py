"""The size of a state: one definition, used by ``stats``, the notebook display and the rewrite report.

A state's size is its **rows** (as a read returns them: a list variable's
elements, a map variable's entries) and its **state bytes**: the bytes of its keys and
values as the state store keeps them, before compression — UnsafeRows (or Avro
records) with whatever the provider frames them with (RocksDB's version byte and
column family id, a row checksum). That is what Spark holds and writes for the
state, whatever the codec, the files on disk or the way a reader decodes it; it
does not depend on how many deltas or SST files a version is spread over.

Bytes on disk (the snapshot, deltas, changelogs and SSTs a version is rebuilt
from) are something else: they grow with every delta until the next snapshot,
whatever the state does, and are only ever shown as such.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from state_reader.formats.unsaferow import RowBuffer

STATE_BYTES = "state bytes"
# what "state bytes" means, in the words every front uses
STATE_BYTES_MEANING = "key and value bytes as the state store keeps them, uncompressed"


@dataclass(frozen=True)
class StateSize:
    """Rows and state bytes of a state (a partition, a store, a variable)."""

    rows: int
    bytes: int

    def __add__(self, other: StateSize) -> StateSize:
        return StateSize(self.rows + other.rows, self.bytes + other.bytes)


def row_bytes(keys: RowBuffer, values: RowBuffer) -> np.ndarray:
    """State bytes of each row (int64): its key's and its value's bytes as stored."""
    return keys.lengths.astype(np.int64) + values.lengths.astype(np.int64)


def state_size(keys: RowBuffer, values: RowBuffer) -> StateSize:
    """Rows and state bytes of rows as their store keeps them."""
    return StateSize(len(keys.lengths), int(row_bytes(keys, values).sum()))


@dataclass(frozen=True)
class StoredSizes:
    """Each row's state bytes (:func:`row_bytes`) and key bytes, of rows as their store keeps them."""

    state: np.ndarray
    key: np.ndarray

    @classmethod
    def of(cls, keys: RowBuffer, values: RowBuffer) -> StoredSizes:
        return cls(row_bytes(keys, values), keys.lengths.astype(np.int64))
