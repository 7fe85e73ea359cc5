"""The axes of a sweep: `--vary` and `--zip` text (or a mapping) -> values checked against each
input's domain -> an `Axis` of the codes the formulas see. Whole hardware nodes and model
presets vary too: each value is resolved as a config, and the inputs it changes become the
axis's columns."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from .errors import DlfError, UsageError, did_you_mean
from .table import label_text

MAX_AXIS_VALUES = 10_000_000
SPECIAL_KEYS = {"hardware.node": "node", "model.preset": "preset"}


# -- values of an axis --------------------------------------------------------------------------
_NUM = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"
_RANGE = re.compile(rf"^({_NUM})\.\.({_NUM})(?::([x*])?({_NUM}))?$")
_WITH_UNIT = re.compile(rf"^({_NUM})\s*([A-Za-z][A-Za-z0-9*/()]*)$")


def _scalar(text: str) -> Any:
    t = text.strip()
    low = t.lower()
    if low in ("true", "yes", "on"):
        return True
    if low in ("false", "no", "off"):
        return False
    try:
        return int(t)
    except ValueError:
        pass
    try:
        return float(t)
    except ValueError:
        return t


def parse_values(text: str, where: str) -> list[Any]:
    """`1,2,4`, `1..8` (step 1), `0..1:0.25` (step), `1..64:x2` (times 2), words, `80GiB`."""
    values: list[Any] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            raise UsageError(f"{where}: empty value; write e.g. 1,2,4 or 1..8 or 1..64:x2")
        m = _RANGE.match(part)
        if not m:
            values.append(_scalar(part))
            continue
        lo, hi = float(m[1]), float(m[2])
        geometric, step = m[3] is not None, float(m[4]) if m[4] else 1.0
        if hi < lo:
            raise UsageError(f"{where}: range '{part}' runs backwards; write LO..HI")
        if geometric and (step <= 1 or lo <= 0):
            raise UsageError(f"{where}: '{part}' needs a factor above 1 and a positive start")
        if step <= 0:
            raise UsageError(f"{where}: '{part}' needs a positive step")
        count = (math.floor(math.log(hi / lo, step) + 1e-9) if geometric
                 else math.floor((hi - lo) / step + 1e-9)) + 1
        if len(values) + count > MAX_AXIS_VALUES:
            raise UsageError(f"{where}: '{part}' gives {count:,} values; at most "
                             f"{MAX_AXIS_VALUES:,} per axis")
        seq = (lo * step ** np.arange(count) if geometric else lo + step * np.arange(count))
        whole = all(float(x).is_integer() for x in (lo, step)) and not any(
            c in m[1] + (m[4] or "") for c in ".eE")
        values.extend(int(round(x)) for x in seq.tolist()) if whole else values.extend(
            seq.tolist())
    return values


def split_spec(spec: str, option: str) -> tuple[str, str]:
    key, sep, text = spec.partition("=")
    key = key.strip()
    if not sep or not key or not text.strip():
        raise UsageError(f"{option} '{spec}': write KEY=VALUES, e.g. {option} "
                         "parallelism.tp=1,2,4,8 or training.micro_batch=1..8")
    return key, text


@dataclass
class Axis:
    """One varied key: its labels as written, and the input values (codes) each one sets."""

    key: str
    column: str  # the table column that shows it
    labels: list[Any]
    codes: dict[str, np.ndarray]  # input name -> value per label
    decoder: dict | None = None  # for the table column: code -> label

    def __len__(self) -> int:
        return len(self.labels)

    def shown(self, index: Any) -> np.ndarray:
        if self.column in self.codes:
            return self.codes[self.column][index]
        return np.asarray(index, dtype=np.float64)  # special axes show the label's position


def input_by_key(model: Any) -> dict[str, Any]:
    return {d.config: d for d in model.inputs.values() if d.config}


def check_key(model: Any, key: str, option: str) -> None:
    known = input_by_key(model)
    if key not in known and key not in SPECIAL_KEYS:
        raise UsageError(f"{option} {key}: unknown key{did_you_mean(key, [*known, *SPECIAL_KEYS])}"
                         "; `dlformula list` shows every input and its config key")


def value_codes(d: Any, values: list[Any], where: str) -> np.ndarray:
    """Codes the formulas see for `values` of input `d`; every bad value reported at once."""
    from .errors import raise_all

    labels = tuple(c for c, _ in d.choices)
    out: list[float] = []
    errors: list[DlfError] = []
    for v in values:
        if isinstance(v, str) and not d.choices and d.domain.kind != "boolean":
            v = _with_unit(v, d.unit)
        if isinstance(v, int) and not isinstance(v, bool) and d.domain.kind == "boolean" \
                and v in (0, 1):
            v = bool(v)
        problem = d.domain.problem(v, labels)
        if problem:
            errors.append(UsageError(f"{where}={label_text(v)}: {problem}"))
            continue
        out.append(float(d.code(v)))
    raise_all(errors)
    return np.asarray(out, dtype=np.float64)


def _with_unit(text: str, unit: str) -> Any:
    from .units import UnitSyntaxError, parse_unit

    m = _WITH_UNIT.match(text.strip())
    if not m:
        return text
    try:
        a, b = parse_unit(m[2]), parse_unit(unit)
    except UnitSyntaxError:
        return text
    if a.dim != b.dim:
        return text
    return float(m[1]) * a.scale / b.scale


def _specs(items: Any, option: str) -> list[tuple[str, list[Any]]]:
    """`["k=1,2"]` or `{"k": [1, 2]}` or `{"k": "1..8"}` -> [(key, values)]."""
    if not items:
        return []
    pairs = (list(items.items()) if isinstance(items, Mapping)
             else [split_spec(s, option) for s in ([items] if isinstance(items, str) else items)])
    out = []
    for key, vals in pairs:
        where = f"{option} {key}"
        values = parse_values(vals, where) if isinstance(vals, str) else list(
            vals if isinstance(vals, Iterable) else [vals])
        if not values:
            raise UsageError(f"{where}: give at least one value")
        out.append((key, values))
    return out


def build_axes(engine: Any, path: str | None, sets: Iterable[str],
               specs: list[tuple[str, list[Any]]], option: str,
               hf_config: str | None = None, zipped: Iterable[str] = ()) -> tuple[Any, list[Axis]]:
    """Resolve the base config (with each axis at its first value) and the axes' codes."""
    model = engine.model
    zipped = set(zipped)

    def opt(key: str) -> str:
        return "--zip" if key in zipped else option

    by_key = input_by_key(model)
    seen: set[str] = set()
    for key, _ in specs:
        check_key(model, key, opt(key))
        if key in seen:
            raise UsageError(f"{opt(key)} {key}: the key is given twice; list all its values once")
        seen.add(key)
    for key, values in specs:
        if key in SPECIAL_KEYS:  # unknown ids, named after the option that gave them
            lookup = engine.catalog.node if key == "hardware.node" else engine.catalog.preset
            for v in values:
                lookup(str(v), (f"{opt(key)} {key}", None))
    axes: list[Axis] = []
    for key, values in specs:
        if key in by_key:
            d = by_key[key]
            codes = value_codes(d, values, f"{opt(key)} {key}")
            decoder = (dict((c, lab) for lab, c in d.choices) if d.choices else
                       {0: False, 1: True} if d.domain.kind == "boolean" else None)
            axes.append(Axis(key, d.name, list(values), {d.name: codes}, decoder))
    from .core import typed_overrides

    given = typed_overrides(list(sets))
    first = {k: v[0] for k, v in specs}
    base = engine.config(path, {**given, **first}, hf_config=hf_config, check_layout=False)
    for key, values in specs:
        if key not in SPECIAL_KEYS:
            continue
        others = {k: v for k, v in first.items() if k != key}
        resolved = [engine.config(path, {**given, **others, key: v}, hf_config=hf_config,
                                  check_layout=False).values for v in values]
        changed = [n for n in base.values if any(r[n] != base.values[n] for r in resolved)]
        columns = {n: np.asarray([float(r[n]) for r in resolved]) for n in changed}
        labels = [str(v) for v in values]
        axes.insert(0, Axis(key, SPECIAL_KEYS[key], labels, columns, dict(enumerate(labels))))
    # Explicit keys win over what a node or preset sets (as in a config file).
    return base, axes
