"""Reading a runs file: the rows of published training runs, each with typed access to its
fields; every malformed field is reported with its line."""

from __future__ import annotations

import math
from typing import Any

from ..errors import DlfError, UsageError, display_path, raise_all
from ..yamlfile import Located, read_user_yaml


def load_runs(path: str, errors: list[DlfError] | None = None) -> list[Located]:
    """The well-formed rows of a runs file, each a `Located` mapping with an `id`.

    A file that is not a YAML list of runs raises UsageError naming file:line. Malformed runs
    (no id, a duplicate id, a section that is not a mapping) are left out and reported in
    `errors` when given (the caller raises them with its own), else raised here.
    """
    dpath = display_path(path)
    root = read_user_yaml(path, "runs file", "give the path to a YAML list of runs")
    rows = root.value
    if isinstance(rows, dict) and "runs" in rows:  # {runs: [...]} is accepted too
        rows = rows["runs"].value
    if not isinstance(rows, list) or not rows:
        raise UsageError("a runs file is a YAML list of runs (- id: ..., model: ..., "
                         "hardware: ..., parallel: ..., target: ...)", dpath, root.line)
    own = errors is None
    errors = [] if errors is None else errors
    good: list[Located] = []
    seen: dict[str, int] = {}
    for row in rows:
        if not isinstance(row.value, dict):
            errors.append(UsageError("each run must be a mapping with an 'id'", dpath, row.line))
            continue
        rid = row.value.get("id")
        if rid is None or not isinstance(rid.value, (str, int)) or rid.value == "":
            errors.append(UsageError("run has no 'id'; give each run a unique id", dpath,
                                     row.line))
            continue
        if str(rid.value) in seen:
            errors.append(UsageError(f"duplicate run id '{rid.value}' (first on line "
                                     f"{seen[str(rid.value)]}); make ids unique", dpath,
                                     rid.line))
            continue
        seen[str(rid.value)] = rid.line
        bad = False
        for section in ("model", "hardware", "parallel", "batch", "target", "moe", "mla",
                        "training"):
            body = row.value.get(section)
            if body is not None and body.value is not None and not isinstance(body.value, dict):
                errors.append(UsageError(f"run '{rid.value}': '{section}' must be a mapping",
                                         dpath, body.line))
                bad = True
        if not bad:
            good.append(row)
    if own:
        raise_all(errors)
    return good


class Row:
    """Typed access to one row's fields; type errors are collected with their line."""

    def __init__(self, row: Located, path: str, errors: list[DlfError]) -> None:
        self.row = row
        self.path = path
        self.errors = errors
        self.id = str(row.value["id"].value)

    def get(self, dotted: str) -> Located | None:
        node: Any = self.row
        for part in dotted.split("."):
            if not isinstance(node.value, dict) or part not in node.value:
                return None
            node = node.value[part]
        return None if node.value is None else node

    def section(self, name: str) -> dict[str, Located]:
        item = self.get(name)
        return item.value if item is not None and isinstance(item.value, dict) else {}

    def _bad(self, key: str, item: Located, want: str) -> None:
        self.errors.append(UsageError(f"run '{self.id}': {key} = {item.value!r} is not {want}",
                                      self.path, item.line))

    def number(self, key: str, integer: bool = False, minimum: float = 0) -> float | int | None:
        item = self.get(key)
        if item is None:
            return None
        v = item.value
        if isinstance(v, bool) or not isinstance(v, (int, float)) or math.isnan(v):
            self._bad(key, item, "an integer" if integer else "a number")
            return None
        if integer and v != int(v):
            self._bad(key, item, "an integer")
            return None
        if v < minimum:
            self._bad(key, item, f"a number >= {minimum}")
            return None
        return int(v) if integer else v

    def integer(self, key: str, minimum: int = 0) -> int | None:
        v = self.number(key, True, minimum)
        return None if v is None else int(v)

    def flag(self, key: str) -> bool | None:
        item = self.get(key)
        if item is None:
            return None
        v = item.value
        if isinstance(v, bool):
            return v
        if isinstance(v, str) and v.lower() in ("true", "false", "yes", "no"):
            return v.lower() in ("true", "yes")
        self._bad(key, item, "true or false")
        return None

    def text(self, key: str) -> str | None:
        item = self.get(key)
        return None if item is None else str(item.value)

