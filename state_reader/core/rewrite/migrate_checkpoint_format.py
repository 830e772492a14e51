"""The RocksDB checkpoint format a rewrite writes (``spark.sql.streaming.stateStore.checkpointFormatVersion``,
kept by the commit log, not the offset log): format 1 names a store's files by version alone
(``<version>.zip``), format 2 by version and a unique id (``<version>_<uuid>.zip``) that the batch's commit
entry lists (``v2`` header, ``stateUniqueIds``). Spark keeps a checkpoint in the format its commit log says
whatever the session's conf says, so a rewrite is the way from one to the other.

The rewrite writes one snapshot per partition at the new version, so a change of format is the names it gives
those files and the commit entries it writes: format 2 lists the new ids in the rewritten batch's entry;
format 1 lists none, in that entry or in the earlier ones it copies.
"""

from __future__ import annotations

import json

from state_reader.core.rewrite.migrate import ConfChange
from state_reader.model.checkpoint import CheckpointDir
from state_reader.model.conf import CONF_CHECKPOINT_FORMAT

UNIQUE_IDS = "stateUniqueIds"


def names_files_by_unique_id(cp: CheckpointDir, batch: int, changes: list[ConfChange]) -> bool:
    """Whether the destination is in checkpoint format 2: as asked, else as the source is."""
    change = next((c for c in changes if c.key == CONF_CHECKPOINT_FORMAT and c.changed), None)
    return cp.names_files_by_unique_id(batch) if change is None else change.new == "2"


def commit_log_version(unique_ids: bool, source_version: int) -> int:
    """The version (header) of a destination commit entry: 2 with unique ids; without them the source's, where
    that is not the 2 of unique ids (format 1 entries are ``v1``)."""
    if unique_ids:
        return 2
    return 1 if source_version == 2 else source_version


def format_1_commit(raw: bytes) -> bytes:
    """A commit entry as checkpoint format 1 writes it: ``v1``, without the unique ids of format 2."""
    lines = raw.decode("utf-8").split("\n")
    if not lines[0].strip() == "v2":
        return raw
    entry = json.loads(lines[1]) if len(lines) > 1 and lines[1].strip() else {}
    entry.pop(UNIQUE_IDS, None)
    return f"v1\n{json.dumps(entry, separators=(',', ':'))}".encode()


__all__ = ["UNIQUE_IDS", "commit_log_version", "format_1_commit", "names_files_by_unique_id"]
