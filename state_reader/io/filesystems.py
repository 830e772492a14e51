"""Which fsspec filesystem a checkpoint's URL opens, and with which options.

Hadoop's scheme names (``s3a://``, ``file:/abs``) are read as fsspec knows them; the
options are the user's, plus what a filesystem needs to serve this reader well (on S3,
a connection pool as wide as the fetches in flight). :class:`~state_reader.io.storage.Storage`
opens every filesystem through here.
"""

from __future__ import annotations

from typing import Any

from state_reader.errors import StorageError
from state_reader.io.calls import io_threads

# Hadoop's scheme names for S3 that fsspec does not know under those names.
SCHEME_ALIASES = {"s3a": "s3", "s3n": "s3"}


def filesystem_options(protocol: str, storage_options: dict[str, Any]) -> dict[str, Any]:
    """The options a filesystem is opened with: the user's, and on S3 (s3fs) a connection pool as
    wide as the fetches in flight (:func:`io_threads`) unless ``config_kwargs`` sets
    ``max_pool_connections``. botocore's default pool of 10 holds every fetch past the tenth
    back, silently, until a connection is free: a read latency-bound at 100 ms per request took
    1.7x-1.9x as long (benchmarks/bench_s3.py)."""
    if protocol != "s3":
        return storage_options
    config = storage_options.get("config_kwargs")
    if config is None:
        config = {}
    if not isinstance(config, dict) or "max_pool_connections" in config:
        return storage_options  # the user's setting, or a value s3fs refuses with its own error
    return {**storage_options, "config_kwargs": {**config, "max_pool_connections": io_threads()}}


def split_url(url: str) -> tuple[str, str, str]:
    """Return (fsspec protocol, scheme as given, path without scheme) for a path or URL."""
    if "://" not in url:
        if url.startswith("file:"):  # Hadoop writes file:/abs/path
            return "file", "file", url[len("file:") :]
        return "file", "file", url
    scheme, rest = url.split("://", 1)
    given = scheme.lower()
    return SCHEME_ALIASES.get(given, given), given, rest


def open_filesystem(url: str, protocol: str, storage_options: dict[str, Any]) -> Any:
    """The fsspec filesystem of ``protocol`` for ``url``, or a :class:`StorageError` that says what to install
    or set."""
    import fsspec

    try:
        return fsspec.filesystem(protocol, **filesystem_options(protocol, storage_options))
    except ImportError as exc:
        raise StorageError(
            f"cannot open {url!r}: the fsspec implementation of '{protocol}://' is not installed "
            f"({exc}); for s3:// and s3a:// install 's3fs', for gs:// 'gcsfs', for abfs:// 'adlfs'",
            path=url,
        ) from exc
    except OSError as exc:
        if protocol in ("hdfs", "viewfs") and "libjvm" in str(exc):
            raise StorageError(
                f"cannot open {url!r}: {protocol}:// needs pyarrow's HDFS client, which needs a JVM "
                "(JAVA_HOME) and the Hadoop libraries (HADOOP_HOME, CLASSPATH from `hadoop classpath --glob`); "
                "or read the checkpoint through another fsspec protocol (webhdfs://, or a copy)",
                path=url,
            ) from exc
        raise StorageError(
            f"cannot open a filesystem for {url!r} with storage options "
            f"{sorted(storage_options)}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}",
            path=url,
        ) from exc
    except Exception as exc:  # unknown protocol, or options the filesystem refuses
        raise StorageError(
            f"cannot open a filesystem for {url!r} with storage options "
            f"{sorted(storage_options)}: {type(exc).__name__}: {exc}",
            path=url,
        ) from exc
