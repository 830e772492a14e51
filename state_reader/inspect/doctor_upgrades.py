"""``doctor``'s suggestions to rewrite a checkpoint into a better format than Spark froze into it, each with the
``state-reader rewrite --conf`` command that does it, only where a migration exists (the frozen conf's
``migration``) and where it pays."""

from __future__ import annotations

import shlex
from typing import Any

from state_reader.inspect.doctor_findings import Finding
from state_reader.model.conf import CONF_ENCODING

ENCODING_AVRO = "encoding-avro"


def rewrite_command(checkpoint: str, suffix: str, conf: str, value: str) -> str:
    """The command that rewrites ``checkpoint`` into a new checkpoint beside it with ``conf`` set to ``value``."""
    source = checkpoint.rstrip("/")
    return f"state-reader rewrite {shlex.quote(source)} {shlex.quote(source + suffix)} --conf {conf}={value}"


def encoding_avro(frozen_confs: list[dict[str, Any]], checkpoint: str) -> list[Finding]:
    """A transformWithState query on UnsafeRow: its state schemas cannot evolve (Spark evolves them under Avro
    only). ``frozen_confs`` lists the encoding only for a query with transformWithState."""
    row = next((c for c in frozen_confs if c["conf"] == CONF_ENCODING), None)
    if row is None or row["value"] != "unsaferow" or not row.get("migration"):
        return []
    command = rewrite_command(checkpoint, "-avro", CONF_ENCODING, "avro")
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


__all__ = ["ENCODING_AVRO", "encoding_avro", "rewrite_command"]
