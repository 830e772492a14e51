"""The destination a rewrite writes to: only into an empty directory, whole files or none."""

from __future__ import annotations

import pytest

from state_reader.errors import DestinationNotEmptyError, StorageError
from state_reader.io.destination import Destination
from state_reader.io.integrity import verify_hadoop


def test_destination_writes_only_into_an_empty_directory(tmp_path):
    dest = Destination(str(tmp_path / "new"))
    dest.write("state/0/1/2.snapshot", b"abc")
    assert (tmp_path / "new" / "state" / "0" / "1" / "2.snapshot").read_bytes() == b"abc"
    sidecar = (tmp_path / "new" / "state" / "0" / "1" / ".2.snapshot.crc").read_bytes()
    verify_hadoop(b"abc", sidecar, "f", "s")
    assert sorted(p.name for p in (tmp_path / "new" / "state" / "0" / "1").iterdir()) == [
        ".2.snapshot.crc",
        "2.snapshot",
    ]
    with pytest.raises(DestinationNotEmptyError, match="not empty"):
        Destination(str(tmp_path / "new")).begin("src")
    (tmp_path / "file").write_text("x")
    with pytest.raises(DestinationNotEmptyError, match="is a file"):
        Destination(str(tmp_path / "file")).begin("src")


def test_destination_streams_whole_files_or_none(tmp_path):
    dest = Destination(str(tmp_path / "new"))
    assert dest.write("a/x", (piece for piece in [b"ab", memoryview(b"cd"), b""])) == 4
    assert (tmp_path / "new" / "a" / "x").read_bytes() == b"abcd"

    def failing():
        yield b"partial"
        raise OSError("disk full")

    with pytest.raises(StorageError, match="disk full"):
        dest.write("a/y", failing())
    assert sorted(p.name for p in (tmp_path / "new" / "a").iterdir()) == [".x.crc", "x"]
