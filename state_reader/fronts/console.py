"""What ``state-reader`` prints: each command's result as text (rich tables) or as JSON.

The commands in :mod:`state_reader.fronts.cli` read their options, call the API and
hand what comes back to an :class:`Output`: :func:`output` picks :class:`TextOutput` or
:class:`JsonOutput` once from ``--json``, and a command writes its result once, to the
method named after it. A new command adds one method to each. Nothing here reads a
checkpoint or decides an exit code.
"""

from __future__ import annotations

import json
import sys
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any

import click
from rich import box
from rich.table import Table
from rich.text import Text

from state_reader.fronts.console_parts import (
    emit_json,
    frozen_conf_text,
    new_console,
    overview_text,
    print_rows,
    relative,
    rewrite_lines,
    stats_text,
    verdicts_text,
    why_text,
)
from state_reader.units import human_bytes

if TYPE_CHECKING:
    import pyarrow as pa

    from state_reader.core.rewrite import RewriteReport
    from state_reader.inspect.doctor import Diagnosis
    from state_reader.inspect.explain import Explanation
    from state_reader.inspect.export import ExportResult
    from state_reader.inspect.schema_check import SchemaVerdict, StoreSchema
    from state_reader.inspect.stats import StatsResult
    from state_reader.inspect.verdict_summary import VerdictSummary
    from state_reader.inspect.verify import VerifyReport
    from state_reader.model.plan import StateReadPlan

# Like the commands, each renderer imports what it uses when it runs (pyarrow for rows):
# `overview` or `--help` should not wait for what only `show` needs.

# ---------------------------------------------------------------------------
# what a command prints: one Output, text or JSON, chosen once per command


def output(as_json: bool) -> Output:
    """The one place ``--json`` is looked at: what every command prints to."""
    return JsonOutput() if as_json else TextOutput()


def _at_most(table: pa.Table, limit: int) -> tuple[pa.Table, bool]:
    """The first ``limit`` rows of ``table`` (all of them for 0), and whether rows were left out."""
    truncated = bool(limit) and table.num_rows > limit
    return (table.slice(0, limit) if truncated else table), truncated


class Output(ABC):
    """What each command prints, a method per command's result: text (:class:`TextOutput`) or JSON
    (:class:`JsonOutput`). JSON field names follow the vocabulary's table of them (``docs/vocabulary.md``)."""

    @abstractmethod
    def overview(self, info: dict[str, Any]) -> None:
        """``overview``: the checkpoint at a glance (``describe_checkpoint``'s dict)."""

    @abstractmethod
    def show(
        self,
        plan: StateReadPlan,
        table: pa.Table,
        *,
        shown_store: str,
        chosen: list[int],
        key_filter: str | None,
        partitions_given: bool,
        truncated: bool,
        limit: int,
        layout: str,
    ) -> None:
        """``show``: the rows read (``table``, already cut at ``limit``) of the ``chosen`` partitions."""

    @abstractmethod
    def stats(self, result: StatsResult, summary: pa.Table, *, detail: bool) -> None:
        """``stats``: the notes, each store's sizes (:func:`stats_text`) and the stores skipped."""

    @abstractmethod
    def changes(
        self,
        table: pa.Table,
        counts: list[dict[str, Any]],
        *,
        start: int,
        end: int | None,
        key_filter: str | None,
        limit: int,
        layout: str,
    ) -> None:
        """``changes``: the change feed of batches ``start``..``end``, its counts and its first ``limit`` rows."""

    @abstractmethod
    def follow_start(self, checkpoint: str, key_filter: str | None) -> None:
        """``changes --follow``: what is followed and how to stop, on stderr (text only: JSON lines stay rows)."""

    @abstractmethod
    def follow_batch(self, batch: int, table: pa.Table) -> None:
        """``changes --follow``: one committed batch's changes (text: their counts by change type too), flushed
        at once (JSON: a line per row)."""

    @abstractmethod
    def skipped(self, first: int, last: int) -> None:
        """``changes --follow --skip-lost``: batches ``first..last`` skipped because the query cleaned them up
        before they were read (a warning on stderr; with JSON also a line of its own on stdout)."""

    @abstractmethod
    def export(self, plan: StateReadPlan, result: ExportResult, *, out: str, shown_store: str, size: int) -> None:
        """``export``: what was written to ``out`` (``size`` bytes)."""

    @abstractmethod
    def verify(self, report: VerifyReport) -> None:
        """``verify``: each store's versions checked, then OK, INCOMPLETE or the problems found."""

    @abstractmethod
    def plot(self, out: str, *, width: int, height: int, stores: int, batches: list[int]) -> None:
        """``plot``: the image written to ``out``."""

    @abstractmethod
    def doctor(self, result: Diagnosis) -> None:
        """``doctor``: each finding with its evidence and what to do, or what was checked."""

    @abstractmethod
    def why(self, result: Explanation) -> None:
        """``why``: per key, its timeline as a table and one verdict line."""

    @abstractmethod
    def verdicts(self, summary: VerdictSummary) -> None:
        """``why`` without a key filter: keys per verdict, when they leave, their ages, a few of them."""

    @abstractmethod
    def schema(self, schemas: list[StoreSchema]) -> None:
        """``schema``: every store's stored key and value schema."""

    @abstractmethod
    def schema_diff(self, verdicts: list[SchemaVerdict]) -> None:
        """``schema-diff``: each store's verdict, then whether Spark would restart."""

    @abstractmethod
    def rewrite(self, report: RewriteReport, *, plot_out: str | None) -> None:
        """``rewrite``: the report of what was (or, dry, would be) written, and the plot drawn."""

    @abstractmethod
    def error(self, error_class: str, message: str, path: str | None) -> None:
        """A failed command: its one line on stderr is the command line's; JSON adds an object on stdout."""


class TextOutput(Output):
    """Text for people: rich tables and lines, wide enough for a pipe."""

    def overview(self, info: dict[str, Any]) -> None:
        overview_text(new_console(), info)

    def show(
        self,
        plan: StateReadPlan,
        table: pa.Table,
        *,
        shown_store: str,
        chosen: list[int],
        key_filter: str | None,
        partitions_given: bool,
        truncated: bool,
        limit: int,
        layout: str,
    ) -> None:
        from state_reader.formats.flatten import display_rows

        con = new_console()
        head = (
            f"operator {plan.operator_id} · store {shown_store} · batch {plan.batch_id} "
            f"(version {plan.version}) · partitions {', '.join(map(str, chosen))}"
            + (
                f" of {len(plan.partitions)} (the key filter pins the partition key)"
                if key_filter and not partitions_given and len(chosen) < len(plan.partitions)
                else ""
            )
        )
        con.print(Text(head + (f" · key filter: {key_filter}" if key_filter else ""), style="bold"))
        if table.num_rows == 0:
            con.print("no rows" + (" match the key filter" if key_filter else ""))
            return
        names, rows = display_rows(table)
        print_rows(con, names, rows, layout)
        if truncated:
            con.print(f"first {limit} rows shown; there are more (--limit 0 shows all)")
        else:
            con.print(f"{table.num_rows} row{'s' if table.num_rows != 1 else ''}")

    def stats(self, result: StatsResult, summary: pa.Table, *, detail: bool) -> None:
        skipped = [{"operator_id": op, "store_name": s, "reason": why} for op, s, why in result.skipped]
        con = new_console()
        for note in result.notes:
            con.print(Text(note, style="dim"))
        stats_text(con, result, summary, detail)
        for s in skipped:
            con.print(Text(f"operator {s['operator_id']} store {s['store_name']} skipped: {s['reason']}", style="dim"))

    def changes(
        self,
        table: pa.Table,
        counts: list[dict[str, Any]],
        *,
        start: int,
        end: int | None,
        key_filter: str | None,
        limit: int,
        layout: str,
    ) -> None:
        from state_reader.formats.flatten import display_rows

        total = table.num_rows
        shown, truncated = _at_most(table, limit)
        con = new_console()
        span = f"{start}..{end}" if end is not None else f"{start}..latest"
        con.print(
            Text(f"changes in batches {span}" + (f" · key filter: {key_filter}" if key_filter else ""), style="bold")
        )
        if total == 0:
            con.print("no changes")
            return
        by_batch: dict[int, list[str]] = {}
        for c in counts:
            by_batch.setdefault(c["batch_id"], []).append(
                f"{c['rows']} {c['change_type']}{'s' if c['rows'] != 1 else ''}"
            )
        for batch, parts in by_batch.items():
            con.print(f"  batch {batch}: {', '.join(parts)}")
        names, rows = display_rows(shown)
        print_rows(con, names, rows, layout)
        con.print(f"first {limit} of {total} rows shown (--limit 0 shows all)" if truncated else f"{total} rows")

    def follow_start(self, checkpoint: str, key_filter: str | None) -> None:
        shown = f" · key filter: {key_filter}" if key_filter else ""
        click.echo(f"following {checkpoint}{shown} (Ctrl-C stops)", err=True)

    def follow_batch(self, batch: int, table: pa.Table) -> None:
        from state_reader.core.changefeed import change_counts
        from state_reader.formats.flatten import display_rows

        counts = change_counts(table)
        summary = ", ".join(f"{c['rows']} {c['change_type']}{'s' if c['rows'] != 1 else ''}" for c in counts)
        click.echo(f"batch {batch}: {summary or 'no changes'}")
        if table.num_rows:
            names, rows = display_rows(table)
            for cells in rows:
                click.echo(
                    "  " + "  ".join(f"{n}={v}" for n, v in zip(names, cells, strict=True) if n not in ("batch_id",))
                )
        sys.stdout.flush()

    def skipped(self, first: int, last: int) -> None:
        _warn_skipped(first, last)

    def export(self, plan: StateReadPlan, result: ExportResult, *, out: str, shown_store: str, size: int) -> None:
        new_console().print(
            Text(
                f"wrote {result.rows} rows from {result.partitions} partitions of operator "
                f"{plan.operator_id} (store {shown_store}, batch {plan.batch_id}) to {out} "
                f"({result.format}, {human_bytes(size)})"
            )
        )

    def verify(self, report: VerifyReport) -> None:
        con = new_console()
        for s in report.stores:
            ps = s["partitions"]
            if ps:
                lo = min(p["first_version"] for p in ps)
                hi = max(p["last_version"] for p in ps)
                span = f"versions {lo}..{hi} (batches {lo - 1}..{hi - 1})"
            else:
                span = "no versions"
            con.print(
                Text(
                    f"operator {s['operator_id']} ({s['operator_name'] or 'unknown'}) · store {s['store_name']} · "
                    f"{len(ps)} partitions · {span}"
                )
            )
        for s in report.skipped:
            con.print(Text(f"operator {s['operator_id']} store {s['store_name']} skipped: {s['reason']}", style="dim"))
        if report.malformed_checksums:  # not damage: said apart from the verdict on the files decoded
            from state_reader.io.integrity import MalformedChecksum, describe_malformed

            found = [MalformedChecksum(**m) for m in report.malformed_checksums]
            con.print(Text(f"NOT VERIFIED: {describe_malformed(found)}", style="yellow"))
        if report.ok:
            con.print(Text(f"OK: {report.versions_checked} versions decoded without error", style="green bold"))
            return
        if not report.problems:
            con.print(
                Text(
                    f"INCOMPLETE: {report.versions_checked} versions decoded without error, but "
                    f"{len(report.skipped)} store{'s' if len(report.skipped) != 1 else ''} could not be checked",
                    style="red bold",
                )
            )
            return
        table = Table(box=box.SIMPLE_HEAD, pad_edge=False, title="problems", title_justify="left")
        for col in ("op", "store", "partition", "version", "batch", "error", "file", "message"):
            table.add_column(col, overflow="fold")
        for p in report.problems:
            table.add_row(
                str(p.operator_id),
                Text(p.store_name),
                "-" if p.partition_id is None else str(p.partition_id),
                "-" if p.version is None else str(p.version),
                "-" if p.batch_id is None else str(p.batch_id),
                p.error_class,
                Text(relative(p.path, report.checkpoint)),
                Text(p.message),
            )
        con.print(table)
        con.print(
            Text(f"DAMAGED: {len(report.problems)} of {report.versions_checked} versions failed", style="red bold")
        )
        for path, n in report.damaged_files().items():
            con.print(Text(f"  {path}: breaks {n} version{'s' if n != 1 else ''}"))

    def plot(self, out: str, *, width: int, height: int, stores: int, batches: list[int]) -> None:
        span = f"{batches[0]}..{batches[-1]}" if batches else "none"
        new_console().print(
            Text(f"wrote {out} ({width}×{height} px): {stores} store{'s' if stores != 1 else ''}, batches {span}")
        )

    def doctor(self, result: Diagnosis) -> None:
        con = new_console()
        if not result.findings:
            con.print(Text(f"nothing found in {result.checkpoint} (batch {result.batch_id}); checked:", style="green"))
            for line in result.checked:
                con.print(Text(f"  {line}"))
            self._frozen(con, result)
            return
        styles = {"error": "red bold", "warning": "yellow bold", "info": "cyan"}
        for f in result.findings:
            where = "" if f.operator_id is None else f" · operator {f.operator_id}, store {f.store_name}"
            con.print(Text(f"{f.severity.upper()} {f.kind}{where}", style=styles[f.severity]))
            con.print(Text(f"  {f.summary}"))
            con.print(
                Text(
                    "  evidence: "
                    + ", ".join(
                        f"{k}={json.dumps(v, default=str, ensure_ascii=False)}"
                        for k, v in f.evidence.items()
                        if not _beside_earlier(k, f.evidence)
                    ),
                    style="dim",
                )
            )
            con.print(Text(f"  what to do: {f.action}"))
        self._frozen(con, result)

    @staticmethod
    def _frozen(con: Any, result: Diagnosis) -> None:
        if result.frozen_confs:
            con.print(Text("frozen confs (what Spark restores at restart):", style="dim"))
            for frozen in result.frozen_confs:
                con.print(Text(f"  {frozen_conf_text(frozen)}", style="dim"))

    def why(self, result: Explanation) -> None:
        why_text(new_console(), result)

    def verdicts(self, summary: VerdictSummary) -> None:
        verdicts_text(new_console(), summary)

    def schema(self, schemas: list[StoreSchema]) -> None:
        from state_reader.inspect.schema_check import ddl

        table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
        for col in ("op", "operator", "store", "key", "value"):
            table.add_column(col, overflow="fold")
        for s in schemas:
            table.add_row(
                str(s.operator_id),
                Text(s.operator_name or "unknown"),
                Text(s.store_name),
                Text(ddl(s.key)),
                Text(ddl(s.value)),
            )
        new_console().print(table)

    def schema_diff(self, verdicts: list[SchemaVerdict]) -> None:
        compatible = all(v.compatible for v in verdicts)
        con = new_console()
        for v in verdicts:
            verdict = Text(
                "compatible" if v.compatible else f"refused ({v.error_class})",
                style="green" if v.compatible else "red bold",
            )
            con.print(Text(f"operator {v.operator_id}, store {v.store_name}: ") + verdict)
            con.print(Text(f"  {v.reason}"))
        con.print(
            Text(
                "Spark would restart from it" if compatible else "Spark would refuse to restart from it",
                style="green bold" if compatible else "red bold",
            )
        )

    def rewrite(self, report: RewriteReport, *, plot_out: str | None) -> None:
        con = new_console()
        for line in rewrite_lines(report):
            con.print(Text(line))
        if plot_out is not None:
            con.print(Text(f"wrote {plot_out}"))

    def error(self, error_class: str, message: str, path: str | None) -> None:
        pass  # the command line's line on stderr says it all


class JsonOutput(Output):
    """One JSON document on stdout per command (``changes --follow``: JSON lines), for programs."""

    def overview(self, info: dict[str, Any]) -> None:
        emit_json(info)

    def show(
        self,
        plan: StateReadPlan,
        table: pa.Table,
        *,
        shown_store: str,
        chosen: list[int],
        key_filter: str | None,
        partitions_given: bool,
        truncated: bool,
        limit: int,
        layout: str,
    ) -> None:
        from state_reader.formats.flatten import json_rows

        where = {
            "operator_id": plan.operator_id,
            "store_name": shown_store,
            "batch_id": plan.batch_id,
            "version": plan.version,
            "partitions": chosen,
        }
        # row_count: every row of the result (None: the limit stopped the read before all were counted)
        emit_json(
            {
                **where,
                "key_filter": key_filter,
                "row_count": None if truncated else table.num_rows,
                "rows_shown": table.num_rows,
                "truncated": truncated,
                "rows": json_rows(table),
            }
        )

    def stats(self, result: StatsResult, summary: pa.Table, *, detail: bool) -> None:
        from state_reader.formats.flatten import json_rows

        skipped = [{"operator_id": op, "store_name": s, "reason": why} for op, s, why in result.skipped]
        emit_json(
            {
                "batches": result.batches,
                "summary": json_rows(summary),
                "partitions": json_rows(result.table),
                "skipped": skipped,
                "notes": result.notes,
            }
        )

    def changes(
        self,
        table: pa.Table,
        counts: list[dict[str, Any]],
        *,
        start: int,
        end: int | None,
        key_filter: str | None,
        limit: int,
        layout: str,
    ) -> None:
        from state_reader.formats.flatten import json_rows

        total = table.num_rows
        shown, truncated = _at_most(table, limit)
        # first_batch_id and last_batch_id, the vocabulary's names; start_batch and end_batch kept one release
        emit_json(
            {
                "first_batch_id": start,
                "start_batch": start,
                "last_batch_id": end,
                "end_batch": end,
                "key_filter": key_filter,
                "counts": counts,
                "row_count": total,
                "rows_shown": shown.num_rows,
                "truncated": truncated,
                "rows": json_rows(shown),
            }
        )

    def follow_start(self, checkpoint: str, key_filter: str | None) -> None:
        pass  # JSON lines stay rows: nothing but rows on stdout

    def follow_batch(self, batch: int, table: pa.Table) -> None:
        from state_reader.formats.flatten import json_rows

        for row in json_rows(table):
            sys.stdout.write(json.dumps(row, ensure_ascii=False, allow_nan=False, default=str) + "\n")
        sys.stdout.flush()

    def skipped(self, first: int, last: int) -> None:
        _warn_skipped(first, last)
        # the earlier names (first_batch, last_batch) beside the vocabulary's for one release
        line = {
            "skipped": {"first_batch_id": first, "first_batch": first, "last_batch_id": last, "last_batch": last},
            "reason": SKIPPED_REASON,
        }
        sys.stdout.write(json.dumps(line) + "\n")
        sys.stdout.flush()

    def export(self, plan: StateReadPlan, result: ExportResult, *, out: str, shown_store: str, size: int) -> None:
        emit_json(
            {
                "path": out,
                "format": result.format,
                "rows": result.rows,
                "partitions": result.partitions,
                "bytes": size,
                "operator_id": plan.operator_id,
                "store_name": shown_store,
                "batch_id": plan.batch_id,
            }
        )

    def verify(self, report: VerifyReport) -> None:
        emit_json(report.as_dict())

    def plot(self, out: str, *, width: int, height: int, stores: int, batches: list[int]) -> None:
        emit_json({"path": out, "width": width, "height": height, "stores": stores, "batches": batches})

    def doctor(self, result: Diagnosis) -> None:
        emit_json(result.as_dict())

    def why(self, result: Explanation) -> None:
        emit_json(result.as_dict())

    def verdicts(self, summary: VerdictSummary) -> None:
        emit_json(summary.as_dict())

    def schema(self, schemas: list[StoreSchema]) -> None:
        emit_json({"stores": [s.as_dict() for s in schemas]})

    def schema_diff(self, verdicts: list[SchemaVerdict]) -> None:
        compatible = all(v.compatible for v in verdicts)
        emit_json({"compatible": compatible, "stores": [v.as_dict() for v in verdicts]})

    def rewrite(self, report: RewriteReport, *, plot_out: str | None) -> None:
        emit_json({**report.summary(), "plot": plot_out})

    def error(self, error_class: str, message: str, path: str | None) -> None:
        emit_json({"error": {"class": error_class, "message": message, "path": path}})


# JSON fields renamed to the vocabulary's names (docs/vocabulary.md), each printed beside its earlier names for
# one release: text, which names each once, leaves the new one out where an earlier one is there
RENAMED_FIELDS: dict[str, tuple[str, ...]] = {
    "first_batch_id": ("start_batch", "first", "first_batch"),
    "last_batch_id": ("end_batch", "last", "last_batch"),
    "latest_batch_id": ("latest_committed", "latest_batch", "last_committed_batch"),
}


def _beside_earlier(name: str, fields: dict[str, Any]) -> bool:
    """``name`` is a new field printed beside one of its earlier names in ``fields``."""
    return any(earlier in fields for earlier in RENAMED_FIELDS.get(name, ()))


SKIPPED_REASON = "the query cleaned them up before they were read"


def _warn_skipped(first: int, last: int) -> None:
    """The batches ``--skip-lost`` skipped, named on stderr (text and JSON alike)."""
    from state_reader.core.follow import batch_span

    click.echo(f"warning: skipped {batch_span(first, last)}: {SKIPPED_REASON} (--skip-lost)", err=True)


def render_why(result: Explanation, *, as_json: bool) -> None:
    """``why``'s output of ``result``, for callers outside a command (:meth:`Output.why`)."""
    output(as_json).why(result)
