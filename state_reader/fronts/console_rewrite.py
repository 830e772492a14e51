"""What ``state-reader rewrite`` prints: the report of a rewrite (or dry run), as text or ``--json``.

Beside :mod:`state_reader.fronts.console`, whose helpers it prints with; the command is in
:mod:`state_reader.fronts.cli_rewrite`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.text import Text

from state_reader.fronts.console import emit_json, new_console
from state_reader.units import human_bytes

if TYPE_CHECKING:
    from state_reader.core.rewrite import RewriteReport, StoreReport


def render_rewrite(report: RewriteReport, *, plot_out: str | None, as_json: bool) -> None:
    """``rewrite``: the report of what was (or, dry, would be) written, and the plot drawn."""
    if as_json:
        emit_json({**report.summary(), "plot": plot_out})
        return
    con = new_console()
    for line in rewrite_lines(report):
        con.print(Text(line))
    if plot_out is not None:
        con.print(Text(f"wrote {plot_out}"))


def rewrite_lines(report: RewriteReport) -> list[str]:
    """A rewrite's report as text: what was written (or not, dry), the current and the new layout's
    sizes and skew, and each store's rows."""
    import math
    import statistics

    from state_reader.core.rewrite.report import LAYOUTS

    move = (
        f"{report.source_provider} -> {report.provider}"
        if report.source_provider != report.provider
        else report.provider
    )
    span = f"{report.old_partitions} -> {report.new_partitions} partitions"
    if report.dry_run:
        head = f"dry run: {report.source} at batch {report.batch_id}, {move}, {span} (nothing written)"
    else:
        head = (
            f"rewrote {report.source} at batch {report.batch_id} into {report.destination}: {move}, {span}, "
            f"{report.files} files, {human_bytes(report.bytes)}"
        )
    lines = [head]
    width = max(len(name) for name, _ in LAYOUTS)
    for label, new in LAYOUTS:
        rows, size = (a.tolist() for a in report.partition_sizes(new))
        if not rows:
            continue
        skew = report.skew(new)
        # more than half the partitions empty: a ratio to an empty median says nothing
        skew_text = (
            f"skew (max/median) {skew:.2f}"
            if math.isfinite(skew)
            else f"{sum(s == 0 for s in size)} of {len(size)} partitions empty"
        )
        lines.append(
            f"  {label:>{width}}: {len(rows)} partitions, {sum(rows):,} rows, {human_bytes(sum(size))}; per partition "
            f"{human_bytes(min(size))} .. median {human_bytes(statistics.median(size))} .. "
            f"max {human_bytes(max(size))}, {skew_text}"
        )
    for s in report.stores:
        dropped = f", {s.dropped} dropped" if s.dropped else ""
        per = s.rows_per_partition
        shown = (
            (
                str(per)
                if len(per) <= 16
                else f"{min(per):,} .. median {int(statistics.median(per)):,} .. max {max(per):,}"
            )
            if per
            else "[]"
        )
        lines.append(
            f"  operator {s.operator_id} ({s.operator_name or 'unknown'}) store {s.store_name}: "
            f"{s.rows:,} rows{dropped}, per partition {shown}"
        )
        if s.edited:
            lines += edit_lines(s)
    return lines


# partitions listed one per line in a rewrite's report of rows written; beyond, a count of the rest
_EDITED_PARTITIONS_SHOWN = 32


def edit_lines(store: StoreReport) -> list[str]:
    """The rows written into one store (``upsert``, ``delete``): keys gained, replaced and lost,
    in all and in each partition they changed, and the widenings applied to the rows' types."""
    gained, replaced, lost = store.gained_per_partition, store.replaced_per_partition, store.lost_per_partition
    lines = [f"    rows written: {sum(gained):,} keys gained, {sum(replaced):,} replaced, {sum(lost):,} lost"]
    changed = [p for p, counts in enumerate(zip(gained, replaced, lost, strict=True)) if any(counts)]
    for p in changed[:_EDITED_PARTITIONS_SHOWN]:
        lines.append(f"      partition {p} gains {gained[p]:,}, replaces {replaced[p]:,}, loses {lost[p]:,}")
    if len(changed) > _EDITED_PARTITIONS_SHOWN:
        lines.append(f"      and {len(changed) - _EDITED_PARTITIONS_SHOWN:,} more partitions")
    lines += [f"    {note}" for note in store.widened]
    return lines
