"""Immutable definitions read from formula files. They remember their file and line."""

from __future__ import annotations

import re
from typing import Any, NamedTuple


class Domain(NamedTuple):
    """The values an input accepts: `integer >= 1`, `0 < number <= 1`, `boolean`, choices."""

    kind: str  # integer | number | boolean | choice
    lo: float | None = None
    lo_inclusive: bool = True
    hi: float | None = None
    hi_inclusive: bool = True
    text: str = ""

    def problem(self, value: Any, choices: tuple[str, ...] = ()) -> str | None:
        """Why `value` is outside the domain, or None when it is inside."""
        if self.kind == "choice":
            if value not in choices:
                return f"must be one of {', '.join(choices)}"
            return None
        if self.kind == "boolean":
            return None if isinstance(value, bool) else "must be true or false"
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return f"must be {'an integer' if self.kind == 'integer' else 'a number'}"
        if value != value or value in (float("inf"), float("-inf")):
            return "must be a finite number"
        if self.kind == "integer" and abs(value) > MAX_INTEGER:
            return f"is too large: integers up to {MAX_INTEGER:.0e} (2**53) are exact as floats"
        if abs(value) > MAX_NUMBER:
            return f"is too large: numbers up to {MAX_NUMBER:.0e} keep every figure finite"
        if self.kind == "integer" and value != int(value):
            return "must be an integer"
        lo, hi = self.lo, self.hi
        if lo is not None and (value < lo or (value == lo and not self.lo_inclusive)):
            return f"must be {self.text}"
        if hi is not None and (value > hi or (value == hi and not self.hi_inclusive)):
            return f"must be {self.text}"
        return None


MAX_INTEGER = 2**53
MAX_NUMBER = 1e300

_NUM = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"
_LOWER = re.compile(rf"^(integer|number)\s*(>=|>)\s*({_NUM})$")
_UPPER = re.compile(rf"^(integer|number)\s*(<=|<)\s*({_NUM})$")
_RANGE = re.compile(rf"^({_NUM})\s*(<=|<)\s*(integer|number)\s*(<=|<)\s*({_NUM})$")


def parse_domain(text: Any) -> Domain:
    """Read domain text; raise ValueError with the accepted forms when it cannot."""
    t = " ".join(str(text).split())
    if t in ("integer", "number", "boolean"):
        return Domain(t, text=t)
    if m := _LOWER.match(t):
        return Domain(m[1], lo=float(m[3]), lo_inclusive=m[2] == ">=", text=t)
    if m := _UPPER.match(t):
        return Domain(m[1], hi=float(m[3]), hi_inclusive=m[2] == "<=", text=t)
    if m := _RANGE.match(t):
        lo, hi = float(m[1]), float(m[5])
        if lo > hi:
            raise ValueError(f"domain '{t}' is empty: {m[1]} is above {m[5]}")
        return Domain(m[3], lo=lo, lo_inclusive=m[2] == "<=", hi=hi,
                      hi_inclusive=m[4] == "<=", text=t)
    raise ValueError(
        f"cannot read domain '{t}'; write e.g. 'integer >= 1', 'number > 0', "
        "'0 <= number <= 1', 'number', 'boolean', or give 'choices'"
    )


class InputDef(NamedTuple):
    name: str
    unit: str
    doc: str
    default: Any  # a number, bool, choice label, or None when the config must give it
    domain: Domain
    config: str  # dotted config key that sets it, e.g. parallelism.tp
    choices: tuple[tuple[str, int], ...]  # (label, code) for choice inputs
    source: str
    path: str
    line: int
    group: str
    override: bool | str = False  # true, or the plugin whose replacement this replaces
    search: str = ""  # how `search` finds its candidates: gpus, domain, choices, divisors:KEY
    title: str = ""  # how it is shown (display.py): a name for people,
    short: str = ""  # a narrow column header,
    summary: int = 0  # and its rank among the key results (0: not one)

    def code(self, value: Any) -> float | int:
        """The number the formulas see for a config value (choice labels -> codes)."""
        if self.choices:
            return dict(self.choices)[value]
        if isinstance(value, bool):
            return int(value)
        return value

    def label(self, code: Any) -> Any:
        """Inverse of `code` for display."""
        if self.choices:
            for label, c in self.choices:
                if c == code:
                    return label
        if self.domain.kind == "boolean":
            return bool(code)
        return code


class ConstantDef(NamedTuple):
    name: str
    value: float
    unit: str
    doc: str
    source: str
    path: str
    line: int
    group: str
    override: bool | str = False  # true, or the plugin whose replacement this replaces


class QuantityDef(NamedTuple):
    name: str
    expr: str
    unit: str
    doc: str
    source: str
    path: str
    line: int
    group: str
    override: bool | str = False  # true, or the plugin whose replacement this replaces
    expr_line: int = 0
    display: str = ""  # "percent": a share shown as 53.1 % wherever it is printed
    better: str = ""  # "higher" or "lower": the direction search optimises it in by default
    title: str = ""  # a name for people (display.title falls back to the name as words)
    short: str = ""  # a narrow column header
    summary: int = 0  # rank among the key results (0: not one)
    column: int = 0  # rank among search's result columns (0: not one)


class ConstraintDef(NamedTuple):
    """A condition a config must meet to describe a layout that can run (kind 'constraint'),
    or one whose failure is worth a warning but still evaluates (kind 'warning')."""

    name: str
    check: str
    message: str
    path: str
    line: int
    group: str
    kind: str = "constraint"


Definition = InputDef | ConstantDef | QuantityDef
