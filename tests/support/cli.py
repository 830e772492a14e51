"""The ``state-reader`` console script run as a subprocess, as a user runs it."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest


def console_script() -> list[str]:
    exe = Path(sys.executable).parent / "state-reader"
    if not exe.exists():
        pytest.fail(f"the console script is not installed next to {sys.executable}: pip install -e '.[spark,test]'")
    return [str(exe)]


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    environ = {**os.environ, "STATE_READER_PROGRESS": "", **(env or {})}
    return subprocess.run(
        [*console_script(), *map(str, args)], capture_output=True, text=True, timeout=300, env=environ
    )


def run_json(*args: str) -> dict:
    proc = run(*args, "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def assert_one_line_error(proc: subprocess.CompletedProcess, *fragments: str) -> None:
    assert proc.returncode == 1, (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: ")
    assert "Traceback" not in proc.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def png_size(path: Path) -> tuple[int, int]:
    """(width, height) of the PNG image a command wrote to ``path``."""
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", head
    assert head[12:16] == b"IHDR"
    return struct.unpack(">II", head[16:24])
