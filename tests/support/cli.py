"""The ``state-reader`` command line, run as a user runs it.

:func:`run` calls the console script's own entry point (``state_reader.fronts.cli.main``) in this
process, with its own stdout, stderr, environment and Python's default warning filters, as a fresh
process has them: the same exit code and output as the console script, without a Python start and
the imports of pyarrow and numpy for each of the suite's hundreds of commands. :func:`run_process`
runs the installed console script itself; ``tests/fronts/test_cli.py`` holds the two to the same
result, and keeps the tests that need a process of their own (what a command imports, a terminal).
``STATE_READER_TEST_CLI=process`` runs every command in a process of its own.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import struct
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.environment import environment


def console_script() -> list[str]:
    exe = Path(sys.executable).parent / "state-reader"
    if not exe.exists():
        pytest.fail(f"the console script is not installed next to {sys.executable}: pip install -e '.[spark,test]'")
    return [str(exe)]


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``state-reader ARGS``: its exit code, stdout and stderr."""
    if os.environ.get("STATE_READER_TEST_CLI") == "process":
        return run_process(*args, env=env)
    from state_reader.fronts.cli import main

    argv = list(map(str, args))
    out, err = _stream(), _stream()
    with environment({"STATE_READER_PROGRESS": "", **(env or {})}), _fresh_warnings():
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(argv)
            except SystemExit as exc:  # what a process would exit with
                code = exc.code if isinstance(exc.code, int) else 1
            out.flush()
            err.flush()
    return subprocess.CompletedProcess(["state-reader", *argv], code, _text(out), _text(err))


def run_process(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``state-reader ARGS`` run by the installed console script, in a process of its own."""
    environ = {**os.environ, "STATE_READER_PROGRESS": "", **(env or {})}
    return subprocess.run(
        [*console_script(), *map(str, args)], capture_output=True, text=True, timeout=300, env=environ
    )


def _stream() -> io.TextIOWrapper:
    """A text stream over bytes, as a pipe's (``sys.stdout.buffer`` exists, it is no terminal)."""
    return io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="backslashreplace", write_through=True)


def _text(stream: io.TextIOWrapper) -> str:
    raw = stream.buffer.getvalue()  # type: ignore[attr-defined]
    return raw.decode("utf-8", errors="replace").replace("\r\n", "\n")


@contextlib.contextmanager
def _fresh_warnings() -> Iterator[None]:
    """Python's default filters (the suite turns warnings into errors): each warning printed on stderr,
    deprecations of libraries hidden, as in a process of its own."""
    with warnings.catch_warnings():
        warnings.resetwarnings()
        warnings.simplefilter("default")
        for category in (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning):
            warnings.filterwarnings("ignore", category=category)
        yield


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
