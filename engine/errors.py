"""One error family for everything a user can get wrong.

Every error carries the file and line it is about, a message saying what is wrong and, where we
know it, what to do. The CLI turns these into one line each and an exit code in exactly one place
(`cli.main`); nothing else prints them.
"""

from __future__ import annotations

import os
from collections.abc import Iterable


def display_path(p: object) -> str:
    """A path as a user would type it: relative to the working directory when inside it."""
    s = str(p)
    if not os.path.isabs(s):
        return s
    try:
        rel = os.path.relpath(s)
    except ValueError:
        return s
    return s if rel.startswith("..") else rel


class DlfError(Exception):
    """Base error: `path:line: message`.

    `exit_code` follows the Unix convention the CLI promises: 2 for usage errors (a bad argument,
    config or option: fix your input), 1 for model errors (the formula set or hardware data is
    wrong, or the model cannot be evaluated).
    """

    exit_code = 1

    def __init__(self, message: str, path: str | None = None, line: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.path = path
        self.line = line

    def __str__(self) -> str:
        path = display_path(self.path) if self.path else None
        if path and self.line:
            return f"{path}:{self.line}: {self.message}"
        if path:
            return f"{path}: {self.message}"
        return self.message

    def lines(self) -> list[str]:
        return [str(self)]


class ModelError(DlfError):
    """The formula set, hardware data, presets or a plugin is wrong, or evaluation failed."""

    exit_code = 1


class UsageError(DlfError):
    """The user's input (command line, config file, --set value) is wrong."""

    exit_code = 2


class ErrorGroup(DlfError):
    """Several errors found in one pass, reported together (one line each)."""

    def __init__(self, errors: Iterable[DlfError]) -> None:
        self.errors = _flatten(errors)
        if not self.errors:
            raise ValueError("ErrorGroup needs at least one error")
        super().__init__("\n".join(str(e) for e in self.errors))
        # A usage error anywhere in the group makes the whole group a usage error.
        self.exit_code = max(e.exit_code for e in self.errors)

    def __str__(self) -> str:
        return "\n".join(str(e) for e in self.errors)

    def lines(self) -> list[str]:
        return [str(e) for e in self.errors]


def _flatten(errors: Iterable[DlfError]) -> list[DlfError]:
    out: list[DlfError] = []
    for e in errors:
        if isinstance(e, ErrorGroup):
            out.extend(e.errors)
        else:
            out.append(e)
    return out


def raise_all(errors: list[DlfError]) -> None:
    """Raise the collected errors: the error itself if only one, a group if several."""
    if len(errors) == 1:
        raise errors[0]
    if errors:
        raise ErrorGroup(errors)


def did_you_mean(name: str, candidates: Iterable[str]) -> str:
    """` (did you mean 'x'?)` for the closest candidate, or an empty string."""
    import difflib

    match = difflib.get_close_matches(name, list(candidates), n=1, cutoff=0.6)
    return f" (did you mean '{match[0]}'?)" if match else ""
