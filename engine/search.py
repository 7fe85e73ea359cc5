"""Search: every parallel layout for N GPUs that can run and fits, ranked by an objective.

The layout space is read from the inputs the loaded model has, so a plugin that adds a degree
(expert parallelism) or a choice (pipeline schedule) is searched without a change here:

- tp, pp, cp, dp: every factorisation of the GPU count (dp fills what tp x pp x cp leave; a pp
  that does not divide the layer count gives uneven stages, see formulas/parallelism.yaml);
- vpp: divisors of the layer count; micro_batch: divisors of the global batch;
- ep: divisors of the GPU count; zero: its integer domain; recompute, schedule: every choice.

The space is the product of those candidates, but it is never built whole. Axes join one at a
time (`_enumerate`), and after each join the model's own constraints whose inputs are now all
present remove the rows that break them, each counted for the full layouts it stands for. What
survives is evaluated in chunks by the pruned vectorized evaluator, checked against the memory
of the accelerator, and ranked.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .errors import UsageError, did_you_mean
from .sweep import (
    CHUNK_SIZE,
    Evaluator,
    Stats,
    _specs,
    check_key,
    input_by_key,
    value_codes,
)
from .table import Table, human_column

DEGREES = ("parallelism.tp", "parallelism.pp", "parallelism.cp", "parallelism.dp")
# Axis -> how its candidates are found ("divisors:KEY" of a config value, "gpus", "domain",
# "choices"). Keys whose input the model lacks are skipped.
AXES = {
    "parallelism.ep": "gpus",
    "parallelism.vpp": "divisors:model.layers",
    "training.micro_batch": "divisors:training.global_batch",
    "parallelism.schedule": "choices",
    "parallelism.zero": "domain",
    "training.recompute": "choices",
}
MAXIMIZE = {"mfu", "hfu", "tokens_per_second", "tokens_per_second_per_gpu",
            "achieved_flops_per_gpu", "memory_headroom"}
METRICS = ["step_time", "mfu", "memory_per_gpu", "memory_headroom", "pipeline_bubble_fraction",
           "exposed_comm_share"]
LIMITS = {0: "compute", 1: "pipeline bubble", 2: "communication", 3: "compute; memory tight",
          4: "pipeline bubble; memory tight", 5: "communication; memory tight"}
TIGHT_MEMORY = 0.9  # share of HBM above which memory limits the choices left
OVERHEAD = 0.05  # bubble or exposed-communication share above which it limits the step


@dataclass
class SearchStats(Stats):
    gpus: list[int] = field(default_factory=list)
    axes: dict[str, int] = field(default_factory=dict)  # input -> candidates considered
    candidates: dict[str, list[float]] = field(default_factory=dict)  # input -> their codes
    factorisations: int = 0  # (gpus, tp, pp, cp, dp) rows the other axes are crossed with


class SearchResult(Table):
    """Layouts that can run and fit, best first; `.pareto` and `.recommendation` alongside."""

    objective: str = "step_time"
    descending: bool = False
    layout: list[str] = []
    pareto: Table | None = None
    pareto_objectives: list[str] = []
    recommendation: list[str] = []
    model: Any = None

    def best(self) -> dict[str, Any] | None:
        return self.head(1).rows()[0] if len(self) else None


def objective_of(model: Any, text: str, option: str = "--objective") -> tuple[str, bool]:
    """'mfu' -> ('mfu', True): the name and whether larger is better ('max:'/'min:' override)."""
    text = text.strip()
    direction = None
    if text.startswith(("max:", "min:")):
        direction, text = text[:3] == "max", text[4:].strip()
    known = [*model.order, *model.inputs]
    if text not in known:
        raise UsageError(f"{option} {text}: no such quantity{did_you_mean(text, known)}; e.g. "
                         "step_time, cost_usd, mfu, tokens_per_second, training_days, "
                         "memory_per_gpu")
    return text, (text in MAXIMIZE) if direction is None else direction


def divisors(n: int) -> list[int]:
    n = int(n)
    small = [d for d in range(1, int(n**0.5) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def search(config: str | None, gpus: int | Iterable[int] | None = None,
           objective: str = "step_time", top: int | None = None,
           pareto: str | Iterable[str] | None = None, fix: Any = (), sets: Iterable[str] = (),
           engine: Any = None, hf_config: str | None = None, max_memory: float = 1.0,
           columns: Iterable[str] = ()) -> SearchResult:
    """Rank every layout of `gpus` GPUs (one count or several) that runs and fits.

    `fix`: ["parallelism.pp=8", "training.recompute=full,selective"] limits an axis to those
    values (a key search does not vary, with several values, becomes an extra axis; with one, a
    setting). `max_memory`: share of the accelerator's memory a layout may use. `pareto`:
    objectives (e.g. "step_time,memory_per_gpu") whose Pareto front to compute. Returns every
    fitting layout ranked (`top` keeps the first K), with `.stats`, `.pareto`, `.recommendation`.
    """
    if engine is None:
        from .core import Engine

        engine = Engine()
    model = engine.model
    if not 0 < max_memory <= 1.5:
        raise UsageError(f"--max-memory {max_memory}: give the usable share of HBM, e.g. 0.9")
    obj, descending = objective_of(model, objective)
    fronts = []
    if pareto:
        names = pareto.split(",") if isinstance(pareto, str) else list(pareto)
        fronts = [objective_of(model, n, "--pareto") for n in names if n.strip()]
        if len(fronts) < 2:
            raise UsageError("--pareto needs two or more objectives, e.g. "
                             "--pareto step_time,memory_per_gpu")
    by_key = input_by_key(model)
    fixed = dict(_specs(fix, "--fix"))
    sets = list(sets)
    for key, given in list(fixed.items()):
        check_key(model, key, "--fix")
        if key == "hardware.gpus":
            raise UsageError("--fix hardware.gpus: give the GPU count with --gpus")
        if key not in by_key:  # hardware.node / model.preset
            if len(given) > 1:
                raise UsageError(f"--fix {key}: search one at a time (or compare them with "
                                 "`dlformula sweep --vary`)")
            sets.append(f"{key}={given[0]}")
            del fixed[key]
    searched = {k for k in (*DEGREES, *AXES) if k in by_key}
    for key, given in list(fixed.items()):
        if key not in searched and len(given) == 1:
            sets.append(f"{key}={_text(given[0])}")
            del fixed[key]
    if gpus is None:
        base = engine.config(config, sets, hf_config=hf_config, check_layout=False)
        gpu_counts = [int(base.values["gpus"])] if "gpus" in base.values else []
        if not gpu_counts:
            raise UsageError("give the GPU count with --gpus N")
    else:
        gpu_counts = [int(gpus)] if isinstance(gpus, (int, np.integer)) else [int(g) for g in gpus]
        if not gpu_counts or min(gpu_counts) < 1:
            raise UsageError("--gpus: give whole numbers of GPUs, e.g. --gpus 64 or "
                             "--gpus 256,512,1024")
        gpu_counts = sorted(set(gpu_counts))
        base = engine.config(config, sets + [f"hardware.gpus={gpu_counts[0]}"],
                             hf_config=hf_config, check_layout=False)
    values = dict(base.values)

    fixed_codes = {by_key[k].name: value_codes(by_key[k], v, f"--fix {k}")
                   for k, v in fixed.items()}
    axes: dict[str, np.ndarray] = {}
    for key in AXES:
        if key in by_key:
            d = by_key[key]
            axes[d.name] = fixed_codes.get(d.name, _candidates(d, AXES[key], values, by_key,
                                                               max(gpu_counts)))
    for name, codes in fixed_codes.items():
        if name not in axes and model.inputs[name].config not in DEGREES:
            axes[name] = codes
    degrees = [by_key[k].name for k in DEGREES if k in by_key]
    stats = SearchStats(gpus=gpu_counts)
    start = time.perf_counter()
    wanted = [obj, *(n for n, _ in fronts), *METRICS, "hbm_capacity", "pipeline_bubble_time",
              *columns]
    outputs = [n for n in dict.fromkeys(wanted) if n in model.quantities or n in model.inputs]
    ev = Evaluator(model, values, outputs)
    rows = _enumerate(ev, gpu_counts, degrees, fixed_codes, axes, stats)
    layout = (["gpus"] if len(gpu_counts) > 1 else []) + degrees + list(axes)
    result = _rank(ev, rows, layout, obj, descending, max_memory, stats)
    stats.seconds = time.perf_counter() - start
    result.stats = stats
    result.config = base
    result.model = model
    result.objective, result.descending, result.layout = obj, descending, layout
    if fronts:
        result.pareto = result.take(pareto_front(result, fronts))
        result.pareto_objectives = [n for n, _ in fronts]
    result.recommendation = recommend(result, values)
    if top is not None:
        result = result.head(top)  # (.pareto and .recommendation carry over)
    return result


def _text(v: Any) -> str:
    return ("true" if v else "false") if isinstance(v, bool) else str(v)


def _candidates(d: Any, rule: str, values: dict[str, Any], by_key: dict[str, Any],
                gpus: int) -> np.ndarray:
    if rule == "choices":
        return np.asarray([float(c) for _, c in d.choices])
    if rule == "domain":
        lo = d.domain.lo if d.domain.lo is not None else 0
        hi = d.domain.hi if d.domain.hi is not None else lo
        return np.arange(int(lo), int(hi) + 1, dtype=np.float64)
    if rule == "gpus":
        return np.asarray(divisors(gpus), dtype=np.float64)
    source = by_key.get(rule.split(":", 1)[1])
    n = values.get(source.name) if source is not None else None
    if n is None or n < 1 or n != int(n):
        return np.asarray([float(values.get(d.name, 1))])
    return np.asarray(divisors(int(n)), dtype=np.float64)


def _factorisations(g: int, degrees: list[str], fixed: dict[str, np.ndarray]) -> np.ndarray:
    """Rows (one column per degree) whose product is g; the last degree (dp) fills the rest."""
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


def _enumerate(ev: Evaluator, gpu_counts: list[int], degrees: list[str],
               fixed: dict[str, np.ndarray], axes: dict[str, np.ndarray],
               stats: SearchStats) -> dict[str, np.ndarray]:
    """Constraint-valid layouts, joining one axis at a time and filtering as early as the
    constraints allow. Rejections are counted for every full layout a partial row stands for."""
    model = ev.model
    varying = {"gpus", *degrees, *axes}
    deps = [set(names) & varying for names in model.constraint_names]
    parts = []
    for g in gpu_counts:
        f = _factorisations(g, degrees, fixed) if degrees else np.ones((1, 0))
        parts.append(np.column_stack([np.full(len(f), float(g)), f]))
    table = np.concatenate(parts)
    rows = {name: table[:, i] for i, name in enumerate(["gpus", *degrees])}
    present = set(rows)
    remaining = dict(axes)
    for name, cand in axes.items():
        stats.axes[name] = len(cand)
        stats.candidates[name] = cand.tolist()
    stats.factorisations = len(table)
    weight = int(np.prod([len(c) for c in remaining.values()], dtype=np.int64))
    stats.total = len(table) * weight
    done: set[int] = set()

    def apply(rows: dict[str, np.ndarray], weight: int) -> dict[str, np.ndarray]:
        which = [i for i, d in enumerate(deps) if i not in done and d <= present]
        done.update(which)
        n = len(next(iter(rows.values())))
        if not which or not n:
            return rows
        ok = ev.valid(rows, n, stats, which, weight)
        return {k: v[ok] for k, v in rows.items()} if not ok.all() else rows

    rows = apply(rows, weight)
    while remaining:
        # Join next the axis that lets the most constraints be checked (ties: fewer values).
        def gain(name: str) -> tuple[int, int]:
            now = present | {name}
            return (sum(1 for i, d in enumerate(deps) if i not in done and d <= now),
                    -len(remaining[name]))

        name = max(remaining, key=gain)
        cand = remaining.pop(name)
        weight //= len(cand)
        n = len(next(iter(rows.values())))
        rows = {k: np.repeat(v, len(cand)) for k, v in rows.items()}
        rows[name] = np.tile(cand, n)
        present.add(name)
        rows = apply(rows, weight)
    return rows


def _rank(ev: Evaluator, rows: dict[str, np.ndarray], layout: list[str], obj: str,
          descending: bool, max_memory: float, stats: SearchStats) -> SearchResult:
    model = ev.model
    n = len(next(iter(rows.values())))
    chunks: list[dict[str, np.ndarray]] = []
    no_fit = 0
    for start in range(0, n, CHUNK_SIZE):
        part = {k: v[start:start + CHUNK_SIZE] for k, v in rows.items()}
        m = len(next(iter(part.values())))
        values, _ = ev.quantities(part, m, stats)
        every = {**ev.inputs(part), **values}
        cols = {k: np.broadcast_to(np.asarray(every[k], dtype=np.float64), (m,))
                for k in ev.outputs if k in every}
        fits = cols["memory_per_gpu"] <= max_memory * cols["hbm_capacity"]
        no_fit += int(m - fits.sum())
        chunks.append({**{k: part[k] for k in layout}, **cols, "_fits": fits})
    stats.extra["do not fit in memory"] = no_fit
    merged = ({k: np.concatenate([c[k] for c in chunks]) for k in chunks[0]} if chunks
              else {k: np.empty(0) for k in layout})
    fits = np.asarray(merged.pop("_fits", np.ones(0)), dtype=bool)
    merged = {k: v[fits] for k, v in merged.items()}
    stats.kept = int(fits.sum())
    columns = {k: merged.get(k, np.empty(0)) for k in layout}
    for k in [obj, *METRICS]:
        if k in merged and k not in columns:
            columns[k] = merged[k]
    columns["limited_by"] = _limits(merged) if stats.kept else np.empty(0)
    for k, v in merged.items():  # the rest (hbm_capacity, pareto objectives, --columns)
        columns.setdefault(k, v)
    decoders = {n: {c: lab for lab, c in model.inputs[n].choices}
                for n in layout if n in model.inputs and model.inputs[n].choices}
    decoders["limited_by"] = LIMITS
    units = {**{k: d.unit for k, d in model.inputs.items()},
             **{k: q.unit for k, q in model.quantities.items()}}
    result = SearchResult(columns, decoders, units)
    if not len(result):
        return result
    keys = [np.asarray(result[c]) for c in reversed(layout)]  # simpler layouts first on ties
    keys.append(np.asarray(result["memory_per_gpu"]))
    primary = np.asarray(result[obj], dtype=np.float64)
    primary = np.where(np.isnan(primary), np.inf, -primary if descending else primary)
    keys.append(primary)
    return result.take(np.lexsort(keys))


def _limits(c: dict[str, np.ndarray]) -> np.ndarray:
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


def pareto_front(table: Table, objectives: list[tuple[str, bool]]) -> np.ndarray:
    """Indices of the rows no other row beats on every objective (each in its direction),
    ordered by the first objective."""
    if not len(table):
        return np.empty(0, dtype=np.int64)
    m = np.column_stack([-np.asarray(table[n], dtype=np.float64) if desc
                         else np.asarray(table[n], dtype=np.float64) for n, desc in objectives])
    m = np.where(np.isnan(m), np.inf, m)
    order = np.lexsort(m.T[::-1])
    front: list[int] = []
    for i in order.tolist():
        p = m[i]
        if front:
            f = m[front]
            if np.any(np.all(f <= p, axis=1)):
                continue  # dominated, or equal to a point already on the front
        front.append(i)
    return np.asarray(front, dtype=np.int64)


def recommend(result: SearchResult, values: dict[str, Any]) -> list[str]:
    """The best layout and why, in a few lines a planner can act on."""
    if not len(result):
        return _nothing_fits(result)
    best = result.head(2)
    r = {k: v[0] for k, v in best.columns.items()}

    def shown(name: str, i: int = 0) -> str:
        return human_column(best.take([i]), name)[0]

    def layout(i: int) -> str:
        return " ".join(f"{k}={shown(k, i)}" for k in result.layout)

    lines = [f"Recommended: {layout(0)}"]
    obj = result.objective
    better = "highest" if result.descending else "lowest"
    lines.append(f"- {better} {obj} ({shown(obj)}) of {len(result):,} layouts that run and fit"
                 + (f", step {shown('step_time')}" if obj != "step_time" and "step_time" in r
                    else "") + (f", MFU {shown('mfu')}" if obj != "mfu" and "mfu" in r else ""))
    if len(best) > 1:
        a, b = float(best[obj][0]), float(best[obj][1])
        gap = abs(b - a) / abs(a) * 100 if a else 0.0
        lines.append(f"- the runner-up ({layout(1)}) " + (
            f"ties on {obj}" if gap < 0.05 else
            f"is {gap:.1f} % {'lower' if result.descending else 'higher'} on {obj}"))
    lines.extend(_fabric_reasons(r, values))
    if r.get("pp", 1) > 1 and "layers" in values:
        per = values["layers"] / r["pp"]
        vpp = int(r.get("vpp", 1))
        lines.append(f"- pp={int(r['pp'])}" + (f" x vpp={vpp}" if vpp > 1 else "")
                     + f": {per:g} layers per stage; the pipeline bubble is "
                     f"{shown('pipeline_bubble_fraction')} of the busy time")
    if "memory_per_gpu" in r:
        lines.append(f"- needs {shown('memory_per_gpu')} of "
                     f"{shown('hbm_capacity') if 'hbm_capacity' in r else 'HBM'} per GPU "
                     f"({shown('memory_headroom')} headroom)")
    if "exposed_comm_share" in r:
        lines.append(f"- communication not hidden by compute: {shown('exposed_comm_share')} "
                     "of the step")
    lines.append(f"- limited by: {LIMITS[int(r['limited_by'])]}")
    lines.extend(_roomier(result))
    return lines


def _roomier(result: SearchResult) -> list[str]:
    """When the best layout nearly fills the memory, the best one that leaves room."""
    if "hbm_capacity" not in result or not len(result):
        return []
    used = np.asarray(result["memory_per_gpu"]) / np.asarray(result["hbm_capacity"])
    if used[0] < TIGHT_MEMORY:
        return []
    roomy = np.flatnonzero(used < TIGHT_MEMORY)
    if not len(roomy):
        return ["- every layout that fits uses 90 % of the memory or more: expect allocator "
                "fragmentation to matter"]
    i = int(roomy[0])
    alt = result.take([i])
    a, b = float(result[result.objective][0]), float(result[result.objective][i])
    gap = abs(b - a) / abs(a) * 100 if a else 0.0
    layout = " ".join(f"{k}={human_column(alt, k)[0]}" for k in result.layout)
    return [f"- memory is tight; the best layout under 90 % of HBM is {layout} "
            f"({human_column(alt, 'memory_per_gpu')[0]}, {gap:.1f} % "
            f"{'lower' if result.descending else 'higher'} {result.objective}; "
            "--max-memory 0.9 ranks only such layouts)"]


def _fabric_reasons(r: dict[str, Any], values: dict[str, Any]) -> list[str]:
    """Where the tensor- and context-parallel groups sit against the scale-up domain."""
    domain = values.get("scaleup_domain")
    tp, cp = int(r.get("tp", 1)), int(r.get("cp", 1))
    if not domain:
        return []
    domain = int(domain)
    if tp == 1 and cp == 1:
        return ["- no tensor or context parallelism: a stage's weights and activations fit on "
                "one GPU, so no per-layer collectives are needed"]
    group = " x ".join(f"{k}={v}" for k, v in (("tp", tp), ("cp", cp)) if v > 1)
    if tp * cp <= domain:
        return [f"- {group} keeps the per-layer collectives inside the {domain}-GPU scale-up "
                "domain (NVLink or equivalent)"]
    return [f"- {group} spans more than the {domain}-GPU scale-up domain, so per-layer "
            "collectives cross the network (no smaller group fits)"]


def _nothing_fits(result: SearchResult) -> list[str]:
    stats = result.stats
    if stats is None or not stats.total:
        return ["No layout to consider: check --fix and --gpus."]
    if stats.extra.get("do not fit in memory"):
        return ["No layout fits in memory. Try more GPUs, --fix training.recompute=full, "
                "a higher ZeRO stage, a smaller training.global_batch, or a node with more HBM."]
    top = max(stats.rejected.items(), key=lambda kv: kv[1])[0] if stats.rejected else "?"
    return [f"No layout can run: every one breaks a constraint (most often {top}); check the "
            "model shape, the batch and the GPU count (`dlformula eval` names the fix)."]
