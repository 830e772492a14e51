"""What ``state-reader rewrite`` prints, kept where callers found it: the report's lines
(:func:`~state_reader.fronts.console_parts.rewrite_lines`, :func:`~state_reader.fronts.console_parts.edit_lines`) live
with the other reports' text in :mod:`state_reader.fronts.console_parts`, and
:meth:`~state_reader.fronts.console.Output.rewrite` prints them (or, ``--json``, the report's summary), chosen
with every other command's output. The command is in :mod:`state_reader.fronts.cli_rewrite`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from state_reader.fronts.console import output
from state_reader.fronts.console_parts import edit_lines, rewrite_lines

if TYPE_CHECKING:
    from state_reader.core.rewrite import RewriteReport

__all__ = ["edit_lines", "render_rewrite", "rewrite_lines"]


def render_rewrite(report: RewriteReport, *, plot_out: str | None, as_json: bool) -> None:
    """``rewrite``'s output of ``report``, for callers outside a command (:meth:`Output.rewrite`)."""
    output(as_json).rewrite(report, plot_out=plot_out)
