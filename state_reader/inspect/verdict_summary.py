"""Why the state is this big: every key's verdict (:mod:`state_reader.core.verdicts`) summed up for one
store, as ``state-reader why CP`` (no key filter) prints it and the notebook draws it.

Keys per verdict; when the keys that will leave go (a histogram over the watermark, or the batch time, at
which they leave, beside where that clock stands now); keys overdue; keys by their last change; and a
few of the oldest and of the never-evicted keys, each with the ``why -k`` command that explains it.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import shlex
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from state_reader.core.eviction import EVENTS, NEVER
from state_reader.core.verdicts import JOIN_SIDE, plan_verdicts, store_selectors, verdicts_of
from state_reader.formats.flatten import json_values
from state_reader.units import iso_time

BINS = 12  # bars of a histogram of when keys leave
SAMPLES = 5  # keys shown of the oldest and of the never-evicted


@dataclass
class VerdictSummary:
    """Every key's verdict of one store (both sides of a join), summed up."""

    checkpoint: str
    operator_id: int
    operator_name: str | None
    store_name: str | None
    state_var_name: str | None
    first_batch_id: int  # the first retained batch: a key unchanged since then has no last change
    latest_batch_id: int
    watermark_ms: int  # the watermark now (the latest batch's)
    batch_time_ms: int  # the batch time now
    watermark_moved_batch_id: int | None
    keys: int = 0
    counts: dict[str, int] = field(default_factory=dict)  # keys per event
    overdue: int = 0
    # when the keys that leave go: [{"from_ms", "to_ms", "keys"}], over the watermark and the batch time
    leaves_by_watermark: list[dict[str, int]] = field(default_factory=list)
    leaves_by_time: list[dict[str, int]] = field(default_factory=list)
    # keys by their last change: [{"last_changed_batch_id", "keys"}] (null: not since the first retained batch)
    ages: list[dict[str, Any]] = field(default_factory=list)
    oldest: list[dict[str, Any]] = field(default_factory=list)  # a few keys changed longest ago
    never: list[dict[str, Any]] = field(default_factory=list)  # a few keys nothing removes
    table: pa.Table | None = None  # every key's verdict (verdicts' table)

    def as_dict(self) -> dict[str, Any]:
        """Every field but ``table``, in order: what ``--json`` prints."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "table"}


def histogram(values: pa.Array | pa.ChunkedArray, bins: int = BINS) -> list[dict[str, int]]:
    """``[{"from_ms", "to_ms", "keys"}]``: the non-null times in ``bins`` equal spans from the first to the
    last (each span takes its start, not its end; the last takes both); none when there are none."""
    times = np.asarray(pc.drop_null(values).to_numpy(zero_copy_only=False), dtype=np.int64)
    if not len(times):
        return []
    low, high = int(times.min()), int(times.max())
    if low == high:
        return [{"from_ms": low, "to_ms": high, "keys": len(times)}]
    step = math.ceil((high - low + 1) / bins)
    edges = low + step * np.arange(bins + 1, dtype=np.int64)
    counts = np.bincount(np.minimum((times - low) // step, bins - 1), minlength=bins)
    return [
        {"from_ms": int(edges[i]), "to_ms": int(min(edges[i + 1] - 1, high)), "keys": int(counts[i])}
        for i in range(bins)
        if edges[i] <= high
    ]


def _literal(value: Any) -> str:
    """A key field's value as a key filter's literal."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, dt.datetime):
        value = value.astimezone(dt.timezone.utc)  # the filter takes a time without an offset as UTC
        value = value.strftime("%Y-%m-%d %H:%M:%S" + (".%f" if value.microsecond else ""))
    text = str(value).replace("\\", "\\\\").replace("'", "''")
    return f"'{text}'"


def _name(part: str) -> str:
    return part if part.isidentifier() else "`" + part.replace("`", "``") + "`"


def key_filter_of(key: dict[str, Any], prefix: str = "") -> str:
    """A key filter that selects exactly ``key`` (a key as ``read_state``'s ``to_pylist`` gives it)."""
    parts = []
    for name, value in key.items():
        path = prefix + _name(name)
        if isinstance(value, dict):
            parts.append(key_filter_of(value, path + "."))
        elif value is None:
            parts.append(f"{path} is null")
        else:
            parts.append(f"{path} = {_literal(value)}")
    return " and ".join(p for p in parts if p)


def why_command(checkpoint: str, key: dict[str, Any], selectors: dict[str, Any]) -> str:
    """The ``state-reader why`` command that explains one key."""
    words = ["state-reader", "why", shlex.quote(checkpoint), "-k", _quoted(key_filter_of(key))]
    if selectors.get("operator_id") is not None:
        words += ["-O", str(selectors["operator_id"])]
    if selectors.get("store_name"):
        words += ["-s", shlex.quote(selectors["store_name"])]
    if selectors.get("state_var_name"):
        words += ["--state-var-name", shlex.quote(selectors["state_var_name"])]
    return " ".join(words)


def _quoted(text: str) -> str:
    """A shell word of ``text``: in double quotes when nothing in it means anything there (a key filter's
    single quotes then read as they are), else as ``shlex`` quotes it."""
    return f'"{text}"' if not set(text) & set('"$`\\!') else shlex.quote(text)


def _samples(table: pa.Table, order: np.ndarray, checkpoint: str, selectors: dict[str, Any]) -> list[dict[str, Any]]:
    """The rows ``order`` names (a few), JSON-ready, each with its ``why`` command."""
    picked = table.take(pa.array(order[:SAMPLES], pa.int64()))
    out: list[dict[str, Any]] = []
    for row, key in zip(picked.drop_columns(["key"]).to_pylist(), picked.column("key").to_pylist(), strict=True):
        shown = json_values(picked.column("key").slice(len(out), 1))[0]
        out.append({"key": shown, **row, "command": why_command(checkpoint, key, selectors)})
    return out


def summarize_verdicts(
    checkpoint: str,
    *,
    operator_id: int | None = None,
    store_name: str | None = None,
    state_var_name: str | None = None,
    key_schema: str | None = None,
    value_schema: str | None = None,
    storage_options: dict[str, Any] | None = None,
) -> VerdictSummary:
    """Every key's verdict of one store, summed up (see the module docstring)."""
    selectors = store_selectors(
        operator_id=operator_id,
        store_name=store_name,
        state_var_name=state_var_name,
        key_schema=key_schema,
        value_schema=value_schema,
        storage_options=storage_options,
    )
    plans, plan = plan_verdicts(checkpoint, selectors)
    table = verdicts_of(plans)
    first = plans[0]
    return summarize(
        table,
        VerdictSummary(
            checkpoint=plan.checkpoint.location,
            operator_id=plan.operator_id,
            operator_name=first.operator_name,
            store_name=store_name,
            state_var_name=state_var_name,
            first_batch_id=min(vp.first_batch_id for vp in plans),
            latest_batch_id=first.latest_batch_id,
            watermark_ms=first.clocks.watermark_ms,
            batch_time_ms=first.clocks.batch_time_ms,
            watermark_moved_batch_id=first.clocks.watermark_moved_batch_id,
        ),
        selectors,
    )


def summarize(table: pa.Table, summary: VerdictSummary, selectors: dict[str, Any]) -> VerdictSummary:
    """``summary`` filled from a verdicts table (its counts, histograms, ages and samples)."""
    summary.table = table
    summary.keys = table.num_rows
    events = table.column("event").to_numpy(zero_copy_only=False).astype(str)
    summary.counts = {e: int((events == e).sum()) for e in EVENTS if (events == e).any()}
    summary.overdue = int(pc.sum(table.column("overdue").cast(pa.int64())).as_py() or 0)
    summary.leaves_by_watermark = histogram(table.column("when_watermark_ms"))
    summary.leaves_by_time = histogram(table.column("when_time_ms"))
    changed = table.column("last_changed_batch_id")
    counts = pa.table({"b": changed}).group_by("b").aggregate([([], "count_all")])
    summary.ages = sorted(
        ({"last_changed_batch_id": r["b"], "keys": r["count_all"]} for r in counts.to_pylist()),
        key=lambda r: -1 if r["last_changed_batch_id"] is None else r["last_changed_batch_id"],
    )
    batches = changed.fill_null(-1).to_numpy(zero_copy_only=False)
    location = summary.checkpoint
    summary.oldest = _samples(table, np.argsort(batches, kind="stable"), location, selectors)
    summary.never = _samples(table, np.flatnonzero(events == NEVER), location, selectors)
    return summary


def describe_leaving(summary: VerdictSummary) -> list[str]:
    """The summary's lines about when keys leave, in words (the text and the notebook's)."""
    lines = []
    for name, clock, now in (
        ("leaves_by_watermark", "watermark", summary.watermark_ms),
        ("leaves_by_time", "batch time", summary.batch_time_ms),
    ):
        bins = getattr(summary, name)
        if bins:
            waiting = sum(b["keys"] for b in bins)
            lines.append(
                f"{waiting} keys leave as the {clock} reaches {iso_time(bins[0]['from_ms'])}.."
                f"{iso_time(bins[-1]['to_ms'])}; the {clock} is {iso_time(now)}"
            )
    return lines


def canonical(value: Any) -> str:
    """A JSON-ready value as one line."""
    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)


__all__ = ["JOIN_SIDE", "VerdictSummary", "histogram", "key_filter_of", "summarize", "summarize_verdicts"]
