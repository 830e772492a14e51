"""The direct SST reader of the RocksDB provider (numba) against rocksdict.

RocksDB databases written here with rocksdict (overwrites, deletions, several
SST files, every compression and checksum type this reader handles) must read
back exactly as a rocksdict iteration does, and real checkpoints must give the
same rows through either path.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

import state_reader
from state_reader import errors
from state_reader.formats import sst
from state_reader.formats.sst import SstNotSupportedError, read_sst_rows
from state_reader.providers import rocksdb as rocksdb_provider
from tests.support.damage import golden_copy_with_damaged_ssts
from tests.support.oracle import arrow_rows
from tests.support.paths import GOLDEN

pytest.importorskip("numba")
rocksdict = pytest.importorskip("rocksdict")

GOLDEN_ROCKSDB = sorted(p for p in GOLDEN.glob("spark-*/*rocksdb*") if p.is_dir())


def _write_db(
    path: Path, compression: str = "lz4", checksum: str = "xxh3", format_version: int = 5, seed: int = 0
) -> dict[bytes, bytes]:
    """A DB of three flushed SST files with overwrites and deletions; returns what it holds."""
    rng = random.Random(seed)
    options = rocksdict.Options(raw_mode=True)
    options.create_if_missing(True)
    options.set_compression_type(getattr(rocksdict.DBCompressionType, compression)())
    options.set_disable_auto_compactions(True)  # keep the files (and their overlaps) apart
    table = rocksdict.BlockBasedOptions()
    table.set_checksum_type(getattr(rocksdict.ChecksumType, checksum)())
    table.set_format_version(format_version)
    table.set_block_size(512)  # many blocks and restarts even for a small DB
    options.set_block_based_table_factory(table)
    db = rocksdict.Rdict(str(path), options=options)
    expected: dict[bytes, bytes] = {}
    prefixes = [b"", b"user-", b"user-000", bytes(20)]
    try:
        for _ in range(3):
            for _ in range(700):
                key = rng.choice(prefixes) + rng.randbytes(rng.randint(0, 12))
                if expected and rng.random() < 0.2:
                    key = rng.choice(list(expected))
                if rng.random() < 0.15:
                    db.delete(key)
                    expected.pop(key, None)
                else:
                    value = rng.randbytes(rng.randint(0, 40))
                    db[key] = value
                    expected[key] = value
            db.flush()
    finally:
        db.close()
    return expected


def _rows(keys, values) -> dict[bytes, bytes]:
    out = {}
    for rows, target in ((keys, "k"), (values, "v")):
        data = rows.buf[: rows.size].tobytes()
        out[target] = [data[s : s + n] for s, n in zip(rows.starts.tolist(), rows.lengths.tolist(), strict=True)]
    assert len(set(out["k"])) == len(out["k"]), "each key once"
    return dict(zip(out["k"], out["v"], strict=True))


def _ssts(path: Path) -> list[tuple[bytes, str]]:
    files = sorted(path.glob("*.sst"))
    assert len(files) >= 2, "the test wants overlapping files"
    return [(f.read_bytes(), str(f)) for f in files]


@pytest.mark.parametrize(
    ("compression", "checksum", "format_version"),
    [
        ("lz4", "xxh3", 5),
        ("snappy", "crc32c", 5),
        ("zstd", "xxhash", 4),
        ("none", "xxhash64", 3),
        ("lz4", "crc32c", 2),
    ],
)
def test_sst_files_read_like_rocksdb(tmp_path, compression, checksum, format_version):
    expected = _write_db(tmp_path / "db", compression, checksum, format_version)
    keys, values = read_sst_rows(_ssts(tmp_path / "db"), "test")
    assert _rows(keys, values) == expected


def test_kernels_run_as_plain_python(tmp_path, monkeypatch):
    """The kernels are plain Python too: uncompiled they give what the compiled code gives."""
    from state_reader.formats import _numba_sst

    expected = _write_db(tmp_path / "db", seed=1)
    compiled = _rows(*read_sst_rows(_ssts(tmp_path / "db"), "test"))
    # each kernel and each helper they call, as its Python source: the calls between them go through the module
    for name in ("_read_varint", "_le32", "_compare", "_emit", "index_handles", "block_sizes", "walk", "merge"):
        monkeypatch.setattr(_numba_sst, name, getattr(_numba_sst, name).py_func)
    assert _rows(*read_sst_rows(_ssts(tmp_path / "db"), "test")) == compiled == expected


def test_unsupported_format_is_left_to_rocksdict(tmp_path):
    _write_db(tmp_path / "db", format_version=6)
    with pytest.raises(SstNotSupportedError):
        read_sst_rows(_ssts(tmp_path / "db"), "test")


def test_damaged_sst_is_an_error_naming_it(tmp_path):
    _write_db(tmp_path / "db", seed=2)
    files = _ssts(tmp_path / "db")
    clean = _rows(*read_sst_rows(files, "test"))
    data, name = files[0]
    rng = random.Random(3)
    outcomes = set()
    for pos in sorted(rng.sample(range(len(data)), 60)):
        damaged = bytearray(data)
        damaged[pos] ^= 1 << rng.randrange(8)
        try:
            rows = _rows(*read_sst_rows([(bytes(damaged), name), *files[1:]], "test"))
        except SstNotSupportedError:
            outcomes.add("rocksdict")  # e.g. the magic number: rocksdict reads it (and fails)
        except errors.CorruptFileError as exc:
            assert name in str(exc)
            outcomes.add("error")
        else:  # only blocks a read does not need (the filter) may be damaged unnoticed
            assert rows == clean, f"byte {pos} damaged, other rows returned"
            outcomes.add("same")
    assert "error" in outcomes


@pytest.fixture
def numba_on(monkeypatch):
    monkeypatch.setenv("STATE_READER_NUMBA", "1")
    calls = {"sst": 0}
    real = rocksdb_provider.read_sst_rows

    def counted(*args, **kwargs):
        out = real(*args, **kwargs)
        calls["sst"] += 1
        return out

    monkeypatch.setattr(rocksdb_provider, "read_sst_rows", counted)
    return calls


@pytest.mark.parametrize("checkpoint", GOLDEN_ROCKSDB, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_golden_checkpoints_read_the_same_either_way(checkpoint, numba_on, monkeypatch):
    from state_reader.io.storage import Storage
    from state_reader.model.checkpoint import CheckpointDir

    sides = [{"join_side": "left"}, {"join_side": "right"}] if "join" in checkpoint.name else [{}]
    for batch in CheckpointDir(Storage(str(checkpoint))).committed_batches:
        for options in sides:
            direct = state_reader.read_state(str(checkpoint), batch_id=batch, **options)
            monkeypatch.setenv("STATE_READER_NUMBA", "0")
            through_rocksdict = state_reader.read_state(str(checkpoint), batch_id=batch, **options)
            monkeypatch.setenv("STATE_READER_NUMBA", "1")
            assert arrow_rows(direct) == arrow_rows(through_rocksdict), f"batch {batch} {options}"
    assert numba_on["sst"] > 0, "the SST reader was never used"


def test_corrupt_block_is_reported_by_the_sst_reader(tmp_path, numba_on):
    copy = golden_copy_with_damaged_ssts(tmp_path)
    with pytest.raises(errors.CorruptFileError, match="block checksum mismatch"):
        state_reader.read_state(str(copy))


def test_reader_leaves_no_temporary_directory(tmp_path, numba_on, monkeypatch):
    import tempfile

    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    assert state_reader.read_state(str(GOLDEN / "spark-4.0.5" / "agg_window_rocksdb")).num_rows > 0
    assert numba_on["sst"] > 0
    assert os.listdir(scratch) == []


def test_damage_past_the_checksums_gives_our_errors(tmp_path, monkeypatch):
    """Blocks whose checksums hold but whose contents are wrong reach the compiled loops;
    they must answer with our errors (or leave the file to rocksdict), never crash."""
    _write_db(tmp_path / "db", compression="lz4", checksum="crc32c", seed=3)
    datas = [data for data, _ in _ssts(tmp_path / "db")]
    monkeypatch.setattr(sst._SstFile, "verify", lambda self, *args: None)
    outcomes = {"ours": 0, "read": 0}
    for seed in range(300):
        rng = random.Random(seed)
        target = rng.randrange(len(datas))
        data = bytearray(datas[target])
        for _ in range(rng.choice([1, 2, 4, 16])):
            at = rng.randrange(len(data))
            data[at] = rng.randrange(256)
        if rng.random() < 0.1:
            data = data[: rng.randrange(len(data))]
        files = [(bytes(data) if i == target else d, f"file {i}") for i, d in enumerate(datas)]
        try:
            read_sst_rows(files, "fuzz")
            outcomes["read"] += 1
        except (errors.StateReaderError, SstNotSupportedError):
            outcomes["ours"] += 1
    assert outcomes["ours"] > 0 and sum(outcomes.values()) == 300
