"""Schema v3 files for the tests: the writer now lives beside its reader in ``state_reader.formats.schema_files``."""

from __future__ import annotations

from state_reader.formats.schema_files import write_schema_v3

__all__ = ["write_schema_v3"]
