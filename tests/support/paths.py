"""Where things are in the repository, for tests that read its files."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
GOLDEN = TESTS / "golden"
PACKAGE = ROOT / "state_reader"
EXAMPLES = ROOT / "examples"
DOCS = ROOT / "docs"
