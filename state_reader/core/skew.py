"""Skew: how unevenly a store's state is spread over its partitions. One formula and one
verdict, used by ``state-reader stats``, ``doctor`` and the rewrite report.

Skew is the largest partition over the median partition (1.0 = even). When more than
half the partitions are empty the median is 0 and the skew is infinite: one task holds
what the others do not, which is as skewed as a store gets. A store with nothing in any
partition is even (1.0).

Pure Python, no numpy: the command line lists the doctor's thresholds, these among them,
in its help without loading the readers.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

# a partition holding this many times the median partition's rows is skewed...
SKEW_THRESHOLD = 4.0
# ...once it holds at least this many rows: smaller states are uneven by chance
SKEW_MIN_ROWS = 1000


def skew(largest: float, median: float) -> float:
    """Largest partition over median partition: 1.0 when all are empty, inf when the median one is."""
    if largest <= 0:
        return 1.0
    if median <= 0:
        return math.inf
    return largest / median


def partition_skew(values: Sequence[float]) -> float:
    """:func:`skew` of the partitions' sizes (rows or bytes); 1.0 for no partitions."""
    if len(values) == 0:
        return 1.0
    return skew(float(max(values)), float(statistics.median(values)))


def is_skewed(
    largest: float, median: float, threshold: float = SKEW_THRESHOLD, min_rows: float = SKEW_MIN_ROWS
) -> bool:
    """The verdict: the largest partition holds at least ``min_rows`` rows and ``threshold`` times the median's."""
    return largest >= min_rows and skew(largest, median) >= threshold
