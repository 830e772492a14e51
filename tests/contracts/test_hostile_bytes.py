"""Damaged state files of checkpoints written by real Spark (HDFS and RocksDB with
changelogs): every read returns the clean rows or raises a StateReaderError.

Raw damage (bit flips, truncation, overwritten, inserted, deleted and appended
bytes) is caught twice over: by the ``.crc`` sidecars (verify_checksums on), and
without them by the formats' own checks (lz4 block checksums, zip CRCs, RocksDB
block checksums, framing). Record damage (size fields, duplicated and dropped
records, recompressed so every block checksum is valid) must never crash the
reader or produce an invalid table. Each read runs under a time limit, so a
hang fails the test instead of stalling the suite.

The number of mutated inputs tried is written to the terminal at the end of
the module (``fuzz: ... mutated inputs tried``).
"""

from __future__ import annotations

import os
import shutil
import signal
import struct
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import state_reader
from state_reader.errors import ChecksumMismatchError, StateReaderError, UnexpectedError
from state_reader.io.storage import Storage
from tests.support.damage import Record, frame, lz4_java, lz4_java_decode, parse_frames
from tests.support.oracle import arrow_rows

EXAMPLES = int(os.environ.get("STATE_READER_FUZZ_EXAMPLES", "200"))
READ_SECONDS = 20  # one read of these small checkpoints takes milliseconds
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# files whose formats carry their own integrity checks (or strict framing)
DATA_SUFFIXES = (".delta", ".snapshot", ".changelog", ".zip", ".sst")
FRAMED_SUFFIXES = (".delta", ".snapshot", ".changelog")


@contextmanager
def time_limit(seconds: int) -> Iterator[None]:
    """TimeoutError if the block runs longer than ``seconds`` (a hang is a failure)."""

    def expire(signum, frame):
        raise TimeoutError(f"read did not finish within {seconds}s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@dataclass
class Read:
    """One kind of read, its clean result and the files it opens."""

    name: str
    kwargs: dict
    rows: list[str] = field(default_factory=list, repr=False)
    schema: pa.Schema | None = field(default=None, repr=False)
    files: set[str] = field(default_factory=set, repr=False)


@dataclass
class Case:
    """A private copy of a real checkpoint, its reads, and the original bytes of every file they open."""

    root: Path
    reads: list[Read]
    originals: dict[str, bytes] = field(repr=False)

    def _repr_pretty_(self, printer, cycle) -> None:  # Hypothesis prints fixtures of a failing example
        printer.text(f"Case({self.root})")

    def reads_of(self, rel: str) -> list[Read]:
        return [r for r in self.reads if rel in r.files]

    def run(self, read: Read, verify: bool) -> pa.Table | StateReaderError:
        with time_limit(READ_SECONDS):
            try:
                return state_reader.read_state(str(self.root), verify_checksums=verify, **read.kwargs)
            except StateReaderError as exc:
                return exc

    @contextmanager
    def mutated(self, rel: str, data: bytes) -> Iterator[None]:
        path = self.root / rel
        path.write_bytes(data)
        try:
            yield
        finally:
            path.write_bytes(self.originals[rel])


def _build_case(checkpoint: str, workdir: Path) -> Case:
    root = workdir / "checkpoint"
    shutil.copytree(checkpoint, root)
    batches = state_reader.read_metadata(str(root)).column("maxBatchId").to_pylist()
    latest = batches[0]
    reads = [
        Read("latest", {}),
        Read("earlier", {"batch_id": latest // 2 + 1}),
        Read("changes", {"read_change_feed": True, "change_start_batch_id": 0}),
    ]
    opened: list[str] = []
    original = Storage.read_bytes

    def record(self, rel):
        opened.append(rel)
        return original(self, rel)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Storage, "read_bytes", record)  # observe which files each read opens
        for read in reads:
            opened.clear()
            table = state_reader.read_state(str(root), **read.kwargs)
            read.rows, read.schema, read.files = arrow_rows(table), table.schema, set(opened)
            assert read.rows, f"the clean {read.name} read of {checkpoint} is empty: nothing to damage"
    files = sorted(set().union(*(r.files for r in reads)))
    return Case(root, reads, {rel: (root / rel).read_bytes() for rel in files})


@pytest.fixture(scope="module")
def tried(request) -> Iterator[Counter]:
    counts: Counter = Counter()
    yield counts
    line = (
        f"fuzz: {sum(counts.values())} mutated inputs tried ("
        + ", ".join(f"{k}: {v}" for k, v in sorted(counts.items()))
        + ")"
    )
    plugins = request.config.pluginmanager
    reporter, capture = plugins.get_plugin("terminalreporter"), plugins.get_plugin("capturemanager")
    if reporter is None or capture is None:
        print(line)
        return
    with capture.global_and_fixture_disabled():  # shown without -s, like capsys.disabled()
        reporter.write_line(line)


@pytest.fixture(scope="module")
def hdfs_case(checkpoints, tmp_path_factory) -> Case:
    return _build_case(checkpoints("agg_window"), tmp_path_factory.mktemp("fuzz_hdfs"))


@pytest.fixture(scope="module")
def rocksdb_case(checkpoints, tmp_path_factory) -> Case:
    return _build_case(checkpoints("rocksdb_cl_agg_window"), tmp_path_factory.mktemp("fuzz_rocksdb"))


def _is_data(rel: str) -> bool:
    return rel.endswith(DATA_SUFFIXES)


def test_cases_cover_every_kind_of_state_file(hdfs_case, rocksdb_case):
    """The damage below reaches snapshots, deltas, zips, SSTs and changelogs, or it proves little."""
    suffixes = {Path(rel).suffix for case in (hdfs_case, rocksdb_case) for rel in case.originals}
    assert {".delta", ".snapshot", ".zip", ".sst", ".changelog"} <= suffixes


# -- raw damage -------------------------------------------------------------------


# A damage recipe is drawn without looking at the files (so every example draws the same
# shape of data, which keeps Hypothesis' replay and shrinking exact) and then applied to one.
RAW_KINDS = ("flip", "flips", "truncate", "overwrite", "zeros", "insert", "delete", "append")
raw_recipes = st.fixed_dictionaries(
    {
        "file": st.integers(0, 2**16),
        "kind": st.sampled_from(RAW_KINDS),
        "pos": st.integers(0, 2**31),
        "bit": st.integers(0, 7),
        "flips": st.lists(st.tuples(st.integers(0, 2**31), st.integers(0, 7)), min_size=2, max_size=8),
        "chunk": st.binary(min_size=1, max_size=16),
        "length": st.integers(1, 64),
    }
)


def apply_raw(originals: dict[str, bytes], recipe: dict) -> tuple[str, bytes]:
    """(file, damaged bytes) for a recipe; the bytes always differ from the original."""
    files = sorted(originals)
    rel = files[recipe["file"] % len(files)]
    data = originals[rel]
    n, kind, chunk, length = len(data), recipe["kind"], recipe["chunk"], recipe["length"]
    pos = recipe["pos"] % n
    if kind == "flip":
        out = bytearray(data)
        out[pos] ^= 1 << recipe["bit"]
    elif kind == "flips":
        out = bytearray(data)
        for p, bit in recipe["flips"]:
            out[p % n] ^= 1 << bit
    elif kind == "truncate":
        out = data[:pos]
    elif kind == "overwrite":
        out = data[:pos] + chunk + data[pos + len(chunk) :]
    elif kind == "zeros":
        length = min(n - pos, length)
        out = data[:pos] + bytes(length) + data[pos + length :]
    elif kind == "insert":
        out = data[:pos] + chunk + data[pos:]
    elif kind == "delete":
        out = data[:pos] + data[pos + length :]
    else:
        out = data + chunk
    out = bytes(out)
    if out == data:  # e.g. zeros over zeros, or flips that cancel out
        out = data + b"\x00"
    return rel, out


def _check_raw(case: Case, rel: str, damaged: bytes, tried: Counter, label: str) -> None:
    tried[label] += 1
    reads = case.reads_of(rel)
    with case.mutated(rel, damaged):
        # the sidecar catches any change, before the bytes are decoded
        first = case.run(reads[0], verify=True)
        assert isinstance(first, ChecksumMismatchError), f"{rel}: damage not caught by its checksum: {first!r}"
        assert str(case.root / rel) in str(first), f"the error does not name {rel}: {first}"
        if not _is_data(rel):
            return  # logs, metadata and schema files carry no checksum of their own
        # without sidecars (object stores) the formats' own checks must hold
        for read in reads:
            result = case.run(read, verify=False)
            if isinstance(result, StateReaderError):
                assert not isinstance(result, UnexpectedError), f"{rel} ({read.name}): {result!r}"
                assert str(case.root / "state") in str(result), f"the error names no state file: {result}"
            else:
                assert arrow_rows(result) == read.rows, f"{rel} damaged, yet {read.name} returned other rows"


@FUZZ
@given(recipe=raw_recipes)
def test_raw_damage_hdfs(hdfs_case, tried, recipe):
    _check_raw(hdfs_case, *apply_raw(hdfs_case.originals, recipe), tried, "hdfs raw")


@FUZZ
@given(recipe=raw_recipes)
def test_raw_damage_rocksdb(rocksdb_case, tried, recipe):
    _check_raw(rocksdb_case, *apply_raw(rocksdb_case.originals, recipe), tried, "rocksdb raw")


# -- record damage ----------------------------------------------------------------

SIZE_VALUES = [-(2**31), -2, -1, 0, 1, 3, 7, 2**16, 2**30, 2**31 - 1]


record_recipes = st.fixed_dictionaries(
    {
        "file": st.integers(0, 2**16),
        "kind": st.sampled_from(("duplicate", "drop", "size")),
        "record": st.integers(0, 2**16),
        "field": st.sampled_from(("key", "value")),
        "size": st.sampled_from(SIZE_VALUES) | st.integers(-16, 16).filter(bool).map(lambda d: ("off by", d)),
    }
)


def apply_records(originals: dict[str, bytes], recipe: dict) -> tuple[str, str, bytes]:
    """(file, kind, recompressed bytes) with a record duplicated or dropped, or a size field changed."""
    framed = sorted(rel for rel in originals if rel.endswith(FRAMED_SUFFIXES))
    rel = framed[recipe["file"] % len(framed)]
    records = parse_frames(lz4_java_decode(originals[rel]))
    size = recipe["size"]
    if not records:  # an empty delta: only its end marker can be damaged
        size = size[1] if isinstance(size, tuple) else size
        return rel, "size", lz4_java(struct.pack(">i", size if size != -1 else 0))
    kind = recipe["kind"]
    edits: dict[tuple[int, str], int] = {}
    i = recipe["record"] % len(records)
    if kind == "duplicate":
        records = [*records[: i + 1], Record(records[i].key, records[i].value), *records[i + 1 :]]
    elif kind == "drop":
        records = records[:i] + records[i + 1 :]
    else:
        which = recipe["field"]
        actual = len(records[i].key) if which == "key" else len(records[i].value or b"")
        size = actual + size[1] if isinstance(size, tuple) else size
        edits[(i, which)] = size if size != actual else actual + 1
    return rel, kind, lz4_java(frame(records, edits))


def _check_records(case: Case, rel: str, kind: str, damaged: bytes, tried: Counter, label: str) -> None:
    tried[label] += 1
    with case.mutated(rel, damaged):
        for read in case.reads_of(rel):
            result = case.run(read, verify=False)
            if isinstance(result, StateReaderError):
                assert not isinstance(result, UnexpectedError), f"{rel} ({read.name}, {kind}): {result!r}"
                assert kind == "size", f"{rel}: a well-formed file with a {kind} record was refused: {result}"
                continue
            result.validate(full=True)  # never an Arrow table that lies about its own buffers
            assert result.schema == read.schema
            rows = arrow_rows(result)
            if kind == "duplicate":  # writing a record twice changes no state, only the change feed
                if read.name == "changes":
                    assert not Counter(read.rows) - Counter(rows) and len(rows) - len(read.rows) in (0, 1)
                else:
                    assert rows == read.rows


@FUZZ
@given(recipe=record_recipes)
def test_record_damage_hdfs(hdfs_case, tried, recipe):
    _check_records(hdfs_case, *apply_records(hdfs_case.originals, recipe), tried, "hdfs records")


@FUZZ
@given(recipe=record_recipes)
def test_record_damage_rocksdb(rocksdb_case, tried, recipe):
    _check_records(rocksdb_case, *apply_records(rocksdb_case.originals, recipe), tried, "rocksdb records")


def test_huge_size_field_allocates_nothing_big(hdfs_case):
    """A size field of 2 GiB in a delta is refused before anything that size is allocated."""
    import tracemalloc

    rel = next(r for r in sorted(hdfs_case.originals) if r.endswith(".delta"))
    records = parse_frames(lz4_java_decode(hdfs_case.originals[rel]))
    for which in ("key", "value"):
        damaged = lz4_java(frame(records, {(0, which): 2**31 - 1}))
        read = hdfs_case.reads_of(rel)[0]
        with hdfs_case.mutated(rel, damaged):
            tracemalloc.start()
            try:
                result = hdfs_case.run(read, verify=False)
                _, peak = tracemalloc.get_traced_memory()
            finally:
                tracemalloc.stop()
        assert isinstance(result, StateReaderError) and not isinstance(result, UnexpectedError), result
        assert rel.split("/")[-1] in str(result) and "past the end" in str(result)
        assert peak < 64 * 2**20, f"reading a damaged delta allocated {peak} bytes"
