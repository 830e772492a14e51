"""``doctor``'s suggestions to rewrite a checkpoint into a better format than Spark froze into it, each with the
``state-reader rewrite --conf`` command that does it, only where a migration exists (the frozen conf's
``migration``) and where it pays."""

from __future__ import annotations

import shlex
from typing import Any

from state_reader.inspect.doctor_findings import Finding
from state_reader.model.conf import CONF_ENCODING, CONF_JOIN_FORMAT, DEFAULT_ENCODING, ENCODINGS

ENCODING_AVRO = "encoding-avro"
JOIN_FORMAT_UPGRADE = "join-format-upgrade"


def rewrite_command(checkpoint: str, suffix: str, conf: str, value: str) -> str:
    """The command that rewrites ``checkpoint`` into a new checkpoint beside it with ``conf`` set to ``value``."""
    source = checkpoint.rstrip("/")
    return f"state-reader rewrite {shlex.quote(source)} {shlex.quote(source + suffix)} --conf {conf}={value}"


def encoding_avro(frozen_confs: list[dict[str, Any]], checkpoint: str) -> list[Finding]:
    """A transformWithState query on UnsafeRow: its state schemas cannot evolve (Spark evolves them under Avro
    only). ``frozen_confs`` lists the encoding only for a query with transformWithState."""
    row = next((c for c in frozen_confs if c["conf"] == CONF_ENCODING), None)
    if row is None or row["value"] != DEFAULT_ENCODING or not row.get("migration"):
        return []
    avro = ENCODINGS[1]
    command = rewrite_command(checkpoint, f"-{avro}", CONF_ENCODING, avro)
    return [
        Finding(
            ENCODING_AVRO,
            "info",
            None,
            None,
            "transformWithState keeps its state as UnsafeRows, so its state variables' schemas cannot evolve: "
            "Spark evolves them (adds, removes, widens fields) only in the Avro encoding",
            {"conf": CONF_ENCODING, "value": row["value"], "recorded": row["recorded"], "command": command},
            f"to evolve the state schema later, move the state to Avro: stop the query, run `{command}` and "
            "restart the query from the new checkpoint (any Spark 4.0+; the rewrite keeps every variable, TTL "
            "and timer)",
        )
    ]


def join_format_upgrade(
    frozen_confs: list[dict[str, Any]],
    checkpoint: str,
    join_rows: dict[int, int],
    threshold: int,
    provider: str | None,
) -> list[Finding]:
    """A stream-stream join on state format 2 or 3 that buffers at least ``threshold`` rows (``join_rows``: per
    join operator): every batch that evicts scans all of them, where format 4's event-time index reads only the
    rows it removes."""
    join = next((c for c in frozen_confs if c["conf"] == CONF_JOIN_FORMAT), None)
    if join is None or not join.get("migration") or str(join.get("value")) not in ("2", "3"):
        return []
    command = rewrite_command(checkpoint, "-join4", CONF_JOIN_FORMAT, "4")
    if provider != "rocksdb":  # formats 3 and 4 are column families of one RocksDB store
        command += " --provider rocksdb"
    return [
        Finding(
            JOIN_FORMAT_UPGRADE,
            "info",
            op,
            None,
            f"operator {op}: a stream-stream join on state format {join['value']} buffers {rows} rows, and "
            "every batch that evicts scans all of them; format 4 indexes them by event time",
            {"rows": rows, "join_format": join["value"], "threshold": threshold, "command": command},
            f"rewrite it into join state format 4 (Spark 4.2+; 4.3 runs it without an internal flag): {command}",
        )
        for op, rows in sorted(join_rows.items())
        if rows >= threshold
    ]


__all__ = ["ENCODING_AVRO", "JOIN_FORMAT_UPGRADE", "encoding_avro", "join_format_upgrade", "rewrite_command"]
