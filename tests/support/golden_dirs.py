"""The committed golden checkpoints opened without Spark, for tests that need real state files."""

from __future__ import annotations

from state_reader.io.storage import Storage
from state_reader.model.checkpoint import CheckpointDir
from tests.support.paths import GOLDEN

# the newest writer among the golden checkpoints: it writes operator metadata too
WRITER = "spark-4.0.5"


def golden_path(name: str, writer: str = WRITER) -> str:
    """The path of golden checkpoint ``name`` as ``writer`` wrote it."""
    return str(GOLDEN / writer / name)


def golden_checkpoint(name: str, writer: str = WRITER) -> CheckpointDir:
    """A fresh read-only view of golden checkpoint ``name``."""
    return CheckpointDir(Storage(golden_path(name, writer)))
