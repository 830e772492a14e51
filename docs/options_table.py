"""The option reference in options.md, generated from ``state_reader.core.options.OPTIONS``.

The table in the code is the one the option parsers take their names from, so the
page cannot list an option the readers do not know, or miss one they do. The table
is written into the page itself, between two marker lines, so that it reads the same
in the repository as on the site: ``python docs/options_table.py`` writes it after
``OPTIONS`` changes; a test, and the site's build (this file is its mkdocs hook),
refuse a page whose table is stale.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))  # the sibling module, as mkdocs loads hooks by path
from generated_table import GeneratedTable  # noqa: E402

from state_reader.core.options import OPTIONS, ReaderOption

BEGIN = "<!-- options table: generated from OPTIONS by `python docs/options_table.py`; do not edit -->"
END = "<!-- end of options table -->"
PAGE = "options.md"


def _cell(text: str) -> str:
    # a pipe inside a cell would end it
    return text.replace("|", "\\|")


def _row(option: ReaderOption) -> str:
    python = f"`{option.python}`" if option.python else "— (data source only)"
    readers = ", ".join(f"`{r}`" for r in option.readers)
    meaning = option.description if option.spark_builtin else f"ours: {option.description}"
    return f"| `{option.name}` | {python} | {_cell(option.default)} | {readers} | {_cell(meaning)} |"


def options_table() -> str:
    """The option reference as a Markdown table, one row per option, in the order of the code's table."""
    head = ["| data source | Spark-free | default | reader | meaning |", "|---|---|---|---|---|"]
    return "\n".join(head + [_row(o) for o in OPTIONS]) + "\n"


TABLE = GeneratedTable(PAGE, BEGIN, END, "option table", "python docs/options_table.py", options_table)
PATH = TABLE.path


def with_table(page: str) -> str:
    """``page`` with the table between its markers written afresh; ValueError when a marker is missing."""
    return TABLE.with_table(page)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """The site's build: refuse a page whose table is not the one the code's table gives."""
    return TABLE.on_page_markdown(markdown, page, config, files)


if __name__ == "__main__":
    sys.exit(TABLE.write())
