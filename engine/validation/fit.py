"""Fitting the hardware families' figures to published runs, and checking them on runs left out.

`spec()` reads engine/validation/fit.yaml: which figures each hardware family fits (grids,
ties), the ratios several families' ties share (`shared`), the framework figures fitted over
every run they act on (`fit_framework`, after the families'), and how runs group into source
families. `collect` maps every run of the given runs files once; `fit_family` grid-searches one
family's figures over runs and `fit_families` every family's, a shared ratio with its members;
`cross_validate` fits on all runs (in-sample) and, for each source family, on all other sources
(leave-one-source-out), and returns each run's error both ways with the traits the regimes and
error bands group by.

The objective is the mean over runs of |log(predicted / target)|, each term clipped (fit.yaml),
so no single run drags a figure. Predictions are cached per run and grid point, so a full
leave-one-source-out costs one evaluation per run and point visited.
"""

from __future__ import annotations

import itertools
import math
import re
import statistics
from functools import lru_cache
from typing import Any, NamedTuple

from ..errors import ModelError, UsageError
from ..yamlfile import load_yaml
from .report import percentile, validate

REGIMES = ("≥ 4,096 GPUs", "MoE", "FP8", "CP ≥ 8", "FSDP", "Blackwell", "NVFP4")


class Family(NamedTuple):
    name: str
    nodes: tuple[str, ...]
    grids: dict[str, list[float]]  # config key -> values
    ties: dict[str, tuple[float, str]]  # config key -> (factor, other key)


class Framework(NamedTuple):
    key: str  # config key of the figure
    grid: list[float]
    runs: str  # which runs it acts on: "moe" (MoE runs) or "all"


class Shared(NamedTuple):
    name: str
    families: tuple[str, ...]
    key: str  # config key the scaled ties follow
    grid: list[float]
    written_at: float  # the ratio the member families' tie factors on `key` are written at


class Spec(NamedTuple):
    clip: float
    families: dict[str, Family]
    framework: dict[str, Framework]
    memory: dict[str, list[float]]
    sources: list[tuple[str, re.Pattern[str]]]
    shared: dict[str, Shared] = {}


class FitRun(NamedTuple):
    id: str
    file: str
    config: tuple[str, ...]
    target: float
    node: str
    family: str | None
    source: str
    traits: dict[str, Any]  # gpus, moe, precision, cp, zero, node
    values: dict[str, Any]  # every input's value for the mapped config (resolved once)


def grid(text: str) -> list[float]:
    """'lo:hi:step' -> the values from lo to hi inclusive."""
    lo, hi, step = (float(x) for x in text.split(":"))
    n = int(round((hi - lo) / step)) + 1
    return [round(lo + i * step, 6) for i in range(n)]


@lru_cache(maxsize=1)
def spec() -> Spec:
    """The shipped fit.yaml."""
    from importlib import resources

    path = resources.files("dlformula.validation") / "fit.yaml"
    return parse(path.read_text(encoding="utf-8"), str(path))


def parse(text: str, path: str) -> Spec:
    body = load_yaml(text, path, ModelError).plain()
    try:
        families = {}
        for name, f in body["families"].items():
            ties = {}
            for key, expr in (f.get("tie") or {}).items():
                factor, _, other = str(expr).partition("*")
                ties[key] = (float(factor), other.strip())
            families[name] = Family(name, tuple(f["nodes"]),
                                    {k: grid(v["grid"]) for k, v in f["fit"].items()}, ties)
        framework = {}
        for key, f in (body.get("framework") or {}).items():
            if f.get("runs", "all") not in ("moe", "all"):
                raise ValueError(f"framework figure {key}: runs must be moe or all")
            framework[key] = Framework(key, grid(f["grid"]), f.get("runs", "all"))
        memory = {k: grid(v["grid"]) for k, v in (body.get("memory") or {}).items()}
        sources = [(s["name"], re.compile(s["match"])) for s in body["sources"]]
        shared = {}
        for name, sh in (body.get("shared") or {}).items():
            members = tuple(sh["families"])
            for member in members:
                if member not in families:
                    raise ValueError(f"shared {name}: no family {member}")
                if not any(other == sh["key"] for _, other in families[member].ties.values()):
                    raise ValueError(f"shared {name}: family {member} has no tie on {sh['key']}")
            shared[name] = Shared(name, members, sh["key"], grid(sh["grid"]),
                                  float(sh["written_at"]))
        if len(taken := [m for sh in shared.values() for m in sh.families]) != len(set(taken)):
            raise ValueError("a family is a member of two shared ratios")
        return Spec(float(body["objective"]["clip"]), families, framework, memory, sources,
                    shared)
    except (AttributeError, KeyError, TypeError, ValueError, re.error) as exc:
        raise ModelError(f"{path}: malformed fit spec ({type(exc).__name__}: {exc}); see the "
                         "file's header for its form", path) from None


def source_family(text: str, sources: list[tuple[str, re.Pattern[str]]]) -> str:
    return next((name for name, pat in sources if pat.search(text)), text[:60] or "(no source)")


def collect(engine: Any, files: list[str], target: str = "step_time_s") -> list[FitRun]:
    """Every run of `files` with a `target`, mapped once."""
    from .runsfile import load_runs

    s = spec()
    family_of = {node: f.name for f in s.families.values() for node in f.nodes}
    out = []
    for path in files:
        sources = {str(r.value["id"].value): str(r.plain().get("source", ""))
                   for r in load_runs(path, []) if isinstance(r.value, dict) and "id" in r.value}
        for row in validate(engine, path)["rows"]:
            if target not in row.get("target", {}):
                continue
            config = dict(item.split("=", 1) for item in row["config"])
            node = config.get("hardware.node", "")
            traits = {"gpus": int(float(config.get("hardware.gpus", 1))),
                      "moe": float(config.get("moe.experts", 0)) > 1,
                      "precision": config.get("training.precision", "bf16"),
                      "cp": int(float(config.get("parallelism.cp", 1))),
                      "zero": int(float(config.get("parallelism.zero", 1))), "node": node}
            values = dict(engine.config(None, list(row["config"])).values)
            out.append(FitRun(row["id"], path, tuple(row["config"]), row["target"][target],
                              node, family_of.get(node), source_family(
                                  sources.get(row["id"], ""), s.sources), traits, values))
    return out


def regimes(run: FitRun) -> list[str]:
    """The regimes of the issue-12 report a run belongs to."""
    t = run.traits
    out = []
    if t["gpus"] >= 4096:
        out.append(REGIMES[0])
    if t["moe"]:
        out.append(REGIMES[1])
    if t["precision"] == "fp8":
        out.append(REGIMES[2])
    if t["cp"] >= 8:
        out.append(REGIMES[3])
    if t["zero"] >= 3:
        out.append(REGIMES[4])
    if (run.family or "").startswith("Blackwell"):  # Blackwell and Blackwell Ultra
        out.append(REGIMES[5])
    if t["precision"] == "nvfp4":
        out.append(REGIMES[6])
    return out


class Predictor:
    """A quantity of a run at a point of figures ({config key: value}), cached. The run's
    inputs are resolved once (FitRun.values); a point replaces the inputs it names, in their
    declared units (the fitted figures are dimensionless shares), and only the generated
    model runs."""

    def __init__(self, engine: Any, quantity: str = "step_time") -> None:
        self.model = engine.model
        self.quantity = quantity
        self.names = {d.config: d.name for d in engine.model.inputs.values() if d.config}
        self.caps = tie_caps(engine)
        self.cache: dict[tuple[str, tuple[tuple[str, float], ...]], float] = {}

    def __call__(self, run: FitRun, point: dict[str, float]) -> float:
        key = (run.id + run.file, tuple(sorted(point.items())))
        if key not in self.cache:
            values = {**run.values, **{self.names[k]: v for k, v in point.items()}}
            self.cache[key] = float(self.model.evaluate(values)[self.quantity])
        return self.cache[key]


def tie_caps(engine: Any) -> dict[str, float]:
    """Each input's declared upper bound by config key: a tied figure stays inside its own
    domain (a share at 1, attention_rate_ratio at 2), whatever the figure it follows. Read
    once per model (calibrate asks on every prediction); not to be modified."""
    return _upper_bounds(engine.model)


@lru_cache(maxsize=8)
def _upper_bounds(model: Any) -> dict[str, float]:
    return {d.config: d.domain.hi for d in model.inputs.values()
            if d.config and d.domain.hi is not None}


def tied(factor: float, value: float, cap: float | None) -> float:
    """FACTOR x the followed figure's value, capped at the tied input's upper bound."""
    return factor * value if cap is None else min(cap, factor * value)


def points(family: Family, caps: dict[str, float] | None = None) -> list[dict[str, float]]:
    """Every grid point of a family, ties applied (each capped at its input's upper bound in
    `caps`, config key -> bound)."""
    out = []
    for values in itertools.product(*family.grids.values()):
        point = dict(zip(family.grids, values))
        for key, (factor, other) in family.ties.items():
            point[key] = round(tied(factor, point[other], (caps or {}).get(key)), 6)
        out.append(point)
    return out


def objective(predict: Predictor, runs: list[FitRun], point: dict[str, float], clip: float,
              families: dict[str, dict[str, float]] | None = None,
              per_source: bool = False) -> float:
    """The mean over `runs` of |log(predicted / target)|, each term clipped at `clip`; each run
    predicted at its family's figures in `families` (if given) overlaid with `point`. With
    `per_source`, the mean over the runs' sources of each source's mean, so that every source
    weighs the same."""
    terms: dict[str, list[float]] = {}
    for r in runs:
        term = min(abs(math.log(predict(r, {**(families or {}).get(r.family or "", {}), **point})
                                / r.target)), clip)
        terms.setdefault(r.source if per_source else "", []).append(term)
    return sum(sum(t) / len(t) for t in terms.values()) / len(terms)


def fit_family(predict: Predictor, runs: list[FitRun], family: Family,
               clip: float) -> tuple[dict[str, float], float] | None:
    """The grid point with the lowest objective over `runs` (the family's own), or None."""
    mine = [r for r in runs if r.family == family.name]
    if not mine:
        return None
    best: tuple[float, dict[str, float]] | None = None
    for point in points(family, predict.caps):
        value = objective(predict, mine, point, clip)
        if best is None or value < best[0]:
            best = (value, point)
    assert best is not None
    return best[1], best[0]


def scaled(family: Family, shared: Shared, ratio: float) -> Family:
    """FAMILY with its ties on the shared key scaled from the ratio they are written at to
    RATIO."""
    return family._replace(ties={
        key: (factor * ratio / shared.written_at if other == shared.key else factor, other)
        for key, (factor, other) in family.ties.items()})


def fit_families(predict: Predictor, runs: list[FitRun],
                 clip: float) -> tuple[dict[str, dict[str, float]], dict[str, float]]:
    """Every family's fitted point over `runs` ({family: point}, families without runs left
    out) and each shared ratio ({name: ratio}). The members of a shared ratio are refitted at
    each of its grid values; the value whose summed objective over their runs is lowest wins."""
    s = spec()
    members = {m for sh in s.shared.values() for m in sh.families}
    out = {}
    for name, family in s.families.items():
        if name not in members and (fit := fit_family(predict, runs, family, clip)) is not None:
            out[name] = fit[0]
    ratios = {}
    for sh in s.shared.values():
        counts = {m: sum(1 for r in runs if r.family == m) for m in sh.families}
        best: tuple[float, float, dict[str, dict[str, float]]] | None = None
        for ratio in sh.grid:
            fits = {m: fit_family(predict, runs, scaled(s.families[m], sh, ratio), clip)
                    for m in sh.families}
            total = sum(fit[1] * counts[m] for m, fit in fits.items() if fit is not None)
            if best is None or total < best[0]:
                best = (total, ratio, {m: fit[0] for m, fit in fits.items() if fit is not None})
        if best is not None and best[2]:
            ratios[sh.name] = best[1]
            out.update(best[2])
    return {name: out[name] for name in s.families if name in out}, ratios


def acts_on(figure: Framework, run: FitRun) -> bool:
    return figure.runs == "all" or (figure.runs == "moe" and run.traits["moe"])


def fit_framework(predict: Predictor, runs: list[FitRun], figures: dict[str, dict[str, float]],
                  clip: float) -> dict[str, float]:
    """The framework figures (fit.yaml `framework`), each the grid value with the lowest
    objective over the runs it acts on, every run at its family's fitted figures (`figures`)
    and the framework figures fitted before it. A figure no run constrains keeps its default
    (it is left out of the point)."""
    point: dict[str, float] = {}
    for figure in spec().framework.values():
        mine = [r for r in runs if acts_on(figure, r)]
        if not mine:
            continue
        scores = [(objective(predict, mine, {**point, figure.key: value}, clip, figures,
                             per_source=True), value) for value in figure.grid]
        best = min(scores, key=lambda sv: sv[0])
        if max(s for s, _ in scores) - best[0] <= 1e-12:
            continue  # no run it acts on moves with it: the default stands
        point[figure.key] = best[1]
    return point


def run_point(run: FitRun, family_point: dict[str, float],
              framework_point: dict[str, float]) -> dict[str, float]:
    """The figures one run is predicted at: its family's, and the framework figures that act
    on it."""
    s = spec()
    return {**family_point, **{k: v for k, v in framework_point.items()
                               if k in s.framework and acts_on(s.framework[k], run)}}


def cross_validate(engine: Any, runs: list[FitRun]) -> dict[str, Any]:
    """In-sample and leave-one-source-out errors of every run of a fitted family.

    Returns {"figures": {family: point}, "framework": point, "shared": {name: ratio},
    "shared_held_out": {name: {ratio: runs held out at it}}, "runs": [{id, file, source,
    family, regimes, traits, in_sample, held_out, held_out_figures}]}; runs on nodes of no
    family keep their node files' figures both ways (`family` None)."""
    s = spec()
    predict = Predictor(engine)
    figures, ratios = fit_families(predict, runs, s.clip)
    framework = fit_framework(predict, runs, figures, s.clip)
    held: dict[tuple[str, str], tuple[float, dict[str, float] | None]] = {}
    held_ratios: dict[str, dict[float, int]] = {name: {} for name in ratios}
    for source in sorted({r.source for r in runs}):
        train = [r for r in runs if r.source != source]
        refit_figures, refit_ratios = fit_families(predict, train, s.clip)
        refit_framework = fit_framework(predict, train, refit_figures, s.clip)
        for r in runs:
            if r.source != source:
                continue
            # No other source has runs on the family: the node files' own figures.
            point = run_point(r, refit_figures.get(r.family, {}) if r.family else {},
                              refit_framework)
            held[(r.id, r.file)] = (predict(r, point) / r.target - 1, point or None)
            for sh in s.shared.values():
                if r.family in sh.families and sh.name in refit_ratios:
                    ratio = refit_ratios[sh.name]
                    held_ratios[sh.name][ratio] = held_ratios[sh.name].get(ratio, 0) + 1
    out = []
    for r in runs:
        point = run_point(r, figures.get(r.family, {}) if r.family else {}, framework)
        out.append({"id": r.id, "file": r.file, "source": r.source, "family": r.family,
                    "regimes": regimes(r), "traits": r.traits,
                    "in_sample": predict(r, point) / r.target - 1,
                    "held_out": held[(r.id, r.file)][0],
                    "held_out_figures": held[(r.id, r.file)][1]})
    return {"figures": figures, "framework": framework, "shared": ratios,
            "shared_held_out": held_ratios, "runs": out}


def summary(errors: list[float]) -> dict[str, Any]:
    """n, median and p90 of |error|, and the signed median."""
    a = [abs(e) for e in errors]
    return {"n": len(a), "median": percentile(a, 50) if a else math.nan,
            "p90": percentile(a, 90) if a else math.nan,
            "signed_median": percentile(list(errors), 50) if a else math.nan}


def read_saved(path: Any, option: str = "") -> dict[str, Any]:
    """A result bench/crossval_sources.py --save wrote (figures, framework, every run's errors);
    a UsageError naming the file (after `option`, the flag that gave it) when it is not one."""
    import json

    where = f"{option} {path}" if option else str(path)
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except OSError as e:
        raise UsageError(f"{where}: {e.strerror or e}") from None
    except ValueError as e:
        raise UsageError(f"{where}: not JSON ({e}); give a file --save wrote") from None
    if not (isinstance(data, dict) and isinstance(data.get("runs"), list) and all(
            isinstance(r, dict) and {"id", "file", "source", "regimes", "held_out"} <= r.keys()
            for r in data["runs"])):
        raise UsageError(f"{where}: not a result --save wrote (no runs with id, file, source, "
                         "regimes and held_out)")
    return data


def source_bias(runs: list[dict[str, Any]], key: str = "held_out") -> dict[str, dict[str, Any]]:
    """Each source's bias and the scatter within it: source -> {runs, bias (the median of
    log(predicted / target) over its runs, as a ratio - 1), within: [each run's error with the
    bias divided out, in the order of `runs`]}. A mechanism acting on a whole source (its
    cluster, its software release, its timing) moves its bias; only one that depends on the
    layout, model or batch moves the scatter within it."""
    logs: dict[str, list[float]] = {}
    for r in runs:
        logs.setdefault(r["source"], []).append(math.log1p(r[key]))
    out = {}
    for source, values in logs.items():
        bias = statistics.median(values)
        out[source] = {"runs": len(values), "bias": math.expm1(bias),
                       "within": [math.expm1(v - bias) for v in values]}
    return out


def bias_floor(runs: list[dict[str, Any]], min_runs: int = 3,
               key: str = "held_out") -> dict[tuple[str, str], float]:
    """(id, file) -> the run's error with its source's bias divided out, for the runs of
    sources with at least `min_runs` runs (a one-run source has no scatter by construction):
    the errors an oracle correcting every source as a whole would leave."""
    parts = source_bias(runs, key)
    return {(r["id"], r["file"]): math.expm1(math.log1p(r[key]) - math.log1p(part["bias"]))
            for r in runs if (part := parts[r["source"]])["runs"] >= min_runs}
