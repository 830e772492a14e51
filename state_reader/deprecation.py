"""Old names that keep working for one release, with a warning that names the new one.

The names a user types are written down once, in ``docs/vocabulary.md``; a name
that changes keeps working, through :func:`renamed_keywords` (Python) or the
command line's hidden flags (``fronts/cli_flags.deprecated_flag``), for one release
after the one that deprecates it (``CHANGELOG.md`` says when each goes).
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import Any, TypeVar

# the warning and its words live with the errors, whose own earlier names warn too
from state_reader.errors import ConflictingOptionsError
from state_reader.errors import DeprecatedNameWarning as DeprecatedNameWarning
from state_reader.errors import renamed_message as renamed_message

F = TypeVar("F", bound=Callable[..., Any])


def warn_renamed(old: str, new: str, *, stacklevel: int = 3) -> None:
    """Say that ``old`` is deprecated in favour of ``new`` (a :class:`DeprecatedNameWarning`)."""
    warnings.warn(renamed_message(old, new), DeprecatedNameWarning, stacklevel=stacklevel)


def renamed_keywords(function: str, **renames: str) -> Callable[[F], F]:
    """Accept each old keyword argument (``start="change_start_batch_id"``) as its new name, with a warning.

    Giving both the old and the new name is an error. The wrapped function's signature
    (``inspect.signature``, ``help()``) shows only the new names.
    """

    def decorate(func: F) -> F:
        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            for old, new in renames.items():
                if old not in kwargs:
                    continue
                if new in kwargs:
                    raise ConflictingOptionsError(f"{function}(): give {new}, not both {old} and {new}")
                warn_renamed(f"{function}({old}=...)", f"{new}=", stacklevel=3)
                kwargs[new] = kwargs.pop(old)
            return func(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorate
