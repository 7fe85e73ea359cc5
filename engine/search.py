"""Search: every parallel layout for N GPUs that can run and fits, ranked by an objective.

The layout space is read from the inputs the loaded model has, so a plugin that adds a degree
(expert parallelism) or a choice (pipeline schedule) is searched without a change here:

- tp, pp, cp, dp: every factorisation of the GPU count (dp fills what tp x pp x cp leave; a pp
  that does not divide the layer count gives uneven stages, see formulas/parallelism.yaml);
- vpp: divisors of the layer count; micro_batch: divisors of the global batch;
- ep: divisors of the GPU count; zero: its integer domain; recompute, schedule: every choice.

The space is the product of those candidates, but it is never built whole. First every
candidate value that breaks a constraint on its own is dropped (expert parallelism on a dense
model, a tp that does not divide the heads): the summary counts the layouts considered after
that. Then axes join one at a time (search_space.py), each constraint removing what breaks it
as soon as its inputs are present; what survives is evaluated in blocks -- memory first, the
objective only for the layouts that fit -- and ranked (search_rank.py).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .display import result_columns
from .errors import UsageError, did_you_mean
from .search_rank import (
    AUTO_TWINS,
    LIMITS,
    TIGHT_MEMORY,
    Best,
    auto_twins,
    evaluate_layouts,
    inside_domain,
    limits,
    pareto_front,
    rank_order,
)
from .search_space import Pruned, divisors, join, pruned_space, space_size
from .sweep import Evaluator, Stats, _specs, check_key, input_by_key, value_codes
from .table import Table, human_column, percent_names

__all__ = ["search", "SearchResult", "SearchStats", "divisors", "pareto_front", "recommend",
           "objective_of"]

DEGREES = ("parallelism.tp", "parallelism.pp", "parallelism.cp", "parallelism.dp")


def search_axes(model: Any) -> dict[str, str]:
    """Config key -> how search finds its candidates, from the inputs' `search:` rules (a
    plugin's input is searched like a core one): divisors of the GPU count first (they split
    the GPUs like the degrees), then the rest in the formula files' order."""
    rules = {d.config: d.search for d in model.inputs.values() if d.search and d.config}
    return dict(sorted(rules.items(), key=lambda kv: kv[1] != "gpus"))

# What the recommendation and the `limited_by` column read, beside the columns the quantities
# ask for (`column:`, display.result_columns) and the objective.
NEEDS = ("step_time", "mfu", "memory_per_gpu", "memory_headroom", "pipeline_bubble_fraction",
         "exposed_comm_share", "hbm_capacity", "pipeline_bubble_time")
LIMITED_BY = "limited_by"


@dataclass
class SearchStats(Stats):
    gpus: list[int] = field(default_factory=list)
    axes: dict[str, int] = field(default_factory=dict)  # input -> candidates considered
    candidates: dict[str, list[float]] = field(default_factory=dict)  # input -> their codes
    factorisations: int = 0  # (gpus, tp, pp, cp, dp) rows the other axes are crossed with
    space: int = 0  # layouts before pruning (every candidate of every axis)
    pruned: dict[str, Pruned] = field(default_factory=dict)  # axis -> values dropped, why

    def summary(self, noun: str = "layouts") -> str:
        text = super().summary(noun)
        dropped = [p.text(name) for name, p in self.pruned.items() if p.after < p.before]
        if not dropped:
            return text
        first, _, rest = text.partition("; ")
        return (f"{first} considered, of {self.space:,} before ruling out axis values no "
                f"layout can use ({'; '.join(dropped)})" + (f"; {rest}" if rest else ""))


class SearchResult(Table):
    """Layouts that can run and fit, best first; `.pareto` and `.recommendation` alongside.
    With `top`, only the best `top` rows are held, `.stats.kept` counting every one that fits."""

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
    q = model.quantities.get(text)  # the quantity says which way is better (`better:`)
    return text, (q is not None and q.better == "higher") if direction is None else direction


def search(config: str | None, gpus: int | Iterable[int] | None = None,
           objective: str = "step_time", top: int | None = None,
           pareto: str | Iterable[str] | None = None, fix: Any = (), sets: Any = (),
           engine: Any = None, hf_config: str | None = None, max_memory: float = 1.0,
           columns: Iterable[str] = (), workers: int | None = 1,
           scheduler: Any = None) -> SearchResult:
    """Rank every layout of `gpus` GPUs (one count or several) that runs and fits.

    `fix`: ["parallelism.pp=8", "training.recompute=full,selective"] or {"parallelism.pp": [8]}
    limits an axis to those values (a key search does not vary, with several values, becomes
    an extra axis; with one, a setting). `sets`: overrides of the config ({"training.seq_len":
    4096} or ["training.seq_len=4096"]). `max_memory`: share of the accelerator's memory a
    layout may use. `pareto`: objectives (e.g. "step_time,memory_per_gpu") whose Pareto front
    to compute. Returns every fitting layout ranked, with `.stats`, `.pareto`,
    `.recommendation`; `top` keeps only the first K (and never holds the others in memory).
    `workers` / `scheduler`: as for `sweep` (the factorisations are shared out; the answer is
    the one a single process gives).
    """
    if engine is None:
        from .core import Engine

        engine = Engine()
    from .core import typed_overrides

    model = engine.model
    if not 0 < max_memory <= 1.5:
        raise UsageError(f"--max-memory {max_memory}: give the usable share of HBM, e.g. 0.9")
    obj, descending = objective_of(model, objective)
    fronts = _fronts(model, pareto)
    base, fixed, gpu_counts = _base(engine, config, typed_overrides(sets), fix, gpus,
                                    hf_config)
    values = dict(base.values)
    by_key = input_by_key(model)
    fixed_codes = {by_key[k].name: value_codes(by_key[k], v, f"--fix {k}")
                   for k, v in fixed.items()}
    axes = _axes(model, values, by_key, fixed_codes, max(gpu_counts))
    degrees = [by_key[k].name for k in DEGREES if k in by_key]
    stats = SearchStats(gpus=gpu_counts)
    start = time.perf_counter()
    wanted = [obj, *(n for n, _ in fronts), *result_columns(model), *NEEDS, *columns]
    outputs = [n for n in dict.fromkeys(wanted) if n in model.quantities or n in model.inputs]
    ev = Evaluator(model, values, outputs)
    layout = (["gpus"] if len(gpu_counts) > 1 else []) + degrees + list(axes)
    stats.space = space_size(gpu_counts, degrees, fixed_codes, axes)
    table, axes = pruned_space(ev, gpu_counts, degrees, fixed_codes, axes, stats.pruned)
    for name, cand in axes.items():
        stats.axes[name] = len(cand)
        stats.candidates[name] = cand.tolist()
    stats.factorisations = len(table)
    stats.total = len(table) * int(np.prod([len(c) for c in axes.values()], dtype=np.int64))
    domain = _domain(model, values)
    best = Best(top, layout, obj, descending, fronts, domain)
    job = Job(values, outputs, degrees, axes, layout, max_memory, top, obj, descending, fronts,
              domain)
    from .parallel import model_spec, run_tasks, task_ranges, workers_for

    n_workers = workers_for(workers, scheduler, stats.total)
    if n_workers > 1 or scheduler is not None:
        ranges = task_ranges(len(table), 1, n_workers)
        parts = run_tasks(_search_task, (model_spec(model), job),
                          [table[lo:hi] for lo, hi in ranges], n_workers, scheduler)
    else:
        parts = iter([run_job(model, job, table)])
    for part, rows in parts:
        stats.add(part)
        if rows:
            best.add(rows)
    result = _ranked(best.merged(), model, layout, obj, descending, stats)
    stats.seconds = time.perf_counter() - start
    result.stats = stats
    result.config = base
    result.model = model
    result.objective, result.descending, result.layout = obj, descending, layout
    _add_band_columns(result, values, gpu_counts)
    if fronts:
        result.pareto = result.take(pareto_front(result, fronts))
        result.pareto_objectives = [n for n, _ in fronts]
    result.recommendation = recommend(result, values, domain)
    if top is not None:
        result = result.head(top)  # (.pareto and .recommendation carry over)
    return result


def _axes(model: Any, values: dict[str, Any], by_key: dict[str, Any],
          fixed_codes: dict[str, np.ndarray], gpus: int) -> dict[str, np.ndarray]:
    """Each searched input's candidates (its `search:` rule, or what --fix gives), and the
    --fix values of inputs search does not vary."""
    axes: dict[str, np.ndarray] = {}
    for key, rule in search_axes(model).items():
        d = by_key[key]
        axes[d.name] = fixed_codes.get(d.name, _candidates(d, rule, values, by_key, gpus))
    for name, codes in fixed_codes.items():
        if name not in axes and model.inputs[name].config not in DEGREES:
            axes[name] = codes
    return axes


@dataclass
class Job:
    """What a process needs to search part of the factorisation table (plain data)."""

    values: dict[str, Any]
    outputs: list[str]
    degrees: list[str]
    axes: dict[str, np.ndarray]
    layout: list[str]
    max_memory: float
    top: int | None
    obj: str
    descending: bool
    fronts: list[tuple[str, bool]]
    domain: int | None  # the config's scale-up domain (formulas/hardware.yaml scaleup_ranks)


def run_job(model: Any, job: Job, table: np.ndarray) -> tuple[SearchStats, dict[str, Any]]:
    """Join, check and evaluate the layouts of these factorisation rows: their counts and the
    rows that can be in the answer."""
    stats = SearchStats()
    ev = Evaluator(model, job.values, job.outputs)
    twins = auto_twins(model, job.axes)
    fit = Evaluator(model, job.values, ["memory_per_gpu", "hbm_capacity"]
                    + (["full_recompute_share"] if twins else []))
    best = Best(job.top, job.layout, job.obj, job.descending, job.fronts, job.domain)
    rows = join(ev, table, job.degrees, job.axes, stats)
    valid, no_fit = evaluate_layouts(fit, ev, rows, job.layout, job.max_memory, best, stats,
                                     twins)
    stats.extra["do not fit in memory"] = no_fit
    stats.kept = valid - no_fit - stats.extra.get(AUTO_TWINS, 0)
    return stats, best.merged()


def _search_task(payload: Any, table: np.ndarray) -> tuple[SearchStats, dict[str, Any]]:
    from .parallel import model_of

    spec, job = payload
    return run_job(model_of(spec), job, table)


def _fronts(model: Any, pareto: str | Iterable[str] | None) -> list[tuple[str, bool]]:
    if not pareto:
        return []
    names = pareto.split(",") if isinstance(pareto, str) else list(pareto)
    fronts = [objective_of(model, n, "--pareto") for n in names if n.strip()]
    if len(fronts) < 2:
        raise UsageError("--pareto needs two or more objectives, e.g. "
                         "--pareto step_time,memory_per_gpu")
    return fronts


def _base(engine: Any, config: str | None, overrides: dict[str, Any], fix: Any,
          gpus: int | Iterable[int] | None, hf_config: str | None
          ) -> tuple[Any, dict[str, list[Any]], list[int]]:
    """The base config (with the settings --fix makes), the axes --fix limits, the GPU
    counts."""
    model = engine.model
    by_key = input_by_key(model)
    fixed = dict(_specs(fix, "--fix"))
    for key, given in list(fixed.items()):
        check_key(model, key, "--fix")
        if key == "hardware.gpus":
            raise UsageError("--fix hardware.gpus: give the GPU count with --gpus")
        if key not in by_key:  # hardware.node / model.preset
            if len(given) > 1:
                raise UsageError(f"--fix {key}: search one at a time (or compare them with "
                                 "`dlformula sweep --vary`)")
            overrides[key] = given[0]
            del fixed[key]
    searched = {k for k in (*DEGREES, *search_axes(model)) if k in by_key}
    for key, given in list(fixed.items()):
        if key not in searched and len(given) == 1:
            overrides[key] = given[0]
            del fixed[key]
    if gpus is None:
        base = engine.config(config, overrides, hf_config=hf_config, check_layout=False)
        gpu_counts = [int(base.values["gpus"])] if "gpus" in base.values else []
        if not gpu_counts:
            raise UsageError("give the GPU count with --gpus N")
        return base, fixed, gpu_counts
    gpu_counts = [int(gpus)] if isinstance(gpus, (int, np.integer)) else [int(g) for g in gpus]
    if not gpu_counts or min(gpu_counts) < 1:
        raise UsageError("--gpus: give whole numbers of GPUs, e.g. --gpus 64 or "
                         "--gpus 256,512,1024")
    gpu_counts = sorted(set(gpu_counts))
    base = engine.config(config, {**overrides, "hardware.gpus": gpu_counts[0]},
                         hf_config=hf_config, check_layout=False)
    return base, fixed, gpu_counts


def _domain(model: Any, values: dict[str, Any]) -> int | None:
    """The scale-up domain the config builds: the formulas' scaleup_ranks (the node's domain,
    or the server's own GPUs when the fabric ends at the server's board)."""
    ev = Evaluator(model, values, ["scaleup_ranks"])
    with np.errstate(all="ignore"):
        domain = ev.evaluate(ev.inputs({}))["scaleup_ranks"]
    return int(domain) if domain else None


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


def _ranked(merged: dict[str, np.ndarray], model: Any, layout: list[str], obj: str,
            descending: bool, stats: SearchStats) -> SearchResult:
    """The kept rows as a SearchResult in rank order, with the `limited_by` column."""
    count = len(next(iter(merged.values()))) if merged else 0
    columns = {k: merged.get(k, np.empty(0)) for k in layout}
    for k in [obj, *result_columns(model)]:
        if k in merged and k not in columns:
            columns[k] = merged[k]
    columns[LIMITED_BY] = limits(merged) if count else np.empty(0)
    for k, v in merged.items():  # the rest (hbm_capacity, pareto objectives, --columns)
        columns.setdefault(k, v)
    decoders = {n: {c: lab for lab, c in model.inputs[n].choices}
                for n in layout if n in model.inputs and model.inputs[n].choices}
    decoders[LIMITED_BY] = LIMITS
    units = {**{k: d.unit for k, d in model.inputs.items()},
             **{k: q.unit for k, q in model.quantities.items()}}
    result = SearchResult(columns, decoders, units, percent=percent_names(model))
    if not count:
        return result
    return result.take(rank_order(result.columns, layout, obj, descending))


# Recompute modes only one framework offers (formulas/training.yaml, training.recompute).
ONE_FRAMEWORK_RECOMPUTE = {"op": "torchtitan's per-op checkpointing policy",
                           "save_qkv_proj": "MaxText's JAX remat policy",
                           "save_dots": "MaxText's JAX remat policy",
                           "save_weight_dots": "JAX's checkpoint_dots_with_no_batch_dims policy"}


def recommend(result: SearchResult, values: dict[str, Any], domain: int | None) -> list[str]:
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
    count = result.stats.kept if result.stats is not None else len(result)
    lines.append(f"- {better} {obj} ({shown(obj)}) of {count:,} layouts that run and fit"
                 + (f", step {shown('step_time')}" if obj != "step_time" and "step_time" in r
                    else "") + (f", MFU {shown('mfu')}" if obj != "mfu" and "mfu" in r else ""))
    if len(best) > 1:
        a, b = float(best[obj][0]), float(best[obj][1])
        gap = abs(b - a) / abs(a) * 100 if a else 0.0
        lines.append(f"- the runner-up ({layout(1)}) " + (
            f"ties on {obj}" if gap < 0.05 else
            f"is {gap:.1f} % {'lower' if result.descending else 'higher'} on {obj}"))
    lines.append(_band_line(result, values))
    lines.extend(_fabric_reasons(r, domain, result))
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
    mode = shown("recompute") if "recompute" in r else None
    if mode in ONE_FRAMEWORK_RECOMPUTE:
        lines.append(f"- recompute={mode} is {ONE_FRAMEWORK_RECOMPUTE[mode]}, which other "
                     "frameworks do not have; --fix training.recompute=none,selective,full,auto "
                     "keeps to the others")
    lines.extend(_roomier(result))
    return lines


# Each row's error band as the step time it allows, in seconds: the measured step time of 9
# comparable validated runs in 10 fell between low and high times their estimate
# (dlformula.validation.bands.step_range); NaN (an empty cell) where no run is comparable or,
# for `high`, where the band bounds nothing above.
BAND_COLUMNS = ("step_time_low", "step_time_high", "step_time_low_new_source",
                "step_time_high_new_source")


def _band_keys(result: SearchResult, values: dict[str, Any],
               gpu_counts: list[int]) -> tuple[np.ndarray, Any]:
    """Each row's (GPU count, precision code, ZeRO stage) as an n x 3 array -- what its error
    band depends on besides the node and the model, which a search holds fixed -- and a
    function turning a row of it into band_for's values."""
    n = len(result)
    labels = result.config.labels if result.config is not None else {}
    base_precision = labels.get("precision", values.get("precision"))
    decoder = result.decoders.get("precision", {})
    keys = np.empty((n, 3))
    keys[:, 0] = result["gpus"] if "gpus" in result else gpu_counts[0]
    keys[:, 1] = result["precision"] if "precision" in result else -1  # -1: the config's
    keys[:, 2] = result["zero"] if "zero" in result else float(values.get("zero", 0) or 0)

    def band_values(key: np.ndarray) -> dict[str, Any]:
        precision = base_precision if key[1] < 0 else decoder.get(int(key[1]), key[1])
        return {**values, "gpus": int(key[0]), "precision": precision, "zero": float(key[2])}

    return keys, band_values


def _band(result: SearchResult, band_values: dict[str, Any]) -> Any:
    from .validation.bands import band_for

    return band_for(band_values, result.config.node if result.config is not None else None)


def _add_band_columns(result: SearchResult, values: dict[str, Any],
                      gpu_counts: list[int]) -> None:
    """Each layout's step-time error band (dlformula.validation.bands) as the range of step
    time it allows, in seconds (BAND_COLUMNS): from the 90% band of the comparable validated
    runs' held-out errors and of their first, blind predictions (NaN, an empty cell, where there
    is none). A band depends on the GPU count, precision and ZeRO stage, so it is looked up once
    per combination the rows hold, not per row."""
    keys, band_values = _band_keys(result, values, gpu_counts)
    # one code per distinct row of keys: each column's own codes, combined (np.unique over
    # rows, axis=0, sorts the rows and took a second on a million layouts)
    parts = [np.unique(keys[:, j], return_inverse=True) for j in range(keys.shape[1])]
    codes = np.ravel_multi_index([inv.reshape(-1) for _, inv in parts],
                                 [max(len(u), 1) for u, _ in parts])
    combos, first, inverse = np.unique(codes, return_index=True, return_inverse=True)
    from .validation.bands import step_range

    ratios = np.full((len(combos), len(BAND_COLUMNS)), np.nan)  # multiples of the estimate
    for i, row in enumerate(first.tolist()):
        band = _band(result, band_values(keys[row]))
        if band is not None:
            ratios[i, 0:2] = step_range(band.width)
            if band.width_new_source is not None:
                ratios[i, 2:4] = step_range(band.width_new_source)
    ratios[np.isinf(ratios)] = np.nan  # a band that bounds nothing above: an empty cell
    # an empty result has no columns; every search row otherwise carries step_time (NEEDS)
    step = np.asarray(result.columns.get("step_time", np.full(len(result), np.nan)),
                      dtype=float)
    inverse = inverse.reshape(-1)
    for j, name in enumerate(BAND_COLUMNS):
        result.columns[name] = ratios[inverse, j] * step
    result.units.update(dict.fromkeys(BAND_COLUMNS, "s"))


def _band_line(result: SearchResult, values: dict[str, Any]) -> str:
    """How far validated runs like the best layout were off (dlformula.validation.bands)."""
    gpu_counts = result.stats.gpus if result.stats is not None else []
    band = None
    if len(result):
        best = result.head(1)
        keys, band_values = _band_keys(best, values, gpu_counts or [int(values.get("gpus", 1))])
        band = _band(result, band_values(keys[0]))
    if band is None:
        return "- step-time error band: no comparable validated run"
    step = float(best["step_time"][0])
    return "- step-time error band: " + band.text(lambda x: f"{x * step:#.4g} s")


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


def _fabric_reasons(r: dict[str, Any], domain: int | None, result: SearchResult) -> list[str]:
    """Where the tensor- and context-parallel groups sit against the scale-up domain (and,
    when the best one spans it, the best layout whose group does not)."""
    tp, cp = int(r.get("tp", 1)), int(r.get("cp", 1))
    if not domain:
        return []
    if tp == 1 and cp == 1:
        return ["- no tensor or context parallelism: a stage's weights and activations fit on "
                "one GPU, so no per-layer collectives are needed"]
    group = " x ".join(f"{k}={v}" for k, v in (("tp", tp), ("cp", cp)) if v > 1)
    if tp * cp <= domain:
        return [f"- {group} keeps the per-layer collectives inside the {domain}-GPU scale-up "
                "domain (NVLink or equivalent)"]
    text = (f"- {group} spans more than the {domain}-GPU scale-up domain, so per-layer "
            "collectives cross the network")
    inside = np.flatnonzero(inside_domain(result.columns, domain))
    if not len(inside):
        return [text + " (no layout whose group fits in the domain runs and fits in memory)"]
    i = int(inside[0])
    alt = result.take([i])
    a, b = float(result[result.objective][0]), float(result[result.objective][i])
    gap = abs(b - a) / abs(a) * 100 if a else 0.0
    shown = " ".join(f"{k}={human_column(alt, k)[0]}" for k in result.layout)
    return [text + f"; the best layout whose group fits it, {shown}, is {gap:.1f} % "
            f"{'lower' if result.descending else 'higher'} on {result.objective}"]


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
