"""A Markdown table the code generates, kept between two marker lines of a documentation page.

The page holds the table itself, so it reads the same in the repository as on the site. Each generator
(``options_table.py``, ``confs_table.py``) builds its table from the code's own and gets from here: the page
with the table written afresh, the mkdocs hook that refuses a page whose table is stale, and the script that
writes it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class GeneratedTable:
    """The table ``build`` gives, in ``docs/<page>`` between the lines ``begin`` and ``end``; ``what`` names it
    in messages and ``script`` is the command that writes it."""

    page: str
    begin: str
    end: str
    what: str
    script: str
    build: Callable[[], str]

    @property
    def path(self) -> Path:
        return Path(__file__).with_name(self.page)

    def with_table(self, page: str) -> str:
        """``page`` with the table between its markers written afresh; ValueError when a marker is missing."""
        if self.begin not in page or self.end not in page:
            raise ValueError(
                f"{self.page} must hold the lines {self.begin!r} and {self.end!r}, where the {self.what} goes"
            )
        head, rest = page.split(self.begin, 1)
        _, tail = rest.split(self.end, 1)
        return f"{head}{self.begin}\n\n{self.build()}\n{self.end}{tail}"

    def on_page_markdown(self, markdown: str, page: Any, config: Any, files: Any) -> str:
        """The site's build: refuse the page when its table is not the one the code gives."""
        from mkdocs.exceptions import PluginError

        if page.file.src_uri != self.page:
            return markdown
        try:
            fresh = self.with_table(markdown)
        except ValueError as exc:
            raise PluginError(str(exc)) from None
        if fresh != markdown:
            raise PluginError(f"the {self.what} in docs/{self.page} is stale: run {self.script}")
        return markdown

    def write(self) -> int:
        """Write the table into its page (when it changed); the exit code."""
        text = self.path.read_text(encoding="utf-8")
        fresh = self.with_table(text)
        if fresh != text:
            self.path.write_text(fresh, encoding="utf-8")
            print(f"wrote the {self.what} into {self.path}")
        return 0
