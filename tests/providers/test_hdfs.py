"""The HDFS-backed provider's files: the record framing of ``.delta`` and ``.snapshot`` files, read
and written back (Spark reading what is written is the resume oracle, ``tests/oracles/test_rewrite.py``)."""

from __future__ import annotations

import itertools
import struct

import numpy as np
import pytest

from state_reader import errors
from state_reader.formats import codecs
from state_reader.io.destination import Destination
from state_reader.io.storage import Storage
from state_reader.providers.hdfs import END_OF_FILE, HDFSStore, frame_records, framed_rows, parse_records, snapshot_file


@pytest.mark.parametrize("row_checksum", [False, True])
def test_snapshot_framing_reads_back(tmp_path, row_checksum):
    rng = np.random.default_rng(3)
    skip = 4 if row_checksum else 0
    records = {
        bytes(rng.integers(0, 256, 8 * k, dtype=np.uint8)): bytes(rng.integers(0, 256, 8 * v + skip, dtype=np.uint8))
        for k, v in zip(rng.integers(1, 5, 300), rng.integers(0, 6, 300), strict=True)
    }
    stream = b"".join(struct.pack(">i", len(k)) + k + struct.pack(">i", len(v)) + v for k, v in records.items())
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "1.snapshot").write_bytes(codecs.compress(stream + END_OF_FILE, "lz4"))
    store = HDFSStore(Storage(str(tmp_path)), "in", "lz4", row_checksum)
    keys, values = store.load_rows(1)
    order = np.arange(len(keys.starts))[::-1]
    framed, lengths = frame_records(keys.take(order), values.take(order))
    assert int(lengths.sum()) == len(framed)
    # streamed in chunks of whole records through the destination, as a rewrite writes a partition
    cuts = np.r_[0, np.cumsum(lengths)][[0, 1, 100, 101, len(lengths)]]
    for codec in ("zstd", "lz4"):
        chunks = [framed[lo:hi] for lo, hi in itertools.pairwise(cuts)]
        Destination(str(tmp_path)).write(f"{codec}/1.snapshot", snapshot_file(chunks, codec))
        if codec == "lz4":  # block by block: the same file however the records arrive
            assert (tmp_path / codec / "1.snapshot").read_bytes() == b"".join(snapshot_file([framed], codec))
        again = HDFSStore(Storage(str(tmp_path)), codec, codec, row_checksum).load(1)
        assert again == {k: v[skip:] for k, v in records.items()}
    # and the framed records read back as rows, as a rewrite reads its routed rows
    back_keys, back_values = framed_rows(framed.tobytes(), "routed")
    assert [bytes(back_keys.buf[s : s + n]) for s, n in zip(back_keys.starts, back_keys.lengths, strict=True)] == [
        bytes(keys.buf[s : s + n]) for s, n in zip(keys.starts[order], keys.lengths[order], strict=True)
    ]
    assert int(back_values.lengths.sum()) == int(values.lengths.sum())


def test_framing_errors():
    end = struct.pack(">i", -1)
    with pytest.raises(errors.TruncatedFileError, match="end-of-file marker"):
        parse_records(struct.pack(">i", 8) + b"\x00" * 8 + struct.pack(">i", 8) + b"\x00" * 8, "d")
    with pytest.raises(errors.TruncatedFileError, match="runs past the end"):
        parse_records(struct.pack(">i", 2**30) + end, "d")
    with pytest.raises(errors.CorruptFileError, match="negative key size"):
        parse_records(struct.pack(">i", -7) + end, "d")
    with pytest.raises(errors.CorruptFileError, match="remove record"):
        parse_records(struct.pack(">i", 8) + b"\x00" * 8 + end + end, "s", allow_removes=False)
    with pytest.raises(errors.CorruptFileError, match="follow the end"):
        parse_records(end + b"junk", "d")
