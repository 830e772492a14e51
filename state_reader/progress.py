"""Progress bars for reads that take more than a moment.

A bar is drawn with ``rich`` on stderr only when both stdout and stderr are
terminals (never in pipes, files, CI logs or notebooks), only once the work has
taken longer than :data:`DELAY_SECONDS`, and it disappears when done. Without
``rich`` installed, or with ``STATE_READER_PROGRESS=0``, it is a no-op.
``STATE_READER_PROGRESS=1`` forces it on (for terminals that do not say so).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from types import TracebackType
from typing import Any

# Reads faster than this never show a bar.
DELAY_SECONDS = 0.5
ENV_SWITCH = "STATE_READER_PROGRESS"
ENV_DELAY = "STATE_READER_PROGRESS_DELAY"


def progress_wanted() -> bool:
    """True when a progress bar would be seen: in a notebook, or when stdout and stderr are terminals."""
    forced = os.environ.get(ENV_SWITCH, "").strip().lower()
    if forced in ("0", "false", "no", "off"):
        return False
    if forced in ("1", "true", "yes", "on"):
        return True
    if "ipykernel" in sys.modules:  # a notebook: rich draws its bars in the cell's output
        return True
    try:
        return sys.stdout.isatty() and sys.stderr.isatty()
    except (AttributeError, ValueError):  # replaced or closed streams
        return False


class Progress:
    """A bar over ``total`` steps; use as a context manager and call :meth:`advance`.

    ``enabled=None`` decides with :func:`progress_wanted`. The bar starts on a
    timer thread after the delay, so even one long step shows it.
    """

    def __init__(
        self, description: str, total: int | None, *, enabled: bool | None = None, delay: float | None = None
    ) -> None:
        self.description = description
        self.total = total
        self.completed = 0
        self._enabled = progress_wanted() if enabled is None else enabled
        if delay is None:
            try:
                delay = float(os.environ.get(ENV_DELAY, DELAY_SECONDS))
            except ValueError:
                delay = DELAY_SECONDS
        self._delay = delay
        self._lock = threading.Lock()
        self._bar: Any = None
        self._task: Any = None
        self._timer: threading.Timer | None = None
        self._started = time.monotonic()

    def __enter__(self) -> Progress:
        if self._enabled:
            try:
                import rich.progress  # noqa: F401  (optional dependency)
            except ImportError:
                self._enabled = False
                return self
            self._timer = threading.Timer(self._delay, self._show)
            self._timer.daemon = True
            self._timer.start()
        return self

    def _show(self) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )
        from rich.progress import Progress as RichProgress

        with self._lock:
            if self._bar is not None or not self._enabled:
                return
            bar = RichProgress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TimeRemainingColumn(),
                console=Console(stderr=True),
                transient=True,
            )
            self._task = bar.add_task(self.description, total=self.total, completed=self.completed)
            bar.start()
            self._bar = bar

    def advance(self, steps: int = 1, description: str | None = None) -> None:
        """Count ``steps`` more steps done; optionally change the label."""
        with self._lock:
            self.completed += steps
            if description is not None:
                self.description = description
            if self._bar is not None:
                self._bar.update(self._task, completed=self.completed, description=self.description)

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        with self._lock:
            self._enabled = False  # a timer that fires now must not start a bar
            if self._timer is not None:
                self._timer.cancel()
            if self._bar is not None:
                self._bar.stop()
                self._bar = None


def progress(description: str, total: int | None = None, *, enabled: bool | None = None) -> Progress:
    """A :class:`Progress` bar (see the module docstring for when it is drawn)."""
    return Progress(description, total, enabled=enabled)
