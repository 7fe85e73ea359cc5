"""Ranking a search's layouts: memory first, then the objective, then the best kept.

The constraint-valid layouts are evaluated in blocks, in two passes: the memory of every layout
(a pruned evaluator that computes only `memory_per_gpu` and `hbm_capacity`), then every asked-for
quantity for the layouts that fit. Only rows that fit are kept, and with `top` only those that
can still matter -- the best `top` in rank order, the best layout under 90 % of the memory and
every layout no other beats on all Pareto objectives -- so memory stays bounded by the block and
the answer is the one ranking everything would give.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import numpy as np

from .sweep import CHUNK_SIZE, Evaluator
from .table import concat_columns

TIGHT_MEMORY = 0.9  # share of HBM above which memory limits the choices left
OVERHEAD = 0.05  # bubble or exposed-communication share above which it limits the step
LIMITS = {0: "compute", 1: "pipeline bubble", 2: "communication", 3: "compute; memory tight",
          4: "pipeline bubble; memory tight", 5: "communication; memory tight"}
REDUCE_AT = 1 << 16  # kept rows that trigger a reduction (with `top`)


def primary(columns: dict[str, np.ndarray], obj: str, descending: bool) -> np.ndarray:
    """The objective, oriented so that smaller is better (NaN worst)."""
    p = np.asarray(columns[obj], dtype=np.float64)
    return np.where(np.isnan(p), np.inf, -p if descending else p)


def rank_order(columns: dict[str, np.ndarray], layout: list[str], obj: str,
               descending: bool) -> np.ndarray:
    """Best first: the objective, then less memory, then smaller degrees (the simpler layout);
    rows equal on all of these keep their order."""
    keys = [np.asarray(columns[c]) for c in reversed(layout)]
    keys.append(np.asarray(columns["memory_per_gpu"]))
    keys.append(primary(columns, obj, descending))
    return np.lexsort(keys)


def oriented(columns: dict[str, np.ndarray], objectives: list[tuple[str, bool]]) -> np.ndarray:
    """One column per objective, each to be minimised (NaN worst)."""
    m = np.column_stack([-np.asarray(columns[n], dtype=np.float64) if desc
                         else np.asarray(columns[n], dtype=np.float64) for n, desc in objectives])
    return np.where(np.isnan(m), np.inf, m)


def not_dominated(m: np.ndarray) -> np.ndarray:
    """Mask of the rows no other row strictly beats (better or equal on every objective,
    better on one). Rows equal to each other all stay."""
    n = len(m)
    keep = np.ones(n, dtype=bool)
    if n < 2:
        return keep
    order = np.lexsort(m.T[::-1])
    s = m[order]
    if s.shape[1] == 2:  # sorted by (a, b): a prefix minimum of b decides, in one pass
        a, b = s[:, 0], s[:, 1]
        group_start = np.flatnonzero(np.r_[True, a[1:] != a[:-1]])
        start_of = np.repeat(group_start, np.diff(np.r_[group_start, n]))
        prefix = np.minimum.accumulate(b)
        before = np.where(start_of > 0, prefix[np.maximum(start_of - 1, 0)], np.inf)
        dominated = (before <= b) | (b > b[start_of])
    else:
        dominated = np.zeros(n, dtype=bool)
        front: list[int] = []
        for i in range(n):
            if front:
                f = s[front]
                if np.any(np.all(f <= s[i], axis=1) & np.any(f < s[i], axis=1)):
                    dominated[i] = True
                    continue
            front.append(i)
    keep[order[dominated]] = False
    return keep


def pareto_front(columns: Any, objectives: list[tuple[str, bool]]) -> np.ndarray:
    """Indices of the rows no other row beats on every objective (each in its direction),
    ordered by the first objective; of rows equal on every objective, the first."""
    n = len(columns)
    if not n:
        return np.empty(0, dtype=np.int64)
    m = oriented({name: columns[name] for name, _ in objectives}, objectives)
    candidates = np.flatnonzero(not_dominated(m))
    sub = m[candidates]
    order = np.lexsort(sub.T[::-1])
    front: list[int] = []
    seen: set[tuple[float, ...]] = set()
    for i in order.tolist():
        point = tuple(sub[i].tolist())
        if point not in seen:  # the first of equal points (by the table's order)
            seen.add(point)
            front.append(int(candidates[i]))
    return np.asarray(front, dtype=np.int64)


class Best:
    """Rows kept from a search's blocks: all of them, or (with `top`) only those that can still
    be in the answer."""

    def __init__(self, top: int | None, layout: list[str], obj: str, descending: bool,
                 fronts: list[tuple[str, bool]], domain: int | None = None) -> None:
        self.top, self.layout, self.obj, self.descending = top, layout, obj, descending
        self.fronts = fronts
        self.domain = domain  # the scale-up domain: the best layout whose tp x cp fits it
        self.parts: list[dict[str, np.ndarray]] = []
        self.count = 0
        self.cuts: dict[str, float] | None = None

    def add(self, columns: dict[str, np.ndarray]) -> None:
        if self.cuts is not None:
            keep = self.worth_keeping(columns)
            if not keep.all():
                columns = {k: v[keep] for k, v in columns.items()}
        n = len(next(iter(columns.values())))
        if not n:
            return
        self.parts.append(columns)
        self.count += n
        if self.top is not None and self.count > max(REDUCE_AT, 8 * self.top):
            merged = self.merged()
            keep = self.needed(merged)
            self.parts = [{k: v[keep] for k, v in merged.items()}]
            self.count = int(keep.sum())

    def wanted(self, c: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The kinds of row worth keeping besides the best `top`: the best roomy one, the best
        whose tensor- and context-parallel group fits the scale-up domain."""
        out = {"roomy": np.asarray(c["memory_per_gpu"])
               < TIGHT_MEMORY * np.asarray(c["hbm_capacity"])}
        if self.domain:
            out["inside"] = inside_domain(c, self.domain)
        return out

    def needed(self, c: dict[str, np.ndarray]) -> np.ndarray:
        """Rows that can be in the answer, and the cut-offs that rule out later rows: a row
        whose objective is worse than the `top`-th best so far (or than the best of its kind)
        cannot be among the best; ties are kept."""
        order = rank_order(c, self.layout, self.obj, self.descending)
        p = primary(c, self.obj, self.descending)
        keep = np.zeros(len(order), dtype=bool)
        keep[order[: self.top]] = True
        cuts: dict[str, float] = {}
        if self.top is not None and len(order) >= self.top:
            cuts["top"] = float(p[order[self.top - 1]])
        for kind, mask in self.wanted(c).items():
            first = np.flatnonzero(mask[order])
            if len(first):
                keep[order[first[0]]] = True
                cuts[kind] = float(p[order[first[0]]])
        if self.fronts:
            keep |= not_dominated(oriented(c, self.fronts))
        self.cuts = cuts if "top" in cuts else None
        return keep

    def worth_keeping(self, c: dict[str, np.ndarray]) -> np.ndarray:
        """Rows of a new block that may still be in the answer, by the cut-offs."""
        cuts = self.cuts or {}
        p = primary(c, self.obj, self.descending)
        keep = p <= cuts["top"]
        for kind, mask in self.wanted(c).items():
            keep |= mask & (p <= cuts[kind]) if kind in cuts else mask
        if self.fronts:
            keep |= not_dominated(oriented(c, self.fronts))
        return keep

    def merged(self) -> dict[str, np.ndarray]:
        return concat_columns(self.parts)


def inside_domain(c: Any, domain: int) -> np.ndarray:
    """Rows whose tensor- and context-parallel group fits in the scale-up domain."""
    n = len(next(iter(c.values())))
    tp = np.asarray(c["tp"]) if "tp" in c else np.ones(n)
    cp = np.asarray(c["cp"]) if "cp" in c else np.ones(n)
    return tp * cp <= domain


def blocks_of(pieces: Iterable[dict[str, np.ndarray]], size: int = CHUNK_SIZE
              ) -> Iterator[dict[str, np.ndarray]]:
    """The rows of `pieces` (of any sizes) in blocks of `size`, in order."""
    buffer: list[dict[str, np.ndarray]] = []
    held = 0
    for piece in pieces:
        buffer.append(piece)
        held += len(next(iter(piece.values())))
        while held >= size:
            merged = concat_columns(buffer)
            yield {k: v[:size] for k, v in merged.items()}
            held -= size
            buffer = [{k: v[size:] for k, v in merged.items()}] if held else []
    if held:
        yield concat_columns(buffer)


def evaluate_layouts(fit: Evaluator, ev: Evaluator, pieces: Iterable[dict[str, np.ndarray]],
                     layout: list[str], max_memory: float, best: Best, stats: Any,
                     auto_twins: tuple[float, bool, bool] | None = None) -> tuple[int, int]:
    """Evaluate every row in blocks into `best` (only those that fit); returns how many rows
    there were and how many do not fit in memory. `auto_twins` (see `auto_twins`): drop the
    rows whose `auto` recompute is another searched choice under another name."""
    total = no_fit = 0
    for part in blocks_of(pieces):
        m = len(next(iter(part.values())))
        total += m
        memory, _ = fit.quantities(part, m, stats)
        every = {**fit.inputs(part), **memory}
        used = np.broadcast_to(np.asarray(every["memory_per_gpu"], dtype=np.float64), (m,))
        capacity = np.broadcast_to(np.asarray(every["hbm_capacity"], dtype=np.float64), (m,))
        fits = used <= max_memory * capacity
        no_fit += m - int(fits.sum())
        if auto_twins is not None:
            code, low, high = auto_twins
            share = np.broadcast_to(np.asarray(every["full_recompute_share"],
                                               dtype=np.float64), (m,))
            twin = (part["recompute"] == code) & (((share <= 0) & low) | ((share >= 1) & high))
            stats.extra[AUTO_TWINS] = stats.extra.get(AUTO_TWINS, 0) + int((twin & fits).sum())
            fits &= ~twin
        k = int(fits.sum())
        if not k:
            continue
        part = {key: v[fits] for key, v in part.items()}
        values, _ = ev.quantities(part, k, stats)
        every = {**ev.inputs(part), **values}
        cols = {key: np.array(np.broadcast_to(np.asarray(every[key], dtype=np.float64), (k,)))
                for key in ev.outputs if key in every}
        best.add({**{key: part[key] for key in layout}, **cols})
    return total, no_fit


AUTO_TWINS = "repeat another recompute choice as auto"


def auto_twins(model: Any, candidates: Mapping[str, np.ndarray]) -> tuple[float, bool, bool] | None:
    """When search varies training.recompute over `auto` and the choices auto can equal, (auto's
    code, whether none and selective are searched, whether full is): an `auto` layout that
    recomputes no layer in full is `none` (fused attention) or `selective` (unfused) under
    another name, one that recomputes every layer is `full`, and listing both wastes the ranks."""
    d = model.inputs.get("recompute")
    if d is None or not d.choices or "recompute" not in candidates:
        return None
    code = dict(d.choices)
    searched = set(np.asarray(candidates["recompute"]).tolist())
    if code.get("auto") not in searched:
        return None
    low = code.get("none") in searched and code.get("selective") in searched
    high = code.get("full") in searched
    return (float(code["auto"]), low, high) if low or high else None


def limits(c: dict[str, np.ndarray]) -> np.ndarray:
    """What limits each layout (a code of LIMITS)."""
    step = c.get("step_time")
    if "pipeline_bubble_time" in c and step is not None:
        bubble = c["pipeline_bubble_time"] / step
    elif "pipeline_bubble_fraction" in c:
        f = c["pipeline_bubble_fraction"]
        bubble = f / (1 + f)
    else:
        bubble = np.zeros_like(c["memory_per_gpu"])
    comm = c.get("exposed_comm_share", np.zeros_like(bubble))
    which = np.where(np.maximum(bubble, comm) < OVERHEAD, 0, np.where(bubble >= comm, 1, 2))
    tight = c["memory_per_gpu"] >= TIGHT_MEMORY * c["hbm_capacity"]
    return (which + 3 * tight).astype(np.float64)
