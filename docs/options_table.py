"""mkdocs hook: writes the option reference into options.md from ``state_reader.core.options.OPTIONS``.

The table in the code is the one the option parsers take their names from, so the
page cannot list an option the readers do not know, or miss one they do.
"""

from __future__ import annotations

from typing import Any

from mkdocs.exceptions import PluginError

from state_reader.core.options import OPTIONS, ReaderOption

MARKER = "<!-- options table -->"
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


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Replace the marker in the options page with the table; a page without the marker fails the build."""
    if page.file.src_uri != PAGE:
        return markdown
    if MARKER not in markdown:
        raise PluginError(f"{PAGE} has lost its '{MARKER}' line: the option reference would not be generated")
    return markdown.replace(MARKER, options_table())
