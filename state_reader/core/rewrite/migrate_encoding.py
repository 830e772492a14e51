"""The migrations of how a store frames its rows rather than what its values hold: the encoding (UnsafeRow or
Avro), row checksums, and the merge operator's list delimiter. Each is a change of the store's
:class:`~state_reader.model.conf.StoreConf`: every row is decoded as the source's conf says and written as the
new one says, keys too (an Avro key is other bytes than an UnsafeRow key, in every key encoder: no-prefix,
prefix-scan, range-scan).

The schema files stay as they are: Spark writes the same schema file (v3, with the same schema ids) for a
transformWithState query on either encoding, and the ids are what an Avro row names its schema by.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

import numpy as np

from state_reader.core.rewrite.edit_families import family_keys, family_values, list_values
from state_reader.core.rewrite.rows import FamilyStoreRows, StoreRows, store_label
from state_reader.core.size import row_bytes
from state_reader.errors import CorruptFileError, UnsupportedConfChangeError, UnsupportedTypeError
from state_reader.formats.avro_encoding import require_avro_state
from state_reader.formats.rocksdb_encode import with_row_checksums
from state_reader.formats.rocksdb_encoding import (
    CHECKSUM_BYTES,
    LENGTH_BYTES,
    column_family_ids,
    decode_keys,
    decode_values,
    strip_column_family,
    with_spans,
)
from state_reader.formats.rocksdb_multi_value import split_multi_value
from state_reader.formats.unsaferow import RowBuffer
from state_reader.formats.unsaferow_encode import concat_rows
from state_reader.model.conf import (
    CONF_ENCODING,
    CONF_MERGE_OPERATOR,
    CONF_ROW_CHECKSUM,
    StoreConf,
)

# the confs whose change is a change of StoreConf, each with the StoreConf field it sets
STORE_CONF_FIELDS = {
    CONF_ENCODING: "encoding",
    CONF_ROW_CHECKSUM: "row_checksum",
    CONF_MERGE_OPERATOR: "merge_operator_version",
}


def new_store_conf(conf: StoreConf, changed: Mapping[str, str]) -> StoreConf:
    """``conf`` with the confs of :data:`STORE_CONF_FIELDS` among ``changed`` (key -> new value) set."""
    fields: dict[str, object] = {}
    for key, value in changed.items():
        name = STORE_CONF_FIELDS.get(key)
        if name == "encoding":
            fields[name] = value
        elif name == "row_checksum":
            fields[name] = value == "true"
        elif name == "merge_operator_version":
            fields[name] = int(value)
    return replace(conf, **fields) if fields else conf  # type: ignore[arg-type]


class TranscodedFamilyRows(FamilyStoreRows):
    """A store of column families (transformWithState, join formats 3 and 4) written under another
    :class:`StoreConf`: each family's keys and values decoded as the source stores them and encoded as the new
    conf says. Everything else (families, ids, routing) is the source's; the plan carries the new conf, so the
    rows it loads are routed, matched and edited in the new encoding."""

    def __init__(self, inner: FamilyStoreRows, store_conf: StoreConf) -> None:
        self.__dict__.update(inner.__dict__)
        self.inner = inner
        self.plan = replace(inner.plan, store_conf=store_conf)
        self.where = store_label(inner.plan)
        if store_conf.avro and not inner.plan.store_conf.avro:
            # refused before anything is written: a schema Spark cannot keep in Avro
            for name, family in self.families.items():
                for what, schema in (("key", family.key_schema), ("value", family.value_schema)):
                    try:
                        require_avro_state(schema, f"{store_label(inner.plan, located=True)}, {name} {what}")
                    except UnsupportedTypeError as exc:
                        raise UnsupportedConfChangeError(
                            f"{CONF_ENCODING} -> avro: {exc.message}", conf=CONF_ENCODING, path=exc.path
                        ) from exc

    def load(self, pid: int) -> tuple[RowBuffer, RowBuffer]:
        return self.load_sized(pid)[:2]

    def load_sized(self, pid: int) -> tuple[RowBuffer, RowBuffer, np.ndarray]:
        """The rows in the new encoding, and each row's state bytes as the source stores it."""
        keys, values = self.inner.load(pid)
        sizes = row_bytes(keys, values)
        source = f"{self.where}, partition {pid}, in the new encoding"
        return *transcode_family_rows(self.inner, self, keys, values, source), sizes


def transcode_family_rows(
    old: FamilyStoreRows, new: FamilyStoreRows, keys: RowBuffer, values: RowBuffer, source: str
) -> tuple[RowBuffer, RowBuffer]:
    """Rows of ``old``'s families (as stored, family id first) as ``new``'s conf writes them, family by family
    (the rows come back grouped by family)."""
    if not len(keys.starts):
        return keys, values
    conf = old.plan.store_conf
    ids = column_family_ids(keys)
    new_keys: list[RowBuffer] = []
    new_values: list[RowBuffer] = []
    for cf_id in np.unique(ids).tolist():
        name = old.names.get(cf_id)
        if name is None or name not in old.families:
            raise CorruptFileError(
                f"{keys.source}: keys of column family {name or f'id {cf_id}'}, which has no schema to decode them by",
                path=keys.source,
            )
        family = old.families[name]
        index = np.flatnonzero(ids == cf_id)
        family_rows, stored = keys.take(index), values.take(index)
        decoded = decode_keys(strip_column_family(family_rows), family.key_schema, old.specs[name], conf.avro)
        encoded_keys = family_keys(new, name, decoded, source)
        if name in old.multi_value:
            elements, groups = _list_elements(stored, conf, source)
            elements_decoded = decode_values(elements, family.value_schema, False, avro=conf.avro)
            encoded = list_values(new, name, elements_decoded, groups, encoded_keys, source)
        else:
            decoded_values = decode_values(stored, family.value_schema, conf.row_checksum, avro=conf.avro)
            encoded = family_values(new, name, decoded_values, source)
            if new.plan.store_conf.row_checksum:
                encoded = with_row_checksums(encoded_keys, encoded, with_length=True)
        new_keys.append(encoded_keys)
        new_values.append(encoded)
    return concat_rows(new_keys, source), concat_rows(new_values, source)


def _list_elements(values: RowBuffer, conf: StoreConf, source: str) -> tuple[RowBuffer, np.ndarray]:
    """The encoded elements (version byte first) of each multi value, and the value each belongs to."""
    starts: list[int] = []
    lengths: list[int] = []
    groups: list[int] = []
    data = values.buf
    for i, (start, length) in enumerate(zip(values.starts.tolist(), values.lengths.tolist(), strict=True)):
        value = bytes(data[start : start + length])
        for at, size in split_multi_value(value, conf.merge_operator_version, conf.row_checksum, source):
            starts.append(start + at)
            lengths.append(size)
            groups.append(i)
    elements = with_spans(values, np.array(starts, dtype=np.int64), np.array(lengths, dtype=np.int64))
    return elements, np.array(groups, dtype=np.int64)


class ReframedStoreRows(StoreRows):
    """A store without column families written with row checksums added or taken away: each value as stored,
    with the checksum Spark frames it with (RocksDB: the CRC-32C and the value's length before it; the
    HDFS-backed provider: the CRC-32C alone) put in front or taken off. Keys keep their bytes."""

    def __init__(self, inner: StoreRows, store_conf: StoreConf) -> None:
        super().__init__(replace(inner.plan, store_conf=store_conf), inner.single)
        self.inner = inner
        self.where = store_label(inner.plan)

    def load(self, pid: int) -> tuple[RowBuffer, RowBuffer]:
        return self.load_sized(pid)[:2]

    def load_sized(self, pid: int) -> tuple[RowBuffer, RowBuffer, np.ndarray]:
        keys, values = self.inner.load(pid)
        sizes = row_bytes(keys, values)
        if self.plan.store_conf.row_checksum:
            return keys, with_row_checksums(keys, values, with_length=self.rocksdb), sizes
        return keys, _without_row_checksums(values, self.rocksdb, f"{self.where}, partition {pid}"), sizes


def _without_row_checksums(values: RowBuffer, rocksdb: bool, source: str) -> RowBuffer:
    """Values as stored with row checksums, the checksum (and, in RocksDB, the length after it) taken off."""
    header = CHECKSUM_BYTES + (LENGTH_BYTES if rocksdb else 0)
    if (values.lengths < header).any():
        raise CorruptFileError(f"{source}: a value is shorter than its row checksum", path=source)
    if rocksdb and len(values.starts):
        at = values.starts[:, None] + CHECKSUM_BYTES + np.arange(LENGTH_BYTES, dtype=np.int64)
        framed = np.ascontiguousarray(values.buf[at]).view("<i4").reshape(-1)
        if (framed != values.lengths - header).any():
            raise CorruptFileError(
                f"{source}: a value's length after its row checksum does not match the value", path=source
            )
    return with_spans(values, values.starts + header, values.lengths - header)


def transcoded_stores(stores: list[StoreRows], changed: Mapping[str, str]) -> list[StoreRows]:
    """``stores`` under the new values of the :data:`STORE_CONF_FIELDS` confs in ``changed``: a store of column
    families wrapped in :class:`TranscodedFamilyRows`, another with its row checksums changed in
    :class:`ReframedStoreRows` (its rows have no other encoding to change: Avro is transformWithState's alone,
    merged lists are in column families)."""
    out: list[StoreRows] = []
    for rows in stores:
        conf = new_store_conf(rows.plan.store_conf, changed)
        if conf == rows.plan.store_conf:
            out.append(rows)
        elif isinstance(rows, FamilyStoreRows):
            out.append(TranscodedFamilyRows(rows, conf))
        elif conf.row_checksum != rows.plan.store_conf.row_checksum:
            out.append(ReframedStoreRows(rows, conf))
        else:
            out.append(rows)
    return out


__all__ = [
    "STORE_CONF_FIELDS",
    "ReframedStoreRows",
    "TranscodedFamilyRows",
    "new_store_conf",
    "transcode_family_rows",
    "transcoded_stores",
]
