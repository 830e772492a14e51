"""Environment variables set for a block of a test, and put back as they were after it."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator


@contextlib.contextmanager
def environment(changes: dict[str, str]) -> Iterator[None]:
    """``os.environ`` with ``changes`` set inside the block; each variable back to its value before it, or
    unset again if it was unset, however the block ends."""
    saved = {key: os.environ.get(key) for key in changes}
    os.environ.update(changes)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
