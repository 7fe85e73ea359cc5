"""Running a sweep's grid: blocks, the pipeline each block goes through, and the sinks.

The grid is never materialised. `Grid` cuts it into blocks of at most `chunk` configs in flat
(C) order and gives every axis its own array dimension, so NumPy broadcasting computes each
quantity only over the axes it depends on; block `i` can be built on its own, so a range of
blocks is a task another process (or a Dask worker) can run (parallel.py). Each block goes
through the same pipeline (`Evaluator`): the model's constraints (each rejected config counted
once, under the first constraint it breaks), the generated code (pruned to the quantities asked
for), the `--where` filters; `run_blocks` then keeps the rows, or the best K of them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .sweep_axes import Axis
from .table import concat_columns, sort_order

CHUNK_SIZE = 16384  # configs per block: arrays stay in cache and memory stays small
_DEGREES = ("tp", "pp", "cp")


GPUS_NOT_DIVISIBLE = "gpus_divisible_by_layout"


@dataclass
class Stats:
    """What a sweep or search did: how many configs, how many each constraint rejected."""

    total: int = 0
    rejected: dict[str, int] = field(default_factory=dict)  # constraint -> configs
    removed_by_where: int = 0
    kept: int = 0
    seconds: float = 0.0
    extra: dict[str, int] = field(default_factory=dict)

    def add(self, other: Stats) -> None:
        """Count another part of the same sweep (a task run elsewhere) into this one."""
        self.total += other.total
        for k, v in other.rejected.items():
            self.rejected[k] = self.rejected.get(k, 0) + v
        self.removed_by_where += other.removed_by_where
        self.kept += other.kept
        for k, v in other.extra.items():
            self.extra[k] = self.extra.get(k, 0) + v

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
                 where: Iterable[Any] = ()) -> None:
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
        return concat_columns(self.parts)

    def full(self) -> bool:
        return self.top is not None and self.sort is None and self.count >= self.top


class Grid:
    """The grid in blocks of at most `chunk` configs, in flat order, as broadcastable arrays.

    A block fixes the outer dimensions, takes a run of one dimension and all of the inner ones;
    each axis becomes an array with its own dimension, so NumPy computes every quantity only
    over the axes it depends on (a memory figure that depends on tp and pp alone is computed
    once per (tp, pp) pair, not once per config).
    """

    def __init__(self, dims: list[list[Axis]], chunk: int) -> None:
        self.dims = dims
        self.sizes = sizes = [len(d[0]) for d in dims]
        self.total = int(np.prod(sizes, dtype=np.int64)) if sizes else 1
        k = len(sizes)
        if k == 0:
            self.j, self.run, self.runs, self.count = -1, 1, 1, 1
            return
        tails = [int(np.prod(sizes[i + 1:], dtype=np.int64)) for i in range(k)]
        self.j = j = next(i for i in range(k) if tails[i] <= chunk)
        self.run = max(1, min(sizes[j], chunk // tails[j]))
        self.runs = math.ceil(sizes[j] / self.run)
        self.count = int(np.prod(sizes[:j], dtype=np.int64)) * self.runs

    def block(self, b: int) -> tuple[tuple[int, ...], dict[str, Any], dict[str, Any]]:
        """(shape, input arrays, displayed columns) of block `b` (0 <= b < count)."""
        if self.j < 0:
            return (), {}, {}
        j, k, sizes = self.j, len(self.sizes), self.sizes
        o, r = divmod(b, self.runs)
        outer = np.unravel_index(o, sizes[:j]) if j else ()
        lo = r * self.run
        hi = min(sizes[j], lo + self.run)
        shape = (hi - lo, *sizes[j + 1:])
        arrays: dict[str, Any] = {}
        display: dict[str, Any] = {}
        for d, dim in enumerate(self.dims):
            index: Any
            if d < j:
                index = int(outer[d])
            else:
                span = np.arange(lo, hi) if d == j else np.arange(sizes[d])
                index = span.reshape((-1,) + (1,) * (k - 1 - d))
            for axis in dim:
                for name, codes in axis.codes.items():
                    arrays[name] = codes[index]
                display[axis.column] = axis.shown(index)
        return shape, arrays, display

    def size_of(self, b: int) -> int:
        if self.j < 0:
            return 1
        lo = (b % self.runs) * self.run
        return (min(self.sizes[self.j], lo + self.run) - lo) * int(
            np.prod(self.sizes[self.j + 1:], dtype=np.int64))


@dataclass
class Plan:
    """Everything a process needs to run blocks of a sweep (plain data: it travels to worker
    processes and Dask workers; the `--where` filters go as text)."""

    base: dict[str, float]
    dims: list[list[Axis]]
    chunk: int
    outputs: list[str]
    names: list[str]
    where: list[str] = field(default_factory=list)
    fill: bool = False
    top: int | None = None
    sort: str | None = None
    descending: bool = False
    every_row: bool = False  # return every kept row (to stream), not only the best `top`
    marks: bool = False  # add the fits_memory column (memory_per_gpu <= hbm_capacity)


def process_block(ev: Evaluator, plan: Plan, grid: Grid, b: int,
                  stats: Stats) -> dict[str, np.ndarray] | None:
    """The kept rows of block `b` (None when none is left), counting into `stats`."""
    shape, arrays, display = grid.block(b)
    n = _size(shape)
    stats.total += n
    ok = _fill_dp(arrays, ev.base, shape, stats) if plan.fill else None
    ok = ev.valid(arrays, shape, stats, alive=ok)
    if not ok.any():
        return None
    values, keep_mask = ev.quantities(arrays, shape, stats, alive=ok)
    mask = (ok & keep_mask).reshape(shape)
    kept = int(mask.sum())
    stats.kept += kept
    if not kept:
        return None
    every = {**display, **{k: values.get(k, arrays.get(k, ev.base.get(k)))
                           for k in plan.outputs}}
    if plan.marks:
        capacity = arrays.get("hbm_capacity", ev.base.get("hbm_capacity"))
        every["fits_memory"] = np.asarray(every["memory_per_gpu"] <= capacity, dtype=np.float64)
    return {k: np.broadcast_to(np.asarray(every[k], dtype=np.float64), shape)[mask]
            for k in plan.names}


def run_blocks(model: Any, plan: Plan, first: int, last: int
               ) -> tuple[Stats, dict[str, np.ndarray] | None]:
    """Blocks first..last-1 in one process: their counts, and their rows (every one, or with
    `plan.top` and not `plan.every_row` the best `top`, in grid order)."""
    from .sweep_where import Where

    ev = Evaluator(model, plan.base, plan.outputs, [Where(w, model) for w in plan.where])
    grid = Grid(plan.dims, plan.chunk)
    stats = Stats()
    keeper = _Keeper(None if plan.every_row else plan.top, plan.sort, plan.descending)
    for b in range(first, last):
        out = process_block(ev, plan, grid, b, stats)
        if out is not None and (plan.every_row or not keeper.full()):
            keeper.add(out)
    merged = keeper.merged()
    return stats, (merged or None)


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
