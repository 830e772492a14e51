"""Exceptions raised by state_reader.

Every failure is a :class:`StateReaderError`. Option and checkpoint errors carry
the condition name of Spark's built-in reader (``STDS_*``) in ``error_class`` so a
user switching readers recognises them; file-format errors name the file and
what was wrong with it.
"""

from __future__ import annotations

import difflib
import functools
import inspect
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

_F = TypeVar("_F", bound=Callable[..., Any])


class StateReaderError(Exception):
    """Base class of every error state_reader raises."""

    error_class: str = "STATE_READER_ERROR"

    def __init__(self, message: str, *, path: str | None = None) -> None:
        super().__init__(f"[{self.error_class}] {message}")
        self.message = message
        self.path = path

    def getCondition(self) -> str:  # noqa: N802 - mirrors PySparkException
        """The error condition name, as PySpark exceptions expose it."""
        return self.error_class


class DeprecatedNameWarning(FutureWarning):
    """A name that still works but will not for long: the message names the one to use.

    A ``FutureWarning``, so that it shows in scripts and notebooks by default (Python
    hides a plain ``DeprecationWarning`` raised inside a library).
    """


def renamed_message(old: str, new: str) -> str:
    """What a warning says of a deprecated name, in every front."""
    return f"{old} is deprecated and will be removed in the release after next: use {new}"


# --- options ---------------------------------------------------------------


class InvalidOptionError(StateReaderError):
    """An option has a value the reader cannot accept."""

    error_class = "STDS_INVALID_OPTION_VALUE.WITH_MESSAGE"


class NegativeOptionError(InvalidOptionError):
    """A numeric option that must be >= 0 is negative."""

    error_class = "STDS_INVALID_OPTION_VALUE.IS_NEGATIVE"


class EmptyOptionError(InvalidOptionError):
    """A string option that must not be empty is empty."""

    error_class = "STDS_INVALID_OPTION_VALUE.IS_EMPTY"


class RequiredOptionError(StateReaderError):
    """A required option is missing."""

    error_class = "STDS_REQUIRED_OPTION_UNSPECIFIED"


class ConflictingOptionsError(StateReaderError):
    """Options were given together that cannot be combined."""

    error_class = "STDS_CONFLICT_OPTIONS"


class UnsupportedOptionError(StateReaderError):
    """An option of the built-in reader that this reader does not implement yet."""

    error_class = "STATE_READER_UNSUPPORTED_OPTION"


class ConfChangeError(StateReaderError):
    """A conf a rewrite was asked to change (``confs=``, ``--conf``) cannot be changed; nothing was written.
    ``conf`` names it."""

    error_class = "STATE_READER_CONF_CHANGE"

    def __init__(self, message: str, *, conf: str, path: str | None = None) -> None:
        super().__init__(message, path=path)
        self.conf = conf


class UnknownConfError(ConfChangeError, InvalidOptionError):
    """A conf Spark does not freeze into a checkpoint (a misspelt name, or one a rewrite has nothing to do with)."""

    error_class = "STATE_READER_CONF_CHANGE.UNKNOWN_CONF"


class InvalidConfValueError(ConfChangeError, InvalidOptionError):
    """A conf's value is malformed, or one Spark does not have."""

    error_class = "STATE_READER_CONF_CHANGE.INVALID_VALUE"


class UnsupportedConfChangeError(ConfChangeError, UnsupportedOptionError):
    """A change of a frozen conf that a rewrite refuses: no migration for it (yet), a format the query's
    operators do not have, or a provider the format needs; the message says which."""

    error_class = "STATE_READER_CONF_CHANGE.UNSUPPORTED"


class UnsupportedTypeError(StateReaderError):
    """State holds a type the chosen front cannot return."""

    error_class = "STATE_READER_UNSUPPORTED_TYPE"


# --- checkpoint ------------------------------------------------------------


class CommittedBatchUnavailableError(StateReaderError):
    """The requested batch has no commit log entry (never committed, or purged)."""

    error_class = "STDS_COMMITTED_BATCH_UNAVAILABLE"


class OffsetLogUnavailableError(StateReaderError):
    """The offset log entry of a batch is missing."""

    error_class = "STDS_OFFSET_LOG_UNAVAILABLE"


class OffsetMetadataUnavailableError(StateReaderError):
    """The offset log entry of a batch exists but holds no metadata line."""

    error_class = "STDS_OFFSET_METADATA_LOG_UNAVAILABLE"


class NoPartitionError(StateReaderError):
    """An operator's state directory has no partition directories."""

    error_class = "STDS_NO_PARTITION_DISCOVERED_IN_STATE_STORE"


class SchemaReadError(StateReaderError):
    """The key/value schema of a state store cannot be found or parsed."""

    error_class = "STDS_FAILED_TO_READ_STATE_SCHEMA"


class MissingSchemaFileError(SchemaReadError):
    """A store has no schema file (written before Spark 3.1, or lost); the read options
    ``keySchema`` and ``valueSchema`` give the schemas instead."""


class OperatorMetadataReadError(StateReaderError):
    """Operator metadata (state/<op>/_metadata) cannot be parsed."""

    error_class = "STDS_FAILED_TO_READ_OPERATOR_METADATA"


class MissingStateFileError(StateReaderError):
    """A file needed to rebuild the requested version does not exist."""

    error_class = "CANNOT_LOAD_STATE_STORE.CANNOT_READ_MISSING_SNAPSHOT_FILE"


# --- file contents ---------------------------------------------------------


class BatchNotRetainedError(MissingStateFileError, CommittedBatchUnavailableError):
    """The requested batch is older than the oldest batch in the commit log: the query cleaned it up.

    Every read that starts or ends at such a batch is refused, as Spark's reader refuses it, even while
    state files of that version are still on disk (without its commit entry nothing vouches for them).
    """

    error_class = "STATE_READER_BATCH_NOT_RETAINED"


class ChangesLostError(BatchNotRetainedError):
    """A follower of a running query fell behind: the query cleaned up batches it had not read yet."""

    error_class = "STATE_READER_CHANGES_LOST"


class ReadOutpacedError(MissingStateFileError):
    """A running query committed and cleaned up faster than every attempt to read its latest batch."""

    error_class = "STATE_READER_CHECKPOINT_CLEANED_UP_DURING_READ"


class CorruptFileError(StateReaderError):
    """A file's bytes do not follow the format they should."""

    error_class = "STATE_READER_CORRUPT_FILE"


class TruncatedFileError(CorruptFileError):
    """A file ends before its format says it should."""

    error_class = "STATE_READER_TRUNCATED_FILE"

    def __init__(self, message: str, *, path: str | None = None) -> None:
        # the word people search for, whichever format found the end too soon
        if "truncated" not in message.lower():
            message = f"{message} (the file is truncated: cut short by an interrupted copy or write, or a full disk)"
        super().__init__(message, path=path)


class ChecksumMismatchError(CorruptFileError):
    """A checksum stored in or beside a file does not match its bytes."""

    error_class = "STATE_READER_CHECKSUM_MISMATCH"


class CodecUnavailableError(StateReaderError):
    """A file uses a compression codec that is unknown or whose package is missing."""

    error_class = "STATE_READER_CODEC_UNAVAILABLE"


class RowDecodeError(CorruptFileError):
    """An UnsafeRow does not fit the schema it is decoded with."""

    error_class = "STATE_READER_ROW_DOES_NOT_FIT_SCHEMA"


class RowEncodeError(StateReaderError):
    """A value cannot be written as an UnsafeRow of the schema it is encoded with
    (e.g. a decimal wider than its precision, a null map key)."""

    error_class = "STATE_READER_VALUE_DOES_NOT_FIT_SCHEMA"


class StorageError(StateReaderError):
    """The storage behind a checkpoint failed while reading it."""

    error_class = "STATE_READER_STORAGE_ERROR"


class UnsafeArchiveError(CorruptFileError):
    """A RocksDB snapshot zip, or the file list inside it, names a path that could
    escape the directory it is extracted to (absolute, ``..``, symlink, or too large)."""

    error_class = "STATE_READER_UNSAFE_ARCHIVE_ENTRY"


class SparkSetupError(StateReaderError):
    """The Spark a front runs on lacks a setting a read needs; the message names it and where it goes."""

    error_class = "STATE_READER_SPARK_SETUP"


# --- rewriting ---------------------------------------------------------------


class IncompleteRewriteError(CommittedBatchUnavailableError):
    """The location is what a rewrite left when it stopped part-way, not a checkpoint."""

    error_class = "STATE_READER_INCOMPLETE_REWRITE"


class DestinationNotEmptyError(StateReaderError):
    """A rewrite's destination already holds files: a rewrite only ever creates a new checkpoint."""

    error_class = "STATE_READER_DESTINATION_NOT_EMPTY"


class UncommittedBatchError(StateReaderError):
    """The source's last planned batch has no commit: its query is running, or stopped mid-batch."""

    error_class = "STATE_READER_UNCOMMITTED_BATCH"


class RewriteFailedError(StateReaderError):
    """A rewrite stopped part-way; its destination is marked so that Spark refuses to start from it."""

    error_class = "STATE_READER_REWRITE_FAILED"


class InvalidEditError(StateReaderError):
    """Rows given to write into a store (``upsert``, ``delete``) do not fit it; nothing was written."""

    error_class = "STATE_READER_INVALID_EDIT"


class EditSchemaError(InvalidEditError):
    """A column or field of the rows is missing or extra, or its type does not fit the store's schema."""

    error_class = "STATE_READER_EDIT_SCHEMA_MISMATCH"


class EditValueError(EditSchemaError):
    """A value of the rows is not one the store's type holds exactly (1.5 or 3e9 for an ``int``, text for
    a number, a decimal with more digits than its scale)."""

    error_class = "STATE_READER_EDIT_VALUE"


class EditNullError(InvalidEditError):
    """The rows hold a null where the store's schema forbids one."""

    error_class = "STATE_READER_EDIT_NULL"


class DuplicateEditKeyError(InvalidEditError):
    """The same key appears twice among the rows given for one store (or is both upserted and deleted)."""

    error_class = "STATE_READER_EDIT_DUPLICATE_KEY"


class UnknownEditStoreError(InvalidEditError):
    """The rows name a store, operator or state variable the checkpoint does not have."""

    error_class = "STATE_READER_EDIT_UNKNOWN_STORE"


class EditPartitionError(InvalidEditError):
    """A ``partition_id`` given with the rows is not the partition Spark's hash gives the row's key."""

    error_class = "STATE_READER_EDIT_WRONG_PARTITION"


# the errors' earlier names (``CHANGELOG.md`` says when each goes): an edit's rows were called a seed
RENAMED_ERRORS = {
    "InvalidSeedError": "InvalidEditError",
    "SeedSchemaError": "EditSchemaError",
    "SeedValueError": "EditValueError",
    "SeedNullError": "EditNullError",
    "DuplicateSeedKeyError": "DuplicateEditKeyError",
    "UnknownSeedStoreError": "UnknownEditStoreError",
    "SeedPartitionError": "EditPartitionError",
}


def __getattr__(name: str) -> type[StateReaderError]:
    """An earlier name of an error: the error itself, with a :class:`DeprecatedNameWarning`."""
    new = RENAMED_ERRORS.get(name)
    if new is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import warnings

    warnings.warn(renamed_message(name, new), DeprecatedNameWarning, stacklevel=2)
    error: type[StateReaderError] = globals()[new]
    return error


class UnexpectedError(StateReaderError):
    """A failure state_reader did not anticipate: a bug, or damage no check recognised.

    The original exception is chained as ``__cause__``; the message says what was
    being read when it happened.
    """

    error_class = "STATE_READER_UNEXPECTED_ERROR"


@contextmanager
def unexpected_errors_as_ours(what: str) -> Iterator[None]:
    """Let our errors through and turn any other exception into :class:`UnexpectedError`.

    Used at the public entry points only, so a gap in a decoder's checks still ends
    in a ``StateReaderError`` that says what was being read.
    """
    try:
        yield
    except StateReaderError:
        raise
    except MemoryError as exc:
        raise UnexpectedError(f"ran out of memory while reading {what}", path=what) from exc
    except Exception as exc:
        raise UnexpectedError(
            f"unexpected {type(exc).__name__} while reading {what}: {exc} (a damaged file that no check "
            "recognised, or a bug in state_reader; the original exception is chained)",
            path=what,
        ) from exc


# set by Spark in the environment of the Python workers it starts, and nowhere else
_WORKER_ENV = "PYTHON_WORKER_FACTORY_SECRET"
_HIDE_TRACEBACK_ENV = "SPARK_HIDE_TRACEBACK"


@contextmanager
def spark_worker_errors(what: str) -> Iterator[None]:
    """:func:`unexpected_errors_as_ours` for code Spark runs in a Python worker.

    Spark shows a worker's error as its Python traceback, whose first line is
    "Traceback (most recent call last):"; our own errors say all there is to say,
    so they are shown as their message alone, as Spark's built-in reader shows its
    own. A worker exits after reporting an error, so the setting dies with it.
    :class:`UnexpectedError` (a bug, or damage nobody foresaw) keeps its traceback.
    """
    try:
        with unexpected_errors_as_ours(what):
            yield
    except StateReaderError as exc:
        if not isinstance(exc, UnexpectedError) and _WORKER_ENV in os.environ:
            os.environ[_HIDE_TRACEBACK_ENV] = "1"
        raise


def public_api(func: _F, *, rename: Callable[[str], str] | None = None) -> _F:
    """The error boundary of a public function whose first argument is the checkpoint.

    Every error it lets out is a :class:`StateReaderError`: ours as raised, anything
    else as :class:`UnexpectedError` naming the checkpoint. ``rename`` rewrites the
    messages in the caller's words (the options as the function's keywords).
    """

    signature = inspect.signature(func)

    @functools.wraps(func)
    def boundary(checkpoint: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            signature.bind(checkpoint, *args, **kwargs)
        except TypeError as exc:
            unknown = [k for k in kwargs if k not in signature.parameters]
            if not unknown:
                raise InvalidOptionError(f"{func.__name__}(): {exc}") from None
            guess = difflib.get_close_matches(unknown[0], list(signature.parameters), n=1, cutoff=0.6)
            hint = f"; did you mean '{guess[0]}'?" if guess else ""
            raise InvalidOptionError(f"{func.__name__}() has no argument '{unknown[0]}'{hint}") from None
        try:
            with unexpected_errors_as_ours(str(checkpoint)):
                return func(checkpoint, *args, **kwargs)
        except StateReaderError as exc:
            if rename is not None:
                renamed(exc, rename)
            raise

    return boundary  # type: ignore[return-value]


def renamed(exc: StateReaderError, rename: Callable[[str], str]) -> StateReaderError:
    """``exc`` with its message rewritten by ``rename`` (its class, path and cause kept)."""
    exc.message = rename(exc.message)
    exc.args = (f"[{exc.error_class}] {exc.message}",)
    return exc
