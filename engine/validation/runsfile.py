"""Reading a runs file: the rows of published training runs, each with its fields under one
spelling.

A runs file is a YAML list of runs (or `{runs: [...]}`). Sources write the same field many ways
(`topk`, `top_k`, `num_experts_per_tok`; a nested `model.moe` block or a top-level `moe`
one), so each row's fields are read into canonical keys by the synonyms in conventions.yaml
(`moe.top_k`), remembering how each was written for messages. Malformed input is reported as
one UsageError per problem with its line; the rows around a bad one are kept.
"""

from __future__ import annotations

import math
import re
from typing import Any

from ..errors import DlfError, UsageError, display_path
from ..yamlfile import Located, read_user_yaml
from .conventions import Conventions, conventions, spelling

SECTIONS = ("model", "hardware", "parallel", "batch", "target", "moe", "mla", "training")
# A number written as text: "1,024", "32 (derived)", "2.5e3 s".
_NUMBER_TEXT = re.compile(r"^\s*([-+]?(?:\d[\d,_]*)(?:\.\d+)?(?:[eE][-+]?\d+)?)"
                          r"(\s*(?:\(.*\)|\s.*))?$")


def load_runs(path: str, errors: list[DlfError]) -> list[Located]:
    """The well-formed rows of a runs file, each a `Located` mapping with an `id`.

    A file that is not a YAML list of runs raises UsageError naming file:line. A malformed run
    (not a mapping, no id, a duplicate id, a block that is not a mapping) is left out and
    reported in `errors`; the other runs are returned.
    """
    dpath = display_path(path)
    root = read_user_yaml(path, "runs file", "give the path to a YAML list of runs, or the "
                          "name of a shipped set (dlformula validate --list)")
    rows = root.value
    if isinstance(rows, dict) and "runs" in rows:  # {runs: [...]} is accepted too
        rows = rows["runs"].value
    if not isinstance(rows, list) or not rows:
        raise UsageError("a runs file is a YAML list of runs (- id: ..., model: ..., "
                         "hardware: ..., parallel: ..., target: ...); start each run with "
                         "'- id:'", dpath, root.line)
    conv = conventions()
    good: list[Located] = []
    seen: dict[str, int] = {}
    for row in rows:
        if not isinstance(row.value, dict):
            errors.append(UsageError("each run must be a mapping with an 'id' (- id: ...)",
                                     dpath, row.line))
            continue
        rid = row.value.get("id")
        if rid is None or rid.value is None or rid.value == "":
            errors.append(UsageError("run has no 'id'; give each run a unique id", dpath,
                                     row.line))
            continue
        if isinstance(rid.value, bool) or not isinstance(rid.value, (str, int)):
            errors.append(UsageError(f"run id {rid.plain()!r} is not a name; give each run a "
                                     "unique id (text)", dpath, rid.line))
            continue
        if str(rid.value) in seen:
            errors.append(UsageError(f"duplicate run id '{rid.value}' (first on line "
                                     f"{seen[str(rid.value)]}); make ids unique", dpath,
                                     rid.line))
            continue
        seen[str(rid.value)] = rid.line
        bad = False
        for key, body in row.value.items():
            section = conv.sections.get(spelling(key))
            if section in SECTIONS and body.value is not None and not isinstance(body.value,
                                                                                 dict):
                errors.append(UsageError(f"run '{rid.value}': '{key}' must be a mapping "
                                         f"({key}: {{...}})", dpath, body.line))
                bad = True
        if not bad:
            good.append(row)
    return good


class Row:
    """One run's fields under canonical keys, with typed access; type errors are collected
    with their line, and how a text was read is noted in `readings`."""

    def __init__(self, row: Located, path: str, errors: list[DlfError],
                 conv: Conventions | None = None) -> None:
        self.row = row
        self.path = path
        self.errors = errors
        self.id = str(row.value["id"].value)
        self.line = row.line
        self.fields: dict[str, Located] = {}
        self.written: dict[str, str] = {}  # canonical key -> key as the run writes it
        self._sections: dict[str, str] = {}  # canonical key -> the section it was read from
        self.readings: list[str] = []
        self.problems = 0  # malformed fields of this run, each reported in `errors`
        self._reported: set[str] = set()
        self._conv = conv or conventions()
        self._read(row)

    # -- reading the fields under one spelling ----------------------------------------------
    def _read(self, row: Located) -> None:
        for key, item in row.value.items():
            section = self._conv.sections.get(spelling(key))
            if section is not None and isinstance(item.value, dict):
                self._section(section, item, key)
            else:
                name = spelling(key)
                self._put(self._conv.keys.get(("", name), name), item, key, "")

    def _section(self, section: str, block: Located, written: str) -> None:
        for key, item in block.value.items():
            name = spelling(key)
            where = f"{written}.{key}"
            nested = self._conv.sections.get(name)
            if isinstance(item.value, dict) and nested is not None and nested != section:
                self._section(nested, item, where)  # model.moe: {...} reads as moe
                continue
            self._put(self._conv.keys.get((section, name), f"{section}.{name}"), item, where,
                      section)

    def _put(self, key: str, item: Located, written: str, section: str) -> None:
        if item.value is None:
            return
        if key == "moe.moe_every":
            item, dense = _layer_frequency(item)
            if dense:  # '([0]*3+[1]*58)': the leading dense layers, then every layer MoE
                self._put("moe.first_dense_layers", Located(dense, item.line), written, section)
        if key in self.fields:
            first = self.fields[key]
            # A framework (recipe, launcher) block quotes the launch as it was written; where a
            # run's own section gives the value too, that value is the run's and the quote is
            # only noted. Two sections of the run's own, or two quotes, must agree.
            new_quoted = section == "framework"
            if first.plain() != item.plain() and new_quoted != (self._sections[key] == "framework"):
                quote, quoted_at = (item, written) if new_quoted else (first, self.written[key])
                if not new_quoted:  # the run's own value replaces the quote read before it
                    self.fields[key], self.written[key] = item, written
                    self._sections[key] = section
                self.readings.append(f"{quoted_at} = {quote.plain()!r} not read: "
                                     f"{self.written[key]} = {self.fields[key].plain()!r} "
                                     f"gives {key}")
                return
            if first.plain() != item.plain():
                self.problems += 1
                self.errors.append(UsageError(
                    f"run '{self.id}': {written} = {item.plain()!r} and {self.written[key]} = "
                    f"{first.plain()!r} give two values for {key}; keep one", self.path,
                    item.line))
            return
        self.fields[key] = item
        self.written[key] = written
        self._sections[key] = section

    # -- typed access --------------------------------------------------------------------------
    def get(self, key: str) -> Located | None:
        return self.fields.get(key)

    def section(self, name: str) -> dict[str, Located]:
        """The fields under `name.` (canonical keys without the prefix)."""
        prefix = f"{name}."
        return {k[len(prefix):]: v for k, v in self.fields.items() if k.startswith(prefix)}

    def bad(self, key: str, item: Located, want: str) -> None:
        if key in self._reported:
            return
        self._reported.add(key)
        self.problems += 1
        self.errors.append(UsageError(f"run '{self.id}': {self.written.get(key, key)} = "
                                      f"{item.plain()!r} is not {want}; write {want} there",
                                      self.path, item.line))

    def number(self, key: str, integer: bool = False, minimum: float = 0) -> float | int | None:
        item = self.get(key)
        if item is None:
            return None
        v = _as_number(item.value)
        want = "an integer" if integer else "a number"
        if v is None:
            self.bad(key, item, want)
            return None
        if isinstance(item.value, str):
            reading = f"{self.written.get(key, key)} given as {item.value!r}: {v:g}"
            if reading not in self.readings:
                self.readings.append(reading)
        if integer and v != int(v):
            self.bad(key, item, want)
            return None
        if v < minimum:
            self.bad(key, item, f"{want} >= {minimum:g}")
            return None
        return int(v) if integer else v

    def integer(self, key: str, minimum: int = 0) -> int | None:
        v = self.number(key, True, minimum)
        return None if v is None else int(v)

    def flag(self, key: str) -> bool | None:
        item = self.get(key)
        if item is None:
            return None
        v = as_flag(item.value)
        if v is None:
            self.bad(key, item, "true or false")
        return v

    def text(self, key: str) -> str | None:
        item = self.get(key)
        return None if item is None else str(item.plain())


def as_flag(value: Any) -> bool | None:
    """true/false as people write them (yes, on, enabled, 1, ...), or None."""
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        word = value.strip().lower()
        if word in ("true", "yes", "on", "enabled", "enable", "1"):
            return True
        if word in ("false", "no", "off", "disabled", "disable", "none", "0"):
            return False
    return None


def _as_number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):  # beyond 1e300 (or inf, nan): no figure of a run
        return value if abs(value) <= 1e300 and not math.isnan(value) else None
    if isinstance(value, str):
        m = _NUMBER_TEXT.match(value)
        if m:
            number = float(m.group(1).replace(",", "").replace("_", ""))
            if not abs(number) <= 1e300:
                return None
            return int(number) if number == int(number) and "." not in m.group(1) \
                and "e" not in m.group(1).lower() else number
    return None


_PATTERN = re.compile(r"^\s*\[([\d\s,]+)\]\s*(?:\*\s*(\d+))?\s*$")


def _layer_frequency(item: Located) -> tuple[Located, int]:
    """Megatron-LM's --moe-layer-freq written as a pattern ('[0, 1] * 24', '([0]*3+[1]*58)', or
    a list of 0/1 per layer, 1 = MoE) as the period the model takes (moe_every: a MoE layer every
    n layers) and, for leading dense layers followed by MoE layers only, their count; anything
    else as written (0 dense layers)."""
    value = item.value
    pattern: list[int] | None = None
    if isinstance(value, list) and all(isinstance(v, Located) for v in value):
        pattern = [v.value for v in value]
    elif isinstance(value, str):
        pattern = _expand_pattern(value)
    if not pattern or any(v not in (0, 1) for v in pattern) or 1 not in pattern:
        return item, 0
    dense = pattern.index(1)
    if dense and all(v == 1 for v in pattern[dense:]):
        return Located(1, item.line), dense
    ones = [i for i, v in enumerate(pattern) if v == 1]
    period = ones[1] - ones[0] if len(ones) > 1 else len(pattern)
    if any(b - a != period for a, b in zip(ones, ones[1:])):
        return item, 0  # not periodic: left for the mapping to refuse with its line
    return Located(period, item.line), 0


def _expand_pattern(text: str) -> list[int] | None:
    """'[0, 1] * 24' or '([0]*3+[1]*58)' as the list it stands for; None for anything else."""
    out: list[int] = []
    for term in text.strip().removeprefix("(").removesuffix(")").split("+"):
        m = _PATTERN.match(term)
        if m is None:
            return None
        values, times = [int(x) for x in m.group(1).replace(",", " ").split()], int(m.group(2) or 1)
        if len(out) + len(values) * times > 100_000:  # no model has that many layers
            return None
        out += values * times
    return out
