"""The runs files shipped with dlformula (the `dlformula.runs` package data): found by name.

Every `*.yaml` in runs/ is a set named by its file name without `.yaml` (`public`,
`dense-2025`); its description is its first comment line. Adding a set is dropping a file
there.
"""

from __future__ import annotations

import os
from importlib import resources
from typing import Any, NamedTuple

from ..errors import UsageError, did_you_mean


class RunsSet(NamedTuple):
    name: str
    path: str
    description: str
    runs: int
    sources: int


def shipped_paths() -> dict[str, str]:
    """Set name -> path of every shipped runs file, sorted by name."""
    folder = resources.files("dlformula.runs")
    files = sorted((e for e in folder.iterdir() if e.name.endswith(".yaml")),
                   key=lambda e: e.name)
    return {e.name[:-len(".yaml")]: str(e) for e in files}


def resolve(name_or_path: str) -> str:
    """A runs file path: an existing file as given, else the shipped set of that name."""
    if os.path.exists(name_or_path):
        return name_or_path
    shipped = shipped_paths()
    name = name_or_path[:-len(".yaml")] if name_or_path.endswith(".yaml") else name_or_path
    if name in shipped and os.sep not in name_or_path and "/" not in name_or_path:
        return shipped[name]
    raise UsageError(f"runs file '{name_or_path}' does not exist and is not a shipped set"
                     f"{did_you_mean(name, shipped)}; give a path, or one of "
                     f"{', '.join(shipped)} (dlformula validate --list)")


def resolve_all(names_or_paths: list[str]) -> list[str]:
    """The runs files the names or paths give (`resolve`), or every shipped one if none is given."""
    return [resolve(a) for a in names_or_paths] or list(shipped_paths().values())


def describe(path: str) -> RunsSet:
    """A shipped set's name, description (its first comment line), runs and sources."""
    from ..errors import UsageError
    from ..yamlfile import LARGE_FILE_LIMIT, read_file_text, read_user_yaml

    text = read_file_text(path, "runs file", UsageError, LARGE_FILE_LIMIT)
    description = next((line.lstrip("#").strip() for line in text.splitlines()
                        if line.startswith("#") and line.lstrip("#").strip()), "")
    root = read_user_yaml(path, "runs file", "")
    rows: list[Any] = root.value if isinstance(root.value, list) else []
    sources = {_source_of(r) for r in rows if isinstance(r.value, dict)}
    name = os.path.basename(path)[:-len(".yaml")]
    return RunsSet(name, path, description, len(rows), len(sources - {""}))


def _source_of(row: Any) -> str:
    """A run's source up to its first comma or parenthesis: the publication, not the table."""
    item = row.value.get("source")
    text = "" if item is None else str(item.value)
    for stop in (",", "(", ";"):
        text = text.split(stop, 1)[0]
    return text.strip().lower()


def list_table() -> str:
    """`dlformula validate --list`: every shipped set with its runs, sources and description."""
    sets = [describe(p) for p in shipped_paths().values()]
    width = max([len(s.name) for s in sets] + [4])
    lines = [f"{'set':{width}}  {'runs':>4}  {'sources':>7}  description"]
    lines += [f"{s.name:{width}}  {s.runs:>4}  {s.sources:>7}  {s.description}" for s in sets]
    lines.append("")
    lines.append("`dlformula validate NAME` predicts a set; `--show ID` prints one run's config.")
    return "\n".join(lines) + "\n"
