"""The layout space of a search: candidates per axis, pruned, then joined axis by axis.

1. **Pruning.** A candidate value that breaks a constraint on its own -- whatever the other axes
   take -- is dropped before anything is enumerated: expert parallelism above 1 on a dense
   model (`ep_needs_experts`), a tp that does not divide the heads, a cp that does not divide
   the sequence. The layouts those values would have made are never built or counted; the
   summary says which axes lost which values, and why.
2. **Factorisations.** tp x pp x cp x dp = the GPU count, from the pruned candidates (dp fills
   what the others leave).
3. **Joins.** The other axes join one at a time -- the one that lets the most constraints be
   checked first -- and after each join every constraint whose inputs are now all present
   removes the rows that break it, counted for all the full layouts each row stands for.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np


def divisors(n: int) -> list[int]:
    n = int(n)
    small = [d for d in range(1, int(n**0.5) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def factorisations(g: int, degrees: list[str], fixed: dict[str, np.ndarray]) -> np.ndarray:
    """Rows (one column per degree) whose product is g; the last degree (dp) fills the rest.
    `fixed` limits a degree to the given values."""
    divs = np.asarray(divisors(g), dtype=np.float64)
    grids = [fixed.get(n, divs) for n in degrees[:-1]]
    mesh = np.meshgrid(*grids, indexing="ij") if grids else []
    cols = [m.ravel() for m in mesh]
    product = np.prod(cols, axis=0) if cols else np.ones(1)
    last = g / product
    ok = last == np.floor(last)
    if degrees[-1] in fixed:
        ok &= np.isin(last, fixed[degrees[-1]])
    return np.column_stack([c[ok] for c in cols] + [last[ok]])


class Pruned:
    """What pruning did to one axis: values before and after, and the constraints why."""

    def __init__(self) -> None:
        self.before = 0
        self.after = 0
        self.reasons: list[str] = []

    def text(self, name: str) -> str:
        return f"{name} {self.before} -> {self.after} ({', '.join(self.reasons)})"


def single_axis_constraints(model: Any, varying: set[str]) -> dict[str, list[int]]:
    """Axis -> the constraints that depend on it and on no other varying input."""
    out: dict[str, list[int]] = {}
    for i, names in enumerate(model.constraint_names):
        deps = set(names) & varying
        if len(deps) == 1:
            out.setdefault(deps.pop(), []).append(i)
    return out


def prune(ev: Any, axis: str, candidates: np.ndarray, checks: list[int],
          report: dict[str, Pruned], extra: dict[str, Any] | None = None) -> np.ndarray:
    """The candidates of `axis` that pass every constraint in `checks` (which depend on no
    other varying input), the rest recorded in `report`."""
    entry = report.setdefault(axis, Pruned())
    entry.before += len(candidates)
    if checks and len(candidates):
        arrays = {axis: candidates, **(extra or {})}
        with np.errstate(all="ignore"):
            results = ev.constraints(ev.inputs(arrays))
        ok = np.ones(len(candidates), dtype=bool)
        for i in checks:
            passed = np.broadcast_to(np.asarray(results[i], dtype=bool), ok.shape)
            if (ok & ~passed).any():
                name = ev.names[i]
                if name not in entry.reasons:
                    entry.reasons.append(name)
            ok &= passed
        candidates = candidates[ok]
    entry.after += len(candidates)
    return candidates


def space_size(gpu_counts: list[int], degrees: list[str], fixed: dict[str, np.ndarray],
               axes: dict[str, np.ndarray]) -> int:
    """Layouts in the space before pruning."""
    rest = int(np.prod([len(c) for c in axes.values()], dtype=np.int64))
    return sum(len(factorisations(g, degrees, fixed)) if degrees else 1
               for g in gpu_counts) * rest


def pruned_space(ev: Any, gpu_counts: list[int], degrees: list[str],
                 fixed: dict[str, np.ndarray], axes: dict[str, np.ndarray],
                 report: dict[str, Pruned]) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """(factorisation table with a gpus column first, pruned axes)."""
    varying = {*degrees, *axes} | ({"gpus"} if len(gpu_counts) > 1 else set())
    single = single_axis_constraints(ev.model, varying)
    pruned_axes = {name: prune(ev, name, cand, single.get(name, []), report)
                   for name, cand in axes.items()}
    parts = []
    for g in gpu_counts:
        gpus = {"gpus": np.float64(g)}
        limits = {}
        for name in degrees:
            cand = fixed.get(name, np.asarray(divisors(g), dtype=np.float64))
            limits[name] = prune(ev, name, np.asarray(cand, dtype=np.float64),
                                 single.get(name, []), report, gpus)
        f = factorisations(g, degrees, limits) if degrees else np.ones((1, 0))
        parts.append(np.column_stack([np.full(len(f), float(g)), f]))
    return np.concatenate(parts), pruned_axes


JOIN_ROWS = 1 << 18  # rows a join may build at once; larger joins go piece by piece


def plan(ev: Any, degrees: list[str], axes: dict[str, np.ndarray]
         ) -> list[tuple[str | None, np.ndarray | None, list[int], int]]:
    """The joins: (axis joined or None for the factorisations, its candidates, the constraints
    whose inputs are all present after it, how many full layouts a row then stands for).
    Next joins the axis that lets the most constraints be checked (ties: fewer values)."""
    varying = {"gpus", *degrees, *axes}
    deps = [set(names) & varying for names in ev.model.constraint_names]
    present = {"gpus", *degrees}
    remaining = dict(axes)
    weight = int(np.prod([len(c) for c in remaining.values()], dtype=np.int64))
    done = [i for i, d in enumerate(deps) if d <= present]
    steps: list[tuple[str | None, np.ndarray | None, list[int], int]] = [
        (None, None, list(done), weight)]
    def gain(name: str) -> tuple[int, int]:
        now = present | {name}
        return (sum(1 for i, d in enumerate(deps) if i not in done and d <= now),
                -len(remaining[name]))

    while remaining:
        name = max(remaining, key=gain)
        cand = remaining.pop(name)
        weight //= max(len(cand), 1)
        present.add(name)
        which = [i for i, d in enumerate(deps) if i not in done and d <= present]
        done += which
        steps.append((name, cand, which, weight))
    return steps


def join(ev: Any, table: np.ndarray, degrees: list[str], axes: dict[str, np.ndarray],
         stats: Any, limit: int = JOIN_ROWS) -> Iterator[dict[str, np.ndarray]]:
    """Constraint-valid layouts in blocks, joining one axis at a time and filtering as early
    as the constraints allow; rejections are counted for every full layout a partial row
    stands for. A join that would build more than `limit` rows is done piece by piece, so
    memory stays bounded however large the space."""
    rows = {name: table[:, i] for i, name in enumerate(["gpus", *degrees])}
    yield from _expand(ev, rows, plan(ev, degrees, axes), 0, stats, limit)


def _expand(ev: Any, rows: dict[str, np.ndarray], steps: list[Any], k: int, stats: Any,
            limit: int) -> Iterator[dict[str, np.ndarray]]:
    name, cand, which, weight = steps[k]
    n = len(next(iter(rows.values())))
    if not n:
        return
    if name is not None:
        if n > 1 and n * len(cand) > limit:
            size = max(1, limit // max(len(cand), 1))
            for lo in range(0, n, size):
                piece = {key: v[lo:lo + size] for key, v in rows.items()}
                yield from _expand(ev, piece, steps, k, stats, limit)
            return
        rows = {key: np.repeat(v, len(cand)) for key, v in rows.items()}
        rows[name] = np.tile(cand, n)
        n *= len(cand)
    if which:
        ok = ev.valid(rows, n, stats, which, weight)
        if not ok.all():
            rows = {key: v[ok] for key, v in rows.items()}
    if k + 1 == len(steps):
        if len(next(iter(rows.values()))):
            yield rows
    else:
        yield from _expand(ev, rows, steps, k + 1, stats, limit)
