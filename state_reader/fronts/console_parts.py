"""The parts a command's text is made of (a console, tables, records, sparklines, JSON on stdout) and the
reports longer than a table (``overview``'s, ``stats``' stores, ``why``'s stories and verdicts, a rewrite's
report), which :class:`~state_reader.fronts.console.TextOutput` prints."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import click
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from state_reader.model.conf import provider_name
from state_reader.units import human_bytes

if TYPE_CHECKING:
    import pyarrow as pa

    from state_reader.core.rewrite import RewriteReport, StoreReport
    from state_reader.inspect.explain import Explanation
    from state_reader.inspect.stats import StatsResult
    from state_reader.inspect.verdict_summary import VerdictSummary

SPARK_BLOCKS = "▁▂▃▄▅▆▇█"
CELL_WIDTH = 48  # longest cell shown in table layout; records layout shows everything


# ---------------------------------------------------------------------------
# building blocks


def new_console() -> Console:
    """The console every command prints to."""
    # pipes get no colour; give them a wide page so tables are not squeezed to 80 columns
    width = None if sys.stdout.isatty() or os.environ.get("COLUMNS") else 200
    return Console(highlight=False, width=width)


def emit_json(obj: Any) -> None:
    """``obj`` as indented JSON on stdout."""
    click.echo(json.dumps(obj, ensure_ascii=False, indent=2, allow_nan=False, default=str))


def sparkline(values: Sequence[float]) -> str:
    """A one-line bar chart: ``▁▃▅█``."""
    if not values:
        return ""
    lo, hi = min(values), max(values)
    if hi == lo:
        return SPARK_BLOCKS[3] * len(values)
    return "".join(SPARK_BLOCKS[round((v - lo) / (hi - lo) * (len(SPARK_BLOCKS) - 1))] for v in values)


def data_table(names: list[str], rows: list[list[Any]]) -> Table:
    """Rows as a table, one column per name, long cells cut at :data:`CELL_WIDTH`."""
    from state_reader.formats.flatten import render_cell

    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    for name in names:
        table.add_column(name, no_wrap=True, overflow="ellipsis", max_width=CELL_WIDTH)
    for row in rows:
        # Text(): state values must never be read as rich markup
        table.add_row(*(Text(render_cell(v), style="dim" if v is None else "") for v in row))
    return table


def records(names: list[str], rows: list[list[Any]]) -> Table:
    """One block per row, one line per column: readable however many columns there are."""
    from state_reader.formats.flatten import render_cell

    grid = Table(box=None, show_header=False, pad_edge=False, padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column(overflow="fold")
    for i, row in enumerate(rows):
        if i:
            grid.add_row("", "")
        grid.add_row(Text(f"row {i + 1}", style="bold cyan"), "")
        for name, value in zip(names, row, strict=True):
            grid.add_row(Text(name), Text(render_cell(value), style="dim" if value is None else ""))
    return grid


def print_rows(con: Console, names: list[str], rows: list[list[Any]], layout: str) -> None:
    """A table when the rows fit the screen (or ``layout`` says so), else records."""
    from state_reader.formats.flatten import render_cell

    if layout == "auto":
        widths = [max([len(n)] + [min(len(render_cell(r[i])), CELL_WIDTH) for r in rows]) for i, n in enumerate(names)]
        layout = "table" if sum(w + 3 for w in widths) <= con.width else "records"
    con.print(data_table(names, rows) if layout == "table" else records(names, rows))


def relative(path: str | None, root: str) -> str:
    """``path`` inside the checkpoint ``root`` as ``state/0/1/1.delta``."""
    if not path:
        return "-"
    prefix = root.rstrip("/") + "/"
    return path[len(prefix) :] if path.startswith(prefix) else path


# ---------------------------------------------------------------------------
# reports longer than a table


def overview_text(con: Console, info: dict[str, Any]) -> None:
    """The checkpoint at a glance as ``overview`` prints it: its batches, state store and formats, then a
    table of its operators and their stores (and a transformWithState operator's state variables)."""
    b = info["batches"]
    formats = " · ".join(f"{k} v{v}" for k, v in info["state_format_versions"].items()) or "not recorded"
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    grid.add_row("checkpoint", Text(info["checkpoint"]))
    grid.add_row(
        "batches",
        f"{b['first_batch_id']}..{b['last_batch_id']} ({b['count']} committed, latest {b['latest_batch_id']})",
    )
    codec = info["codec"] + ("" if info["codec_recorded"] else " (default; not recorded)")
    parts = [info["provider"], f"codec {codec}"]
    if info["shuffle_partitions"] is not None:
        parts.append(f"{info['shuffle_partitions']} shuffle partitions")
    grid.add_row("state store", " · ".join(parts))
    if info["provider"] == "rocksdb":
        grid.add_row(
            "",
            f"changelog checkpointing {'on' if info['changelog_checkpointing'] else 'off'} · "
            f"checkpoint format v{info['checkpoint_format_version']}",
        )
    grid.add_row("state formats", formats)
    grid.add_row(
        "",
        f"encoding {info['encoding_format']} · row checksums {'on' if info['row_checksum'] else 'off'}",
    )
    grid.add_row("operator metadata", info["operator_metadata"])
    for i, frozen in enumerate(info.get("frozen_confs", [])):
        grid.add_row("frozen confs" if i == 0 else "", frozen_conf_text(frozen))
    con.print(grid)
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    for col in (
        "op",
        "operator",
        "store",
        "partitions",
        "dirs on disk",
        "provider",
        "state of batches",
        "properties",
    ):
        table.add_column(col)
    for op in info["operators"]:
        span = f"{op['batches']['first_batch_id']}..{op['batches']['last_batch_id']}" if op["batches"] else "-"
        for i, store in enumerate(op["stores"]):
            first = i == 0
            table.add_row(
                str(op["operator_id"]) if first else "",
                Text(op["operator_name"] or "unknown") if first else "",
                Text(store["store_name"]),
                str(store["num_partitions"]),
                str(op["partitions_on_disk"]) if first else "",
                op["provider"] if first else "",
                span if first else "",
                Text(op["operator_properties"] or "") if first else "",
            )
    if info["operators"]:
        con.print(table)
        for op in info["operators"]:  # transformWithState: the user's variables, a column family each
            if op.get("state_variables"):
                con.print(
                    Text(
                        f"operator {op['operator_id']} state variables: "
                        + "; ".join(f"{v['name']}: {v['described']}" for v in op["state_variables"])
                    )
                )
    else:
        con.print("no stateful operators (no state/ directory)")


def stats_text(con: Console, result: StatsResult, summary: pa.Table, detail: bool) -> None:
    """Each store's batches, growth, partitions and skew, as ``stats`` prints them."""
    from state_reader.core.skew import is_skewed
    from state_reader.inspect.stats import growth_note

    all_rows = result.table.to_pylist()
    for (op, store), provider in result.providers.items():
        batches = [r for r in summary.to_pylist() if r["operator_id"] == op and r["store_name"] == store]
        parts = [r for r in all_rows if r["operator_id"] == op and r["store_name"] == store]
        if not batches:
            continue
        name = result.operator_names.get(op) or "unknown"
        kind = provider_name(provider) or provider
        con.print(Text(f"operator {op} ({name}) · store {store} · {kind}", style="bold"))
        table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
        for col in ("batch", "rows", "Δ rows", "state", "on disk", "files", "chain", "largest partition", "max/median"):
            table.add_column(col, justify="left" if col == "largest partition" else "right")
        prev = None
        for r in batches:
            delta = "" if prev is None else f"{r['rows'] - prev:+d}"
            skew = r["rows_skew"]  # null: the median partition is empty, the skew infinite
            skew_text = Text(
                "∞" if skew is None else f"{skew:.2f}×",
                style="yellow" if is_skewed(r["max_partition_rows"], r["median_partition_rows"]) else "",
            )
            table.add_row(
                str(r["batch_id"]),
                str(r["rows"]),
                delta,
                human_bytes(r["state_bytes"]),
                human_bytes(r["bytes_on_disk"]),
                str(r["files"]),
                str(r["max_delta_chain"]),
                f"{r['max_partition']} ({r['max_partition_rows']} rows)",
                skew_text,
            )
            prev = r["rows"]
        con.print(table)
        first, last = batches[0], batches[-1]
        counts = [r["rows"] for r in batches]
        change = last["rows"] - first["rows"]
        pct = f" ({change / first['rows']:+.0%})" if first["rows"] else ""
        con.print(
            f"rows  {sparkline(counts)}  {first['rows']} → {last['rows']} over batches "
            f"{first['batch_id']}..{last['batch_id']}{pct}"
        )
        con.print(
            f"bytes {sparkline([r['state_bytes'] for r in batches])}  "
            f"{human_bytes(first['state_bytes'])} → {human_bytes(last['state_bytes'])} state, "
            f"{human_bytes(last['bytes_on_disk'])} on disk"
        )
        growth = growth_note(counts, first["batch_id"], last["batch_id"])
        if growth:
            con.print(Text(growth, style="yellow"))
        latest_parts = sorted(
            (p for p in parts if p["batch_id"] == last["batch_id"]), key=lambda p: (-p["rows"], p["partition_id"])
        )
        total = last["rows"] or 1
        ptable = Table(
            box=box.SIMPLE_HEAD,
            pad_edge=False,
            title=f"partitions at batch {last['batch_id']} (largest first)",
            title_justify="left",
        )
        for col in ("partition", "rows", "share", "state", "on disk", "files", "chain", "snapshot"):
            ptable.add_column(col, justify="right")
        for p in latest_parts[:10]:
            ptable.add_row(
                str(p["partition_id"]),
                str(p["rows"]),
                f"{p['rows'] / total:.0%}",
                human_bytes(p["state_bytes"]),
                human_bytes(p["bytes_on_disk"]),
                str(p["files"]),
                str(p["delta_chain"]),
                "-" if p["snapshot_version"] is None else str(p["snapshot_version"]),
            )
        con.print(ptable)
        if len(latest_parts) > 10:
            con.print(f"… and {len(latest_parts) - 10} more partitions (--json lists all)")
        skew = last["rows_skew"]
        # the doctor's verdict and threshold (`doctor` reports the same store as a skew finding)
        verdict = "skewed" if is_skewed(last["max_partition_rows"], last["median_partition_rows"]) else "even"
        con.print(
            Text(
                f"skew at batch {last['batch_id']}: partition {last['max_partition']} holds "
                f"{last['max_partition_rows']} of {last['rows']} rows; largest/median "
                f"{'∞' if skew is None else f'{skew:.2f}×'} ({verdict}); median partition "
                f"{last['median_partition_rows']:g} rows",
                style="yellow" if verdict == "skewed" else "",
            )
        )
        if detail:
            dtable = Table(box=box.SIMPLE_HEAD, pad_edge=False, title="every batch and partition", title_justify="left")
            for col in ("batch", "partition", "rows", "state", "on disk", "files", "chain", "snapshot"):
                dtable.add_column(col, justify="right")
            for p in parts:
                dtable.add_row(
                    str(p["batch_id"]),
                    str(p["partition_id"]),
                    str(p["rows"]),
                    human_bytes(p["state_bytes"]),
                    human_bytes(p["bytes_on_disk"]),
                    str(p["files"]),
                    str(p["delta_chain"]),
                    "-" if p["snapshot_version"] is None else str(p["snapshot_version"]),
                )
            con.print(dtable)
        con.print()


def why_text(con: Console, result: Explanation) -> None:
    """Each key's story as ``why -k`` prints it: its timeline as a table, then the verdict on it in one line."""
    from state_reader.formats.flatten import render_compact
    from state_reader.units import iso_time

    where = f"operator {result.operator_id} ({result.operator_name or 'unknown'})"
    if result.state_var_name:
        where += f", state variable {result.state_var_name}"
    elif result.store_name:
        where += f", store {result.store_name}"
    con.print(Text(f"{where}; retained batches {result.first_batch_id}..{result.latest_batch_id}", style="bold"))
    if result.message:
        con.print(Text(result.message, style="yellow"))
    styles = {"never": "red bold", "gone": "dim", "fire": "cyan bold"}
    for story in result.keys:
        side = f" ({story.join_side} side)" if story.join_side else ""
        con.print(Text(f"key {render_compact(story.key)}{side}", style="bold cyan"))
        rows = [
            [
                e.batch_id,
                iso_time(e.batch_time_ms or None),
                iso_time(e.watermark_ms),  # 0 (none set yet) too, as the offset log and --json give it
                e.change_type,
                render_compact(e.value) if e.value is not None else None,
            ]
            for e in story.timeline
        ]
        con.print(data_table(["batch", "batch time", "watermark", "change", "value"], rows))
        v = story.verdict
        style = "yellow bold" if v.overdue else styles.get(v.event, "green bold")
        con.print(Text(f"  {v.event}: {v.summary}", style=style))


def verdicts_text(con: Console, summary: VerdictSummary) -> None:
    """Every key's verdict summed up as ``why`` without a key filter prints it: keys per verdict, when they
    leave state, how many are overdue, their ages and a few of them."""
    from state_reader.formats.flatten import render_compact
    from state_reader.inspect.verdict_summary import describe_leaving
    from state_reader.units import iso_time

    where = f"operator {summary.operator_id} ({summary.operator_name or 'unknown'})"
    if summary.state_var_name:
        where += f", state variable {summary.state_var_name}"
    elif summary.store_name:
        where += f", store {summary.store_name}"
    con.print(
        Text(
            f"{where}: {summary.keys} keys in state at batch {summary.latest_batch_id}; retained batches "
            f"{summary.first_batch_id}..{summary.latest_batch_id}",
            style="bold",
        )
    )
    moved = "" if summary.watermark_moved_batch_id is None else f" (since batch {summary.watermark_moved_batch_id})"
    clocks = f"watermark {iso_time(summary.watermark_ms)}{moved}; batch time {iso_time(summary.batch_time_ms)}"
    con.print(Text(clocks))
    con.print(data_table(["event", "keys"], [[e, n] for e, n in summary.counts.items()]))
    for line in describe_leaving(summary):
        con.print(Text(line))
    for name, clock, now in (
        ("leaves_by_watermark", "watermark", summary.watermark_ms),
        ("leaves_by_time", "batch time", summary.batch_time_ms),
    ):
        bins = getattr(summary, name)
        if bins:
            top = max(b["keys"] for b in bins) or 1
            rows = [
                [
                    iso_time(b["from_ms"]),
                    iso_time(b["to_ms"]),
                    b["keys"],
                    "█" * max(1 if b["keys"] else 0, round(20 * b["keys"] / top)) or None,
                    "◀ now" if b["from_ms"] <= now <= b["to_ms"] else None,
                ]
                for b in bins
            ]
            con.print(data_table([f"{clock} from", "to", "keys", "", ""], rows))
    style = "yellow bold" if summary.overdue else "green"
    con.print(Text(f"overdue: {summary.overdue} keys whose time has come are still in state", style=style))
    ages = [
        [
            a["last_changed_batch_id"]
            if a["last_changed_batch_id"] is not None
            else f"<= {summary.first_batch_id} (not since)",
            a["keys"],
        ]
        for a in summary.ages
    ]
    con.print(Text("keys by last change", style="bold"))
    con.print(data_table(["last changed batch", "keys"], ages))
    for title, samples in (("oldest keys", summary.oldest), ("never evicted", summary.never)):
        if not samples:
            continue
        con.print(Text(title, style="bold red" if title == "never evicted" else "bold"))
        for sample in samples:
            side = f" ({sample['join_side']} side)" if sample.get("join_side") else ""
            when = sample["when_watermark_ms"] or sample["when_time_ms"]
            at = f" at {iso_time(when)}" if when is not None else ""
            changed = sample["last_changed_batch_id"]
            last = f"in batch {changed}" if changed is not None else f"at or before batch {summary.first_batch_id}"
            con.print(Text(f"  {render_compact(sample['key'])}{side}: {sample['event']}{at}; last changed {last}"))
            con.print(Text(f"    {sample['command']}", style="dim"))


def frozen_conf_text(frozen: dict[str, Any]) -> str:
    """One frozen conf as ``overview`` and ``doctor`` print it: its value, and whether a rewrite changes it."""
    value = frozen["value"] if frozen["recorded"] else f"{frozen['value'] or 'the session value'} (not recorded)"
    how = "rewrite --conf changes it" if frozen["migration"] else "a rewrite does not change it"
    return f"{frozen['conf']} = {value} · {how}"


def conf_lines(confs: list[dict[str, Any]], dry_run: bool) -> list[str]:
    """A rewrite's frozen confs asked for: each changed one old -> new and how, then those already so."""
    verb = "would change" if dry_run else "changed"
    lines = [
        f"  conf {c['conf']}: {c['old'] or 'unset'} -> {c['new']} ({c['migration']}; {verb})"
        for c in confs
        if c["changed"]
    ]
    same = [c["conf"] for c in confs if not c["changed"]]
    if same:
        lines.append(f"  unchanged (already so): {', '.join(same)}")
    return lines


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
    lines += conf_lines(report.confs, report.dry_run)
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
