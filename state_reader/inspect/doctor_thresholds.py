"""The doctor's thresholds, by name: a leaf module, so that the command line lists them
in its help without loading the doctor (and numpy, pyarrow) first."""

from __future__ import annotations

from state_reader.core.skew import SKEW_MIN_ROWS, SKEW_THRESHOLD

# name -> (default, what it bounds); `state-reader doctor --threshold NAME=VALUE` overrides one
THRESHOLDS: dict[str, tuple[float, str]] = {
    "skew": (SKEW_THRESHOLD, "a partition holding this many times the median partition's rows is skewed"),
    "skew-min-rows": (SKEW_MIN_ROWS, "partitions with fewer rows than this are too small to call skewed"),
    "long-chain": (50, "deltas or changelogs replayed after the last snapshot, in any partition"),
    "stalled-batches": (5, "batches that took input while the watermark stayed where it was"),
    "growth-batches": (5, "batches over which state grew with no key removed"),
    "large-row-bytes": (1 << 20, "a row whose key and value take at least this many bytes as stored (uncompressed)"),
    "join-eviction-rows": (100_000, "rows a join on state format 3 or less buffers, all scanned by each eviction"),
    "waste-files": (10, "state files (and SSTs) of one store that no retained batch can use"),
}
