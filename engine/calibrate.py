"""Calibration: a hardware node fitted to a team's own measured runs.

`calibrate(engine, runs_path, base, figures)` maps every run of a runs file on node `base`
(engine/validation/fit.py's `collect`), fits the named figures of the node by least squares on
log step time -- a bounded coordinate search, golden-section on each figure in turn -- and
reports each run's error before and after, and a leave-one-out figure (each run predicted with
the figures refitted on the others). `node_yaml` writes the calibrated node: every figure of
`base` kept with its source, the fitted ones with the runs they came from and the residual.

By default the figures fitted are those the project fits to published runs for the node's
hardware family (engine/validation/fit.yaml: large-GEMM and attention efficiency, with its
ties), not every figure that could move: on ten runs of one paper, five free figures fitted
the runs' quirks and sent the paper's other runs off by +100% and more. A figure the runs
cannot determine -- one a 10% change moves by less than DETERMINED (root-sum-square of the
runs' log step times), or more figures than runs -- is refused when named, and left at the
node's value (listed) when it is a default.

The fit is cross-validated on its own runs. Of the default figures, the subset whose fit
predicts left-out runs best is fitted (fewer figures on a tie); and the fitted figures are
written only if they predict left-out runs better than the base node does (`cross_validated`),
else the node file keeps the base figures. `bench/calibrate_transfer.py` measures the effect
on the held runs of the shipped sources: 52 of 267 worse with the check, 134 without.
"""

from __future__ import annotations

import math
import os
from typing import Any, NamedTuple

from .errors import UsageError
from .resources import is_node_path

# For a node of no fitted family: the one figure that decides most step times.
DEFAULT_FIGURES = ("gemm_efficiency",)
SPAN = 10.0  # a figure is searched within a factor of SPAN of the node's value (and its domain)
DETERMINED = 0.03  # a 10% change must move the runs' log step times by this much (root-sum-square)
GOLDEN = (math.sqrt(5) - 1) / 2
MARGIN = 0.005  # the left-out median |error| must beat the base node's by half a point


class RunFit(NamedTuple):
    id: str
    target: float
    before: float
    after: float
    left_out: float | None  # prediction with the figures refitted without this run


class Calibration(NamedTuple):
    base: str
    figures: dict[str, tuple[float, float]]  # name -> (node's value, fitted value)
    runs: list[RunFit]
    dropped: list[str]  # default figures no run exercises, left at the node's value
    source: str  # the runs file
    verdict: str = ""  # why the fitted figures were kept or not (cross-validation)
    accepted: bool = True  # False: the node file keeps the base figures

    def written(self) -> dict[str, float]:
        """The figures the node file gets: the fitted ones if accepted, else the base's."""
        return {n: (after if self.accepted else before)
                for n, (before, after) in self.figures.items()}


def calibrate(engine: Any, runs_path: str, base: str,
              figures: list[str] | None = None, force: bool = False) -> Calibration:
    from .validation.fit import collect

    node = engine.catalog.node(base)  # an unknown node is a UsageError naming the known ones
    ran_on = _ran_on(base, node)
    runs = [r for r in collect(engine, [runs_path]) if r.node == ran_on]
    if not runs:
        raise UsageError(f"no run of {runs_path} with a step-time target is on node '{ran_on}'; "
                         "give the node the runs name (their hardware.gpu or hardware.node)")
    if ran_on != base:  # a calibrated file: its runs' node, predicted with the file's figures
        runs = [_on_node(engine, r, os.path.abspath(base)) for r in runs]
    named = figures is not None
    defaults, ties = _family_figures(ran_on)
    names = list(figures) if figures is not None else defaults
    inputs = {d.config: d for d in engine.model.inputs.values() if d.config}
    for name in names:
        if f"hardware.{name}" not in inputs:
            raise UsageError(f"--fit {name}: no hardware figure of that name (a hardware "
                             "input such as gemm_efficiency; `dlformula list hardware` lists "
                             "them)")
    ties = {k: t for k, t in ties.items() if t[1] in names and k not in names}
    start = {n: _value(engine, runs[0].config, n) for n in names}
    exercised = _exercised(engine, runs, start, ties)
    dropped = [n for n in names if n not in exercised]
    if named and dropped:
        raise UsageError(f"no run of {runs_path} exercises {', '.join(dropped)} enough to "
                         f"determine it (a 10% change moves the runs' step times by less than "
                         f"{DETERMINED:.0%}); leave it out of --fit")
    names = [n for n in names if n in exercised]
    if not names:
        raise UsageError(f"the runs of {runs_path} exercise none of the figures to fit")
    if named and len(runs) < len(names):
        raise UsageError(f"{len(runs)} run(s) cannot determine {len(names)} figures "
                         f"({', '.join(names)}); add runs or fit fewer with --fit")
    bounds = {n: _bounds(engine, n, start[n]) for n in names}
    subset, point, rows, ties = _choose(engine, runs, names, start, bounds, ties, named)
    fitted = {n: (start[n], point[n]) for n in subset}
    for name, value in _tied(engine, point, ties).items():
        if name not in fitted:
            fitted[name] = (_value(engine, runs[0].config, name), value)
    accepted, verdict = cross_validated(rows)
    if len(subset) < len(names):
        verdict += (f"; {', '.join(n for n in names if n not in subset)} kept at the base "
                    "node's value (fitting it too predicted left-out runs no better)")
    if force and not accepted:
        accepted, verdict = True, verdict + " -- written anyway (--force)"
    return Calibration(base, fitted, rows, dropped, runs_path, verdict, accepted)


def _choose(engine: Any, runs: list[Any], names: list[str], start: dict[str, float],
            bounds: dict[str, tuple[float, float]], ties: dict[str, tuple[float, str]],
            named: bool) -> tuple[list[str], dict[str, float], list[RunFit], dict[str, Any]]:
    """The figures to fit, their fitted values and each run's predictions. Named figures are
    fitted as named; by default every subset of the default figures the runs can determine is
    fitted and the one that predicts left-out runs best is kept (ties: fewer figures), so a
    figure joins only if it improves prediction of runs it did not see."""
    from itertools import combinations

    subsets = [names] if named else [list(c) for k in range(1, len(names) + 1)
                                     for c in combinations(names, k) if k <= len(runs)]
    best: tuple[Any, ...] | None = None
    for order, subset in enumerate(subsets):
        sub_ties = {k: t for k, t in ties.items() if t[1] in subset}
        point = _fit(engine, runs, {n: start[n] for n in subset}, bounds, sub_ties)
        rows = []
        for r in runs:
            others = [o for o in runs if o is not r]
            left_out = None
            if len(others) >= len(subset):
                left_out = _predict(engine, r, _fit(engine, others, dict(point), bounds,
                                                    sub_ties), sub_ties)
            rows.append(RunFit(r.id, r.target, _predict(engine, r, {}),
                               _predict(engine, r, point, sub_ties), left_out))
        score = _left_out_score(rows)
        key = (score is None, score or (0.0, 0.0), len(subset), order)
        if best is None or key < best[0]:
            best = (key, subset, point, rows, sub_ties)
    assert best is not None
    return best[1], best[2], best[3], best[4]


def _left_out_score(rows: list[RunFit]) -> tuple[float, float] | None:
    """(median, max) |error| of the left-out predictions, or None without two of them."""
    from .validation.stats import percentile

    errs = [abs(r.left_out / r.target - 1) for r in rows if r.left_out is not None]
    return (percentile(errs, 50), max(errs)) if len(errs) >= 2 else None


def cross_validated(rows: list[RunFit]) -> tuple[bool, str]:
    """Keep the fitted figures only if they predict the runs each was left out of better than
    the base node does: the median |error| left out at least MARGIN below the base node's, the
    worst run no worse, and more than half of the runs better. A fit that only reproduces the
    runs it saw (a base node already fitted on such runs, a handful of noisy runs) would move a
    cluster's other runs either way; the base figures are kept then. Without left-out
    predictions (too few runs) the fit stands, unchecked, and says so."""
    from .validation.stats import percentile

    pairs = [(abs(r.before / r.target - 1), abs(r.left_out / r.target - 1))
             for r in rows if r.left_out is not None]
    if len(pairs) < 2:
        return True, ("not cross-validated: too few runs to leave one out; the fitted figures "
                      "are written unchecked")
    before = percentile([b for b, _ in pairs], 50)
    left = percentile([lo for _, lo in pairs], 50)
    worst_before, worst_left = max(b for b, _ in pairs), max(lo for _, lo in pairs)
    better = sum(lo < b for b, lo in pairs)
    figures = (f"median |error| left out {left:.1%} against {before:.1%} for the base node, "
               f"worst run {worst_left:.1%} against {worst_before:.1%}, {better} of "
               f"{len(pairs)} runs better")
    if left <= before - MARGIN and worst_left <= worst_before + 1e-9 and 2 * better > len(pairs):
        return True, f"fitted figures kept: they predict runs they did not see better ({figures})"
    return False, (f"base figures kept: left out, the fitted ones do not beat the base node on "
                   f"every count -- median half a point lower, worst run no worse, most runs "
                   f"better ({figures}); add runs, or pass --force to write them anyway")


def _ran_on(base: str, node: Any) -> str:
    """The node id the runs name: `base` itself, or for a node file the node it was calibrated
    from (`derived_from`), so a calibrated node is calibrated again as more runs arrive."""
    if not is_node_path(base):
        return base
    if not node.derived_from:
        raise UsageError(f"node file '{base}' names no derived_from, so no run can be matched to "
                         "it; give --node the node id the runs ran on, or add `derived_from: "
                         "NODE` to the file")
    return str(node.derived_from)


def _on_node(engine: Any, run: Any, path: str) -> Any:
    """`run` mapped onto the node file at `path` in place of the node its hardware names: the
    file's figures, the run's own hardware settings still on top."""
    config = tuple(f"hardware.node={path}" if item.startswith("hardware.node=") else item
                   for item in run.config)
    return run._replace(config=config, node=path,
                        values=dict(engine.config(None, list(config)).values))


def _family_figures(node: str) -> tuple[list[str], dict[str, tuple[float, str]]]:
    """The figures fit.yaml fits for the node's hardware family (names without `hardware.`)
    and its ties ({figure: (factor, other figure)}); DEFAULT_FIGURES for a node of none."""
    from .validation.fit import spec

    for family in spec().families.values():
        if node in family.nodes:
            strip = lambda k: k.split(".", 1)[1]  # noqa: E731
            return ([strip(k) for k in family.grids],
                    {strip(k): (f, strip(o)) for k, (f, o) in family.ties.items()})
    return list(DEFAULT_FIGURES), {}


def _tied(engine: Any, point: dict[str, float],
          ties: dict[str, tuple[float, str]]) -> dict[str, float]:
    """The figures tied to fitted ones (attention_efficiency_fa3 = 1.75 x attention_efficiency),
    each capped at its own input's upper bound (validation.fit.tied)."""
    from .validation.fit import tie_caps, tied

    caps = tie_caps(engine)
    return {k: tied(f, point[o], caps.get(f"hardware.{k}")) for k, (f, o) in ties.items()
            if o in point}


def _bounds(engine: Any, name: str, value: float) -> tuple[float, float]:
    """Within a factor SPAN of the node's value and within the input's domain."""
    d = next(d for d in engine.model.inputs.values() if d.config == f"hardware.{name}")
    lo = max(value / SPAN, d.domain.lo if d.domain.lo is not None else 0.0, 1e-9)
    hi = min(value * SPAN if value > 0 else 1.0, d.domain.hi if d.domain.hi is not None
             else math.inf)
    return lo, max(hi, lo * 1.0001)


def _value(engine: Any, config: tuple[str, ...], name: str) -> float:
    return float(engine.evaluate(None, list(config))[name])


def _predict(engine: Any, run: Any, point: dict[str, float],
             ties: dict[str, tuple[float, str]] | None = None) -> float:
    """Step time of a mapped run with the figures of `point` (input names) replaced, and the
    figures tied to them moved with them."""
    values = {**run.values, **point, **_tied(engine, point, ties or {})}
    return float(engine.model.evaluate(values)["step_time"])


def _exercised(engine: Any, runs: list[Any], start: dict[str, float],
               ties: dict[str, tuple[float, str]]) -> set[str]:
    """The figures a 10% change of which moves the runs' log step times by DETERMINED or more
    (root-sum-square over the runs)."""
    out = set()
    for name, value in start.items():
        moved = value * 0.9 if value > 0 else 0.1
        shift = math.sqrt(sum(math.log(_predict(engine, r, {name: moved}, ties)
                                       / _predict(engine, r, {name: value}, ties)) ** 2
                              for r in runs))
        if shift >= DETERMINED:
            out.add(name)
    return out


def _loss(engine: Any, runs: list[Any], point: dict[str, float],
          ties: dict[str, tuple[float, str]]) -> float:
    return sum(math.log(_predict(engine, r, point, ties) / r.target) ** 2 for r in runs)


def _fit(engine: Any, runs: list[Any], point: dict[str, float],
         bounds: dict[str, tuple[float, float]],
         ties: dict[str, tuple[float, str]]) -> dict[str, float]:
    """Least squares on log step time, one figure at a time by golden section over the log of
    the figure within its bounds, until a round moves no figure by more than 1e-5 relative."""
    point = dict(point)
    for _ in range(30):
        moved = 0.0
        for name in point:
            def f(x: float, name: str = name) -> float:
                return _loss(engine, runs, {**point, name: math.exp(x)}, ties)

            lo, hi = bounds[name]
            best = math.exp(_golden(f, math.log(lo), math.log(hi), 1e-5))
            moved = max(moved, abs(best / point[name] - 1) if point[name] else best)
            point[name] = best
        if moved < 1e-5:
            break
    return point


def _golden(f: Any, lo: float, hi: float, tol: float = 1e-6) -> float:
    a, b = lo, hi
    c, d = b - GOLDEN * (b - a), a + GOLDEN * (b - a)
    fc, fd = f(c), f(d)
    while b - a > tol:
        if fc < fd:
            b, d, fd = d, c, fc
            c = b - GOLDEN * (b - a)
            fc = f(c)
        else:
            a, c, fc = c, d, fd
            d = a + GOLDEN * (b - a)
            fd = f(d)
    return (a + b) / 2


def node_yaml(engine: Any, cal: Calibration) -> str:
    """The calibrated node: `base`'s figures, the fitted ones replaced and annotated."""
    from .validation.stats import percentile
    from .yamlfile import dump_yaml

    node = engine.catalog.node(cal.base)
    after = [abs(r.after / r.target - 1) for r in cal.runs]
    ids = ", ".join(r.id for r in cal.runs[:12]) + (" ..." if len(cal.runs) > 12 else "")
    specs = {}
    for key, spec in node.specs.items():
        entry: dict[str, Any] = {"value": spec.value, "unit": spec.unit, "source": spec.source}
        if key in cal.figures and cal.accepted:
            before, fitted = cal.figures[key]
            entry["value"] = round(fitted, 4)
            entry["source"] = (f"calibrated by dlformula calibrate on {len(cal.runs)} run(s) of "
                               f"{cal.source} ({ids}): least squares on log step time, "
                               f"median |error| after {percentile(after, 50) * 100:.1f}%; "
                               f"{cal.base}'s value was {before:g} ({spec.source})")
        specs[key] = entry
    for key, (before, fitted) in cal.figures.items() if cal.accepted else ():
        if key not in specs:  # a figure the base file leaves at the input default
            specs[key] = {"value": round(fitted, 4), "unit": "1",
                          "source": f"calibrated by dlformula calibrate on {len(cal.runs)} "
                                    f"run(s) of {cal.source} ({ids}); the default was {before:g}"}
    # Each run's error with the figures the file gets: refitted without it if they were fitted,
    # the base node's own when the fit was not kept.
    predicted = [r.left_out if cal.accepted else r.before for r in cal.runs]
    left_out = [round(p / r.target - 1, 4) for p, r in zip(predicted, cal.runs) if p is not None]
    origin = node.derived_from or cal.base  # the node id the runs ran on
    name = engine.catalog.node(origin).name if node.derived_from else node.name
    body = {"name": f"{name}, calibrated to {cal.source}", "vendor": node.vendor,
            "notes": f"{cal.base} with {', '.join(cal.figures)} fitted to measured runs by "
                     f"dlformula calibrate; {cal.verdict}. {node.notes}".strip(),
            "derived_from": origin,
            "calibration": {"runs": [r.id for r in cal.runs], "left_out_errors": left_out},
            "specs": specs}
    return (f"# {cal.base} calibrated by `dlformula calibrate` to the runs of {cal.source}.\n"
            "# Use it as `hardware: {node: ./this-file.yaml}` in a config, or put it in a "
            "plugin's hardware/ folder.\n" + dump_yaml(body))


def report(cal: Calibration) -> str:
    """Per run: target, before, after and left-out predictions; the figures; the summary."""
    from .validation.stats import percentile

    def pct(p: float | None, t: float) -> str:
        return "-" if p is None else f"{(p / t - 1) * 100:+.1f}%"

    width = min(max(len(r.id) for r in cal.runs), 48)
    lines = [f"{'run':{width}}  {'target':>9}  {'before':>8}  {'after':>8}  {'left out':>8}"]
    for r in cal.runs:
        lines.append(f"{r.id[:width]:{width}}  {r.target:>8.3f}s  {pct(r.before, r.target):>8}  "
                     f"{pct(r.after, r.target):>8}  {pct(r.left_out, r.target):>8}")
    lines.append("")
    for name, (before, after) in cal.figures.items():
        lines.append(f"{name:24} {before:.4g} -> {after:.4g}"
                     + ("" if cal.accepted else "  (not written)"))
    for name in cal.dropped:
        lines.append(f"{name:24} kept: no run exercises it")
    for label, key in (("before", "before"), ("after", "after"), ("left out", "left_out")):
        errs = [abs(getattr(r, key) / r.target - 1) for r in cal.runs
                if getattr(r, key) is not None]
        if errs:
            lines.append(f"median |error| {label:9} {percentile(errs, 50) * 100:5.1f}%  "
                         f"(max {max(errs) * 100:.1f}%, {len(errs)} runs)")
    lines.append(cal.verdict)
    return "\n".join(lines) + "\n"
