"""The offset log's confs, each decided once (``model/conf.py``): what a checkpoint that does not
record a conf means is the same answer for every reader, the rewrite and ``metadata``."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import state_reader
from state_reader.formats.codecs import DEFAULT_CODEC, codec_name
from state_reader.inspect.overview import describe_checkpoint
from state_reader.model.checkpoint import JOIN_STORES
from state_reader.model.conf import (
    CONF_ENCODING,
    CONF_JOIN_FORMAT,
    CONF_PROVIDER,
    CONF_SHUFFLE_PARTITIONS,
    DEFAULT_ENCODING,
    HDFS_PROVIDER,
    PROVIDER_NAMES,
    ROCKSDB_PROVIDER,
    StoreConf,
    provider_name,
)
from tests.support.cli import run as cli_run


def _with_confs(checkpoint: str, target: Path, drop: tuple[str, ...] = (), put: dict[str, str] | None = None) -> str:
    """A copy of ``checkpoint`` whose offset log entries lack the confs ``drop`` and say ``put``."""
    shutil.copytree(checkpoint, target)
    offsets = target / "offsets"
    for entry in offsets.iterdir():
        if not entry.name.isdigit():
            continue
        lines = entry.read_text().split("\n")
        meta = json.loads(lines[1])
        meta["conf"] = {k: v for k, v in meta["conf"].items() if k not in drop} | (put or {})
        lines[1] = json.dumps(meta)
        entry.write_text("\n".join(lines))
        (offsets / f".{entry.name}.crc").unlink(missing_ok=True)  # the copy's checksum no longer fits
    return str(target)


def test_provider_names_one_mapping():
    assert PROVIDER_NAMES == {"hdfs": HDFS_PROVIDER, "rocksdb": ROCKSDB_PROVIDER}
    assert [provider_name(c) for c in (HDFS_PROVIDER, ROCKSDB_PROVIDER, "com.example.Other", None)] == [
        "hdfs",
        "rocksdb",
        None,
        None,
    ]
    help_text = cli_run("rewrite", "--help").stdout
    assert "[hdfs|rocksdb]" in help_text  # the command line offers the same names


def test_default_codec_one_constant():
    assert codec_name(None) == codec_name("") == DEFAULT_CODEC == "lz4"


def test_default_encoding_one_constant():
    assert StoreConf.parse({}).encoding == DEFAULT_ENCODING == "unsaferow"


def test_unrecorded_provider_and_partitions(checkpoints, tmp_path):
    """No provider class, shuffle partitions nor encoding in the offset log: the state files tell the
    provider, the partition directories the partitions, and the encoding is Spark's default; reads,
    ``metadata`` and the rewrite all say the same."""
    source = checkpoints("rocksdb_cl_agg_window")
    cp = _with_confs(source, tmp_path / "cp", drop=(CONF_PROVIDER, CONF_SHUFFLE_PARTITIONS, CONF_ENCODING))
    on_disk = len([n for n in os.listdir(os.path.join(cp, "state", "0")) if n.isdigit()])
    assert StoreConf.parse({}).shuffle_partitions is None
    plan_rows = state_reader.read_state(cp).num_rows
    assert plan_rows == state_reader.read_state(source).num_rows > 0
    info = describe_checkpoint(cp)
    assert info["provider"] == "rocksdb" and info["shuffle_partitions"] is None and info["codec"] == DEFAULT_CODEC
    # what the offset log does not record is shown as what it means, and said to be unrecorded
    assert info["encoding_format"] == DEFAULT_ENCODING and not info["encoding_recorded"]
    assert [r["numPartitions"] for r in state_reader.read_metadata(cp).to_pylist()] == [on_disk]
    report = state_reader.rewrite(cp, dry_run=True)
    # the rewrite took the checkpoint for HDFS and its partitions for 0
    assert report.source_provider == report.provider == "rocksdb"
    assert report.old_partitions == report.new_partitions == on_disk
    assert sum(s.rows for s in report.stores) == plan_rows


def test_join_state_format_from_operator_metadata(checkpoints, tmp_path):
    """A join keeps four stores or four column families as its operator metadata says; a conf naming another
    format (the whole query's, not the operator's) does not change how it is read or rewritten."""
    cp = _with_confs(checkpoints("join_left_outer_rocksdb_cl"), tmp_path / "cp", put={CONF_JOIN_FORMAT: "3"})
    report = state_reader.rewrite(cp, dry_run=True)
    assert sorted(s.store_name for s in report.stores) == sorted(JOIN_STORES)
    assert (
        sum(s.rows for s in report.stores)
        == sum(state_reader.read_state(cp, store_name=s).num_rows for s in JOIN_STORES)
        > 0
    )


def test_one_copy_in_the_source():
    """The decisions above are written once: a second copy of their words in the package is a second owner."""
    package = Path(state_reader.__file__).parent
    owners = {
        '"KiB"': "units.py",
        '"spark.sql.shuffle.partitions"': "conf.py",
        '"hdfs": ': "conf.py",
        '"RocksDB" in': None,
        '"unsaferow"': "conf.py",
    }
    for path in package.rglob("*.py"):
        text = path.read_text()
        for words, owner in owners.items():
            assert words not in text or path.name == owner, f"{words} written again in {path.relative_to(package)}"
