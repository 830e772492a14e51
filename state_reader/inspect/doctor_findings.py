"""What ``doctor``'s checks report and share: a :class:`Finding`, the :class:`Store` a check of a
store looks at, and the words findings count with.

Kept apart from :mod:`state_reader.inspect.doctor`, which imports the checks, so that the checks
(:mod:`~state_reader.inspect.doctor_files`, :mod:`~state_reader.inspect.doctor_state`) can import it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from state_reader.core.size import StoredSizes
from state_reader.model.plan import StateReadPlan


@dataclass(frozen=True)
class Finding:
    """One thing ``doctor`` found: its kind, how bad, where, the numbers, and what to do."""

    kind: str
    severity: str
    operator_id: int | None
    store_name: str | None
    summary: str
    evidence: dict[str, Any]
    action: str


@dataclass
class Store:
    """One store of one operator as read at the latest committed batch: what the checks of a store look at."""

    operator_id: int
    store_name: str
    operator_name: str | None
    plan: StateReadPlan
    table: pa.Table
    # each partition's rows' sizes as stored, measured as the table was read (none for a join side)
    sizes: dict[int, StoredSizes] = field(default_factory=dict)


def plural(count: int, word: str) -> str:
    """A count and its word, as findings write them: ``1 row``, ``3 rows``."""
    return f"{count} {word}{'' if count == 1 else 's'}"
