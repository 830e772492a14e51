"""Multi values (``formats/rocksdb_multi_value``): a list's elements, or a join state format 4 key's rows,
framed as Spark frames them and split back."""

from __future__ import annotations

import numpy as np
import pytest

from state_reader.formats.unsaferow import RowBuffer


@pytest.mark.parametrize("merge_operator_version", [1, 2])
@pytest.mark.parametrize("row_checksum", [False, True])
@pytest.mark.parametrize("version_byte", [False, True])
def test_multi_values_encode_as_spark_frames_them(merge_operator_version, row_checksum, version_byte):
    """Elements grouped into one multi value per key, in the order given, each after its length
    and joined by the merge operator's delimiter; with row checksums each element is framed by
    the CRC-32C of its key and the element (its length included), then that framed length, as
    Spark writes them. They split back into the elements given. Elements given without their
    version byte (``version_byte``) come out the same."""
    from state_reader.formats.rocksdb_encoding import MERGE_DELIMITERS
    from state_reader.formats.rocksdb_multi_value import encode_multi_values, split_multi_value
    from state_reader.io.integrity import crc32c

    elements = [b"\x00" + bytes([i]) * (8 + 8 * (i % 2)) for i in range(5)]
    groups = [1, 0, 1, 1, 0]
    keys = RowBuffer.from_rows([b"\x05\x00key-zero", b"\x05\x00key-one"], "keys")
    delimiter = MERGE_DELIMITERS[merge_operator_version]
    given = RowBuffer.from_rows([e[1:] if version_byte else e for e in elements], "elements")
    encoded = encode_multi_values(given, np.array(groups), delimiter, keys if row_checksum else None, version_byte)
    values = [bytes(encoded.buf[s : s + n]) for s, n in zip(encoded.starts, encoded.lengths, strict=True)]
    for group, key in enumerate((b"\x05\x00key-zero", b"\x05\x00key-one")):
        mine = [e for e, g in zip(elements, groups, strict=True) if g == group]
        framed = [len(e).to_bytes(4, "little") + e for e in mine]
        if row_checksum:
            framed = [crc32c(key + f).to_bytes(4, "little") + len(f).to_bytes(4, "little") + f for f in framed]
        assert values[group] == delimiter.join(framed)
        split = split_multi_value(values[group], merge_operator_version, row_checksum, "test")
        assert [values[group][s : s + n] for s, n in split] == mine
