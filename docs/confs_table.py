"""The table of frozen confs in rewrite.md, generated from ``state_reader.model.conf.FROZEN_CONFS``.

The code's table is the one a rewrite checks every ``--conf`` against, so the page cannot promise a change the
rewrite refuses, or miss a conf it knows. ``python docs/confs_table.py`` writes the table into the page between
its two marker lines after ``FROZEN_CONFS`` changes; a test, and the site's build (this file is its mkdocs
hook), refuse a page whose table is stale.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))  # the sibling module, as mkdocs loads hooks by path
from generated_table import GeneratedTable  # noqa: E402

from state_reader.model.conf import CONF_SHUFFLE_PARTITIONS, FROZEN_CONFS, FrozenConf, provider_name

BEGIN = "<!-- frozen confs table: generated from FROZEN_CONFS by `python docs/confs_table.py`; do not edit -->"
END = "<!-- end of frozen confs table -->"
PAGE = "rewrite.md"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _values(conf: FrozenConf) -> str:
    if not conf.values:
        return "a count, at least 1" if conf.key == CONF_SHUFFLE_PARTITIONS else "a whole number, at least 0"
    shown = [f"`{provider_name(v) or v}` ({since})" for v, since in conf.values.items()]
    return ", ".join(shown)


def _row(conf: FrozenConf) -> str:
    where = conf.recorded_in + (f"; unrecorded: `{conf.absent}`" if conf.absent is not None else "")
    if conf.supported:
        rewrite = f"**changed** ({conf.migration})"
    else:
        rewrite = f"refused: {conf.refusal}"
    needs = "".join(f"; `{v}` needs {p}" for v, p in (conf.needs_provider or {}).items())
    operators = f" (operators: {', '.join(conf.operators)})" if conf.operators else ""
    return (
        f"| `{conf.key}` | {_cell(where)} | {_cell(conf.freezes)}{_cell(operators)} | "
        f"{_cell(_values(conf) + needs)} | {_cell(rewrite)} |"
    )


def confs_table() -> str:
    """The frozen confs as a Markdown table, one row per conf, in the order of the code's table."""
    head = [
        "| conf | recorded in | what it freezes | values (Spark versions) | a rewrite |",
        "|---|---|---|---|---|",
    ]
    return "\n".join(head + [_row(c) for c in FROZEN_CONFS]) + "\n"


TABLE = GeneratedTable(PAGE, BEGIN, END, "frozen confs table", "python docs/confs_table.py", confs_table)
PATH = TABLE.path


def with_table(page: str) -> str:
    """``page`` with the table between its markers written afresh; ValueError when a marker is missing."""
    return TABLE.with_table(page)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """The site's build: refuse a page whose table is not the one the code's table gives."""
    return TABLE.on_page_markdown(markdown, page, config, files)


if __name__ == "__main__":
    sys.exit(TABLE.write())
