"""Sweeps: many configs through the vectorized evaluator, block by block.

A sweep is a grid. Each `--vary KEY=VALUES` is one dimension; all `--zip` axes together form one
more (their values move in step); the grid is their cartesian product. It is never materialised:
`_blocks` cuts it into blocks of at most `chunk_size` configs in flat order, and gives every axis
its own array dimension, so NumPy broadcasting computes each quantity only over the axes it
depends on. Each block goes through the same pipeline (`Evaluator`): the model's constraints
(each rejected config counted once, under the first constraint it breaks), the generated code
(pruned to the quantities asked for), the `--where` filters, then a sink that keeps the rows,
keeps the best K, or streams them to a file. Memory is bounded by the block, whatever the grid.

Everything here is also the Python API: `sweep(...)` returns a `Table` (`table.py`).
"""

from __future__ import annotations

import ast
import itertools
import math
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .errors import DlfError, UsageError, did_you_mean
from .table import Table, label_text, number_text, open_writer, sort_order

CHUNK_SIZE = 16384  # configs per block: arrays stay in cache and memory stays small
MAX_AXIS_VALUES = 10_000_000
SPECIAL_KEYS = {"hardware.node": "node", "model.preset": "preset"}
# Key results a planner looks at first; the default columns of a sweep.
KEY_COLUMNS = ["memory_per_gpu", "step_time", "mfu", "tokens_per_second", "training_days",
               "cost_usd"]

Progress = Callable[[int, int], None]


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


def _as_text(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return repr(v) if isinstance(v, float) else str(v)


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
    sets = list(sets)
    first = [f"{k}={_as_text(v[0])}" for k, v in specs]
    base = engine.config(path, sets + first, hf_config=hf_config, check_layout=False)
    for key, values in specs:
        if key not in SPECIAL_KEYS:
            continue
        others = [f for f in first if not f.startswith(key + "=")]
        resolved = [engine.config(path, sets + others + [f"{key}={v}"], hf_config=hf_config,
                                  check_layout=False).values for v in values]
        changed = [n for n in base.values if any(r[n] != base.values[n] for r in resolved)]
        columns = {n: np.asarray([float(r[n]) for r in resolved]) for n in changed}
        labels = [str(v) for v in values]
        axes.insert(0, Axis(key, SPECIAL_KEYS[key], labels, columns, dict(enumerate(labels))))
    # Explicit keys win over what a node or preset sets (as in a config file).
    return base, axes


# -- --where ------------------------------------------------------------------------------------
_WHERE_FUNCS: dict[str, Callable[..., Any]] = {
    "Max": np.maximum, "max": np.maximum, "Min": np.minimum, "min": np.minimum,
    "Abs": np.abs, "abs": np.abs, "ceiling": np.ceil, "ceil": np.ceil, "floor": np.floor,
    "log": np.log, "sqrt": np.sqrt, "exp": np.exp,
}
_BINOPS = {ast.Add: np.add, ast.Sub: np.subtract, ast.Mult: np.multiply,
           ast.Div: np.true_divide, ast.FloorDiv: np.floor_divide, ast.Mod: np.mod,
           ast.Pow: np.power}
_CMPS = {ast.Lt: np.less, ast.LtE: np.less_equal, ast.Gt: np.greater,
         ast.GtE: np.greater_equal, ast.Eq: np.equal, ast.NotEq: np.not_equal}


class Where:
    """A filter over a config's names, e.g. `memory_per_gpu < 0.9 * hbm_capacity`.

    The text goes through the formula language's whitelist (`expr.parse`) and is then walked
    over NumPy arrays: it is data, never code. Unit names (GiB, ms, h, ...) stand for their size
    in SI base units; choices compare with their labels (`recompute == 'full'`).
    """

    def __init__(self, text: str, model: Any) -> None:
        from .expr import ExprError, parse

        self.text, self.model = text, model
        try:
            parsed = parse(text)
        except ExprError as exc:
            raise UsageError(f"--where '{text}': {exc}") from None
        self.tree = parsed.tree
        known = set(model.inputs) | set(model.constants) | set(model.quantities)
        self.names, self.units = set(), {}
        for name in sorted(parsed.names):
            if name in known:
                self.names.add(name)
                continue
            scale = _unit_scale(name)
            if scale is None:
                raise UsageError(f"--where '{text}': unknown name '{name}'"
                                 f"{did_you_mean(name, known)}; `dlformula list` shows them")
            self.units[name] = scale
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Call) and _call_name(node) not in _WHERE_FUNCS:
                raise UsageError(f"--where '{text}': function '{_call_name(node)}' is not "
                                 f"available here; use {', '.join(sorted(_WHERE_FUNCS))}")

    def __call__(self, values: Mapping[str, Any], shape: int | tuple[int, ...]) -> np.ndarray:
        """Flat mask over a grid of `shape` (or n configs)."""
        return _flat(np.asarray(self._eval(self.tree, values), dtype=bool), shape)

    def _eval(self, node: ast.AST, v: Mapping[str, Any]) -> Any:
        if isinstance(node, ast.Constant):
            if isinstance(node.value, str):
                raise UsageError(f"--where '{self.text}': compare text only with a choice "
                                 "input, e.g. recompute == 'full'")
            return node.value
        if isinstance(node, ast.Name):
            return v[node.id] if node.id in self.names else self.units[node.id]
        if isinstance(node, ast.BinOp):
            return _BINOPS[type(node.op)](self._eval(node.left, v), self._eval(node.right, v))
        if isinstance(node, ast.UnaryOp):
            x = self._eval(node.operand, v)
            if isinstance(node.op, ast.Not):
                return np.logical_not(x)
            return -x if isinstance(node.op, ast.USub) else x
        if isinstance(node, ast.BoolOp):
            join = np.logical_and if isinstance(node.op, ast.And) else np.logical_or
            vals = [self._eval(x, v) for x in node.values]
            out = vals[0]
            for x in vals[1:]:
                out = join(out, x)
            return out
        if isinstance(node, ast.Compare):
            left, out = node.left, True
            for op, right in zip(node.ops, node.comparators, strict=False):
                a, b = self._operands(left, right, v)
                out = np.logical_and(out, _CMPS[type(op)](a, b))
                left = right
            return out
        if isinstance(node, ast.IfExp):
            return np.where(self._eval(node.test, v), self._eval(node.body, v),
                            self._eval(node.orelse, v))
        if isinstance(node, ast.Call):
            args = [self._eval(a, v) for a in node.args]
            f = _WHERE_FUNCS[_call_name(node)]
            if f in (np.maximum, np.minimum):
                result = args[0]
                for a in args[1:]:
                    result = f(result, a)
                return result
            return f(*args)
        raise UsageError(f"--where '{self.text}': this form is not supported")

    def _operands(self, left: ast.AST, right: ast.AST, v: Mapping[str, Any]) -> tuple[Any, Any]:
        def code(name_node: ast.AST, text_node: ast.AST) -> Any:
            if not (isinstance(text_node, ast.Constant) and isinstance(text_node.value, str)):
                return None
            d = (self.model.inputs.get(name_node.id) if isinstance(name_node, ast.Name)
                 else None)
            if d is None or not d.choices:
                raise UsageError(f"--where '{self.text}': compare text only with a choice "
                                 "input, e.g. recompute == 'full'")
            codes = dict(d.choices)
            if text_node.value not in codes:
                raise UsageError(f"--where '{self.text}': {d.name} is one of "
                                 f"{', '.join(codes)}")
            return codes[text_node.value]

        c = code(left, right)
        if c is not None:
            return self._eval(left, v), c
        c = code(right, left)
        if c is not None:
            return c, self._eval(right, v)
        return self._eval(left, v), self._eval(right, v)


def _call_name(node: ast.Call) -> str:
    return node.func.id if isinstance(node.func, ast.Name) else ""  # (parse allows no other)


def _unit_scale(name: str) -> float | None:
    from .units import UNITS

    u = UNITS.get(name)
    return None if u is None or name in ("1",) else u.scale


# -- the pipeline -------------------------------------------------------------------------------
@dataclass
class Stats:
    """What a sweep or search did: how many configs, how many each constraint rejected."""

    total: int = 0
    rejected: dict[str, int] = field(default_factory=dict)  # constraint -> configs
    removed_by_where: int = 0
    kept: int = 0
    seconds: float = 0.0
    extra: dict[str, int] = field(default_factory=dict)

    @property
    def invalid(self) -> int:
        return sum(self.rejected.values())

    @property
    def rate(self) -> float:
        return self.total / self.seconds if self.seconds > 0 else float("inf")

    def summary(self, noun: str = "configs") -> str:
        parts = [f"{self.total:,} {noun[:-1] if self.total == 1 else noun}"]
        if self.invalid:
            reasons = ", ".join(f"{k} {v:,}" for k, v in
                                sorted(self.rejected.items(), key=lambda kv: -kv[1]) if v)
            parts.append(f"{self.invalid:,} break a constraint ({reasons})")
        for what, count in self.extra.items():
            if count:
                parts.append(f"{count:,} {what}")
        if self.removed_by_where:
            parts.append(f"{self.removed_by_where:,} removed by --where")
        parts.append(f"{self.kept:,} kept")
        if self.total < 10_000:  # too few to time meaningfully
            return "; ".join(parts) + f" ({self.seconds:.2f} s)"
        rate = (f"{self.rate / 1e6:.2f} M" if self.rate >= 1e6 else f"{self.rate:,.0f}")
        return "; ".join(parts) + f" ({self.seconds:.2f} s, {rate} {noun}/s)"


def functions_for(model: Any, names: Iterable[str]) -> tuple[Any, Any]:
    """Vectorized (evaluate, constraints), evaluate pruned to `names` where the engine can."""
    evaluate, constraints = model.functions(vectorized=True)
    try:
        evaluate = model.functions(vectorized=True, only=sorted(set(names)))[0]
    except TypeError:  # an engine without pruning: compute everything
        pass
    return evaluate, constraints


class Evaluator:
    """Constraints, evaluation and filters for chunks of configs given as input arrays."""

    def __init__(self, model: Any, base: Mapping[str, Any], outputs: Iterable[str],
                 where: Iterable[Where] = ()) -> None:
        self.model = model
        self.base = {k: np.float64(v) for k, v in base.items()}
        self.where = list(where)
        self.outputs = list(outputs)
        needed = set(outputs) | {n for w in self.where for n in w.names}
        self.evaluate, self.constraints = functions_for(model, needed)
        self.names = [c.name for c in model.constraints]

    def inputs(self, arrays: Mapping[str, np.ndarray]) -> dict[str, Any]:
        values = dict(self.base)
        values.update(arrays)
        return values

    def valid(self, arrays: Mapping[str, np.ndarray], shape: int | tuple[int, ...],
              stats: Stats, which: Iterable[int] | None = None,
              weight: float | np.ndarray = 1, alive: np.ndarray | None = None) -> np.ndarray:
        """Flat mask of the configs (of a grid of `shape`) meeting the constraints; each failure
        counted under the first constraint it breaks, among the `alive` configs. `which` limits
        the check to some constraints; `weight` is how many full configs a row stands for."""
        checks = getattr(self.model, "checks", None)
        with np.errstate(all="ignore"):
            if which is not None and checks is not None:  # only those constraints computed
                which = list(which)
                results = checks(which)(self.inputs(arrays))
                pairs = list(zip(which, results))
            else:
                results = self.constraints(self.inputs(arrays))
                pairs = [(i, results[i]) for i in (range(len(results)) if which is None
                                                   else which)]
        ok = (np.ones(_size(shape), dtype=bool) if alive is None else alive.copy())
        for i, result in pairs:
            c = _flat(np.asarray(result, dtype=bool), shape)
            failed = ok & ~c
            if failed.any():
                count = (failed.sum() * weight if np.isscalar(weight)
                         else np.asarray(weight)[failed].sum())
                name = self.names[i]
                stats.rejected[name] = stats.rejected.get(name, 0) + int(count)
                ok &= c
        return ok

    def quantities(self, arrays: Mapping[str, np.ndarray], shape: int | tuple[int, ...],
                   stats: Stats, alive: np.ndarray | None = None
                   ) -> tuple[dict[str, Any], np.ndarray]:
        """Evaluated names (broadcastable to `shape`) and the flat --where mask; configs
        that are not `alive` are not counted as removed."""
        with np.errstate(all="ignore"):
            values = self.evaluate(self.inputs(arrays))
            keep = np.ones(_size(shape), dtype=bool)
            if self.where:
                every = {**self.inputs(arrays), **values}
                for w in self.where:
                    keep &= w(every, shape)
        removed = ~keep if alive is None else alive & ~keep
        stats.removed_by_where += int(removed.sum())
        return values, keep


def _size(shape: int | tuple[int, ...]) -> int:
    return shape if isinstance(shape, int) else int(np.prod(shape, dtype=np.int64))


def _flat(value: Any, shape: int | tuple[int, ...]) -> np.ndarray:
    """A value broadcast to a grid of `shape`, in flat (C) order."""
    return np.broadcast_to(value, (shape,) if isinstance(shape, int) else shape).reshape(-1)


class _Keeper:
    """Rows kept in memory: all of them, or only the best `top` by a column."""

    def __init__(self, top: int | None, sort: str | None, descending: bool) -> None:
        self.top, self.sort, self.descending = top, sort, descending
        self.parts: list[dict[str, np.ndarray]] = []
        self.count = 0

    def add(self, columns: dict[str, np.ndarray]) -> None:
        self.parts.append(columns)
        self.count += len(next(iter(columns.values())))
        if self.top is not None and self.count > max(4 * self.top, CHUNK_SIZE):
            self._shrink()

    def _shrink(self) -> None:
        merged = self.merged()
        if self.sort is not None:
            order = sort_order(merged[self.sort], self.descending)[: self.top]
            order.sort()  # keep grid order among the best, so ties stay stable
            merged = {k: v[order] for k, v in merged.items()}
        else:
            merged = {k: v[: self.top] for k, v in merged.items()}
        self.parts, self.count = [merged], len(next(iter(merged.values())))

    def merged(self) -> dict[str, np.ndarray]:
        if not self.parts:
            return {}
        if len(self.parts) == 1:
            return self.parts[0]
        return {k: np.concatenate([p[k] for p in self.parts]) for k in self.parts[0]}

    def full(self) -> bool:
        return self.top is not None and self.sort is None and self.count >= self.top


_DEGREES = ("tp", "pp", "cp")
_PLACEHOLDER = re.compile(r"\{([A-Za-z][A-Za-z0-9_]*)\}")


def _check_fixed_constraints(model: Any, values: Mapping[str, Any], varied: set[str]) -> None:
    """A constraint no axis can change, broken by the base config, would reject every config:
    say so, with the constraint's own message, instead of sweeping for nothing."""
    from .errors import raise_all

    broken = [(c, names) for ok, c, names in zip(model.check(dict(values)), model.constraints,
                                                 model.constraint_names, strict=False)
              if not ok and not set(names) & varied]
    if not broken:
        return
    try:
        shown = model.evaluate(dict(values))
    except Exception:  # a broken layout may not evaluate; fill from the inputs alone
        shown = dict(values)

    def fill(m: re.Match[str]) -> str:
        name = m.group(1)
        if name not in shown:
            return m.group(0)
        d = model.inputs.get(name)
        v = d.label(shown[name]) if d is not None else shown[name]
        return number_text(float(v)) if isinstance(v, (int, float)) and not isinstance(
            v, bool) else str(v)

    raise_all([UsageError("every config breaks a constraint no axis changes: "
                          + _PLACEHOLDER.sub(fill, c.message)) for c, _ in broken])


def _blocks(dims: list[list[Axis]], sizes: list[int], chunk: int
            ) -> Iterable[tuple[tuple[int, ...], dict[str, Any], dict[str, Any]]]:
    """The grid in blocks of at most `chunk` configs, in flat order, as broadcastable arrays.

    A block fixes the outer dimensions, takes a run of one dimension and all of the inner ones;
    each axis becomes an array with its own dimension, so NumPy computes every quantity only
    over the axes it depends on (a memory figure that depends on tp and pp alone is computed
    once per (tp, pp) pair, not once per config).
    """
    k = len(sizes)
    if k == 0:
        yield (), {}, {}
        return
    tails = [int(np.prod(sizes[i + 1:], dtype=np.int64)) for i in range(k)]
    j = next(i for i in range(k) if tails[i] <= chunk)
    run = max(1, min(sizes[j], chunk // tails[j]))
    for outer in itertools.product(*(range(s) for s in sizes[:j])):
        for lo in range(0, sizes[j], run):
            hi = min(sizes[j], lo + run)
            shape = (hi - lo, *sizes[j + 1:])
            arrays: dict[str, Any] = {}
            display: dict[str, Any] = {}
            for d, dim in enumerate(dims):
                index: Any
                if d < j:
                    index = outer[d]
                else:
                    span = np.arange(lo, hi) if d == j else np.arange(sizes[d])
                    index = span.reshape((-1,) + (1,) * (k - 1 - d))
                for axis in dim:
                    for name, codes in axis.codes.items():
                        arrays[name] = codes[index]
                    display[axis.column] = axis.shown(index)
            yield shape, arrays, display


def _fills_dp(model: Any, axes: list[Axis]) -> bool:
    """dp follows the other degrees when they (or the GPU count) vary and dp itself does not."""
    if "dp" not in model.inputs or "gpus" not in model.inputs:
        return False
    varied = {n for a in axes for n in a.codes}
    return "dp" not in varied and bool(varied & {"gpus", *_DEGREES})


def _fill_dp(arrays: dict[str, np.ndarray], base: Mapping[str, Any],
             shape: tuple[int, ...], stats: Stats) -> np.ndarray:
    """Set arrays['dp'] = gpus / (tp x pp x cp); flat mask of configs where that is whole."""
    product: Any = 1.0
    for name in _DEGREES:
        if name in arrays or name in base:
            product = product * (arrays[name] if name in arrays else base[name])
    gpus = arrays["gpus"] if "gpus" in arrays else base["gpus"]
    dp = np.asarray(gpus / product, dtype=np.float64)
    whole = _flat((dp >= 1) & (dp == np.floor(dp)), shape)
    arrays["dp"] = dp
    bad = int(whole.size - whole.sum())
    if bad:
        stats.rejected[GPUS_NOT_DIVISIBLE] = stats.rejected.get(GPUS_NOT_DIVISIBLE, 0) + bad
    return whole


GPUS_NOT_DIVISIBLE = "gpus_divisible_by_layout"


def default_columns(model: Any) -> list[str]:
    cols = [n for n in KEY_COLUMNS if n in model.quantities]
    return cols or list(model.summary)


def check_names(model: Any, names: Iterable[str], option: str) -> list[str]:
    known = [*model.inputs, *model.constants, *model.order]
    out = []
    for n in names:
        n = n.strip()
        if n and n not in known:
            raise UsageError(f"{option} {n}: no such name{did_you_mean(n, known)}; "
                             "`dlformula list` shows them")
        if n and n not in out:
            out.append(n)
    return out


def sweep(config: str | None, vary: Any = (), paired: Any = (), where: Any = (),
          sets: Iterable[str] = (), columns: Iterable[str] | None = None,
          sort: str | None = None, top: int | None = None, output: Any = None,
          fmt: str | None = None, engine: Any = None, hf_config: str | None = None,
          chunk_size: int = CHUNK_SIZE, progress: Progress | None = None,
          keep: bool = True, fill_dp: bool = True) -> Table:
    """Evaluate a grid of configs around a base config, chunk by chunk.

    `vary` (crossed) and `paired` (moving together, the CLI's --zip): ["parallelism.tp=1,2,4,8",
    ...] or {"parallelism.tp": [1, 2, 4, 8]}.
    `where`: filters such as "memory_per_gpu < 0.9 * hbm_capacity". `columns`: names to report
    (default: the key results). `sort`: a column, '-name' for descending; with `top`, only the
    best `top` rows are kept (memory stays bounded however large the grid). `output`: a path
    (.csv/.json/.xlsx) or text stream receiving every kept row as it is computed.
    With `fill_dp` (the default), when tp, pp, cp or the GPU count vary and dp does not, each
    row's dp is the GPU count over tp x pp x cp, as a planner holding the GPUs fixed expects.
    Returns a `Table` (with `.stats`); with keep=False it holds no rows (streaming only).
    """
    if engine is None:
        from .core import Engine

        engine = Engine()
    model = engine.model
    vary_specs, zip_specs = _specs(vary, "--vary"), _specs(paired, "--zip")
    if zip_specs and len({len(v) for _, v in zip_specs}) > 1:
        counts = ", ".join(f"{k} has {len(v)}" for k, v in zip_specs)
        raise UsageError(f"--zip axes move together, so they need the same number of values "
                         f"({counts})")
    zipped = {k for k, _ in zip_specs}
    base, axes = build_axes(engine, config, sets, vary_specs + zip_specs, "--vary", hf_config,
                            zipped)
    dims: list[list[Axis]] = [[a] for a in axes if a.key not in zipped]
    if zipped:
        dims.append([a for a in axes if a.key in zipped])
    outputs = check_names(model, list(columns) if columns is not None
                          else default_columns(model), "--columns")
    descending = bool(sort and sort.startswith("-"))
    sort_name = sort.lstrip("-+") if sort else None
    shown = [a.column for a in axes]
    outputs = [n for n in outputs if n not in shown]
    if sort_name and sort_name not in shown + outputs:
        outputs += check_names(model, [sort_name], "--sort")
    filters = [Where(w, model) for w in ([where] if isinstance(where, str) else where or ())]
    fill = fill_dp and _fills_dp(model, axes)
    _check_fixed_constraints(model, base.values, {n for a in axes for n in a.codes}
                             | ({"dp"} if fill else set()))
    ev = Evaluator(model, base.values, outputs, filters)
    units = {**{n: d.unit for n, d in model.inputs.items()},
             **{n: q.unit for n, q in model.quantities.items()},
             **{n: c.unit for n, c in model.constants.items()}}
    decoders: dict[str, dict] = {}
    for name in outputs:
        d = model.inputs.get(name)
        if d is not None and d.choices:
            decoders[name] = {c: lab for lab, c in d.choices}
    for a in axes:
        if a.decoder is not None:
            decoders[a.column] = a.decoder
    if fill and "dp" not in outputs:
        outputs.insert(0, "dp")
    names = shown + outputs
    writer = open_writer(output, names, decoders, units, fmt) if output is not None else None
    keeper = _Keeper(top, sort_name, descending)
    stats = Stats()
    sizes = [len(d[0]) for d in dims]
    total = int(np.prod(sizes, dtype=np.int64)) if sizes else 1
    start_time = time.perf_counter()
    done = 0
    try:
        for shape, arrays, display in _blocks(dims, sizes, chunk_size):
            n = _size(shape)
            stats.total += n
            ok = _fill_dp(arrays, ev.base, shape, stats) if fill else None
            ok = ev.valid(arrays, shape, stats, alive=ok)
            if ok.any():
                values, keep_mask = ev.quantities(arrays, shape, stats, alive=ok)
                mask = (ok & keep_mask).reshape(shape)
                kept = int(mask.sum())
                stats.kept += kept
                if kept:
                    every = {**display, **{k: values.get(k, arrays.get(k, ev.base.get(k)))
                                           for k in outputs}}
                    out = {k: np.broadcast_to(np.asarray(every[k], dtype=np.float64),
                                              shape)[mask] for k in names}
                    if writer is not None:
                        writer.write(out)
                    if keep and not keeper.full():
                        keeper.add(out)
            done += n
            if progress is not None:
                progress(done, total)
    finally:
        if writer is not None:
            writer.close()
    stats.seconds = time.perf_counter() - start_time
    merged = keeper.merged() if keep else {}
    if not merged:
        merged = {k: np.empty(0) for k in names}
    table = Table(merged, decoders, units, stats)
    if sort_name:
        table = table.sort(sort_name, descending)
    if top is not None:
        table = table.head(top)
    table.config = base
    table.axes = shown
    return table
