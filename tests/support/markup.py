"""What a browser shows of the notebook's HTML, for tests that look at its words rather than its tags."""

from __future__ import annotations

import html
import re


def shown_text(markup: str) -> str:
    """What a browser shows of ``markup``: tags and the style block dropped, entities decoded."""
    markup = re.sub(r"<style>.*?</style>", "", markup, flags=re.S)
    return html.unescape(re.sub(r"<[^>]+>", " ", markup))
