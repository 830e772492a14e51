"""state_reader: read Spark Structured Streaming state from checkpoints.

Spark-free::

    import state_reader
    table = state_reader.read_state(cp, operator_id=0, batch_id=3)   # pyarrow.Table
    meta = state_reader.read_metadata(cp)

With Spark (4.0+)::

    state_reader.register(spark)
    spark.read.format("state_reader.statestore").option("batchId", 3).load(cp)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from state_reader._version import __version__ as __version__
from state_reader.errors import RENAMED_ERRORS as _RENAMED_ERRORS
from state_reader.errors import (
    BatchNotRetainedError,
    ChangesLostError,
    ChecksumMismatchError,
    CodecUnavailableError,
    CommittedBatchUnavailableError,
    ConfChangeError,
    ConflictingOptionsError,
    CorruptFileError,
    DestinationNotEmptyError,
    DuplicateEditKeyError,
    EditNullError,
    EditPartitionError,
    EditSchemaError,
    EditValueError,
    EmptyOptionError,
    IncompleteRewriteError,
    InvalidConfValueError,
    InvalidEditError,
    InvalidOptionError,
    MissingSchemaFileError,
    MissingStateFileError,
    NegativeOptionError,
    NoPartitionError,
    OffsetLogUnavailableError,
    OffsetMetadataUnavailableError,
    OperatorMetadataReadError,
    ReadOutpacedError,
    RequiredOptionError,
    RewriteFailedError,
    RowDecodeError,
    RowEncodeError,
    SchemaReadError,
    SparkSetupError,
    StateReaderError,
    StorageError,
    TruncatedFileError,
    UncommittedBatchError,
    UnexpectedError,
    UnknownConfError,
    UnknownEditStoreError,
    UnsafeArchiveError,
    UnsupportedConfChangeError,
    UnsupportedOptionError,
    UnsupportedTypeError,
)

if TYPE_CHECKING:
    from typing import Any

    from state_reader.core.changefeed import changes, follow
    from state_reader.formats.flatten import with_unique_field_names
    from state_reader.fronts.api import (
        diagnose,
        read_metadata,
        read_state,
        repartition,
        rewrite,
        scan_state,
        verdicts,
    )
    from state_reader.fronts.notebook import Checkpoint
    from state_reader.fronts.notebook import open_checkpoint as open
    from state_reader.fronts.plotting import plot_state_size
    from state_reader.inspect.doctor import Diagnosis, Finding
    from state_reader.inspect.explain import Explanation, explain
    from state_reader.inspect.stats import stats

# The functions and classes below import numpy, pyarrow and fsspec, which the
# command line's cheap commands (``state-reader overview``) need not pay for at
# start: they are imported on first use (PEP 562), where they live.
_LAZY = {
    "diagnose": "state_reader.fronts.api",
    "read_metadata": "state_reader.fronts.api",
    "read_state": "state_reader.fronts.api",
    "scan_state": "state_reader.fronts.api",
    "rewrite": "state_reader.fronts.api",
    "repartition": "state_reader.fronts.api",
    "verdicts": "state_reader.fronts.api",
    "changes": "state_reader.core.changefeed",
    "follow": "state_reader.core.changefeed",
    "Diagnosis": "state_reader.inspect.doctor",
    "explain": "state_reader.inspect.explain",
    "Explanation": "state_reader.inspect.explain",
    "Finding": "state_reader.inspect.doctor",
    "with_unique_field_names": "state_reader.formats.flatten",
    "Checkpoint": "state_reader.fronts.notebook",
    "open": "state_reader.fronts.notebook",
    "plot_state_size": "state_reader.fronts.plotting",
    "stats": "state_reader.inspect.stats",
    # the DataFrame front imports pyspark
    "spark": "state_reader.spark",
}
_RENAMED = {"open": "open_checkpoint"}

__all__ = [
    "BatchNotRetainedError",
    "ChangesLostError",
    "Checkpoint",
    "ChecksumMismatchError",
    "CodecUnavailableError",
    "CommittedBatchUnavailableError",
    "ConfChangeError",
    "ConflictingOptionsError",
    "CorruptFileError",
    "DestinationNotEmptyError",
    "Diagnosis",
    "DuplicateEditKeyError",
    "EditNullError",
    "EditPartitionError",
    "EditSchemaError",
    "EditValueError",
    "EmptyOptionError",
    "Explanation",
    "Finding",
    "IncompleteRewriteError",
    "InvalidConfValueError",
    "InvalidEditError",
    "InvalidOptionError",
    "MissingSchemaFileError",
    "MissingStateFileError",
    "NegativeOptionError",
    "NoPartitionError",
    "OffsetLogUnavailableError",
    "OffsetMetadataUnavailableError",
    "OperatorMetadataReadError",
    "ReadOutpacedError",
    "RequiredOptionError",
    "RewriteFailedError",
    "RowDecodeError",
    "RowEncodeError",
    "SchemaReadError",
    "SparkSetupError",
    "StateReaderError",
    "StorageError",
    "TruncatedFileError",
    "UncommittedBatchError",
    "UnexpectedError",
    "UnknownConfError",
    "UnknownEditStoreError",
    "UnsafeArchiveError",
    "UnsupportedConfChangeError",
    "UnsupportedOptionError",
    "UnsupportedTypeError",
    "changes",
    "diagnose",
    "explain",
    "follow",
    "open",
    "plot_state_size",
    "read_metadata",
    "read_state",
    "register",
    "repartition",
    "rewrite",
    "scan_state",
    "stats",
    "verdicts",
    "with_unique_field_names",
]


def register(spark: Any) -> None:
    """Register ``state_reader.statestore``, ``state_reader.state-metadata`` and the SQL functions
    ``read_statestore`` and ``read_state_metadata`` with ``spark`` (pyspark 4.0+).

    On pyspark 3.4 and 3.5, which have no Python data sources, use
    :func:`state_reader.spark.read_statestore` and :func:`state_reader.spark.read_state_metadata`.
    """
    try:
        from state_reader.fronts.datasource import register as _register
    except ImportError as exc:
        import pyspark

        raise SparkSetupError(
            f"pyspark {pyspark.__version__} has no Python data sources (pyspark 4.0+): read with "
            "state_reader.spark.read_statestore(spark, path, **options) and "
            "state_reader.spark.read_state_metadata(spark, path)"
        ) from exc
    _register(spark)


def __getattr__(name: str) -> Any:
    if name in _RENAMED_ERRORS:  # an earlier name: the error, with a warning (not cached: it warns each time)
        import state_reader.errors

        return getattr(state_reader.errors, name)
    module_name = _LAZY.get(name)
    if module_name is None:
        raise AttributeError(f"module 'state_reader' has no attribute {name!r}")
    import importlib

    module = importlib.import_module(module_name)
    value = module if name == "spark" else getattr(module, _RENAMED.get(name, name))
    globals()[name] = value  # later lookups find it directly
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


# the module's names are its public API: not the compiler directive at its top
del annotations, TYPE_CHECKING
