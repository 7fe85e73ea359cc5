"""Predicting the runs of a runs file and saying how close the predictions are.

`validate` evaluates each row's mapped config (mapping.py) with the engine and compares with
its `target` block (`step_time_s`, `memory_gib_peak`, `layer_fwd_bwd_ms`); `to_table` and
`to_json` present the report. A row the model cannot express is listed with the reason, never
dropped.
"""

from __future__ import annotations

import fnmatch
import math
import re
from typing import Any

from ..errors import DlfError, UsageError, display_path
from .mapping import Context, Invalid, Skip, check_types, map_row
from .runsfile import Row, load_runs
from .stats import percentile

# target key -> (quantity, factor from the quantity's SI unit to the target's unit, label)
TARGETS: dict[str, tuple[str, float, str]] = {
    "step_time_s": ("step_time", 1.0, "step time (s)"),
    "memory_gib_peak": ("memory_per_gpu", 1.0 / 2**30, "peak memory (GiB)"),
    "layer_fwd_bwd_ms": ("layer_microbatch_time", 1e3, "layer fwd+bwd (ms)"),
}

# -- predicting and comparing -------------------------------------------------------------------

def predict(engine: Any, sets: list[str]) -> dict[str, float]:
    """The figures TARGETS names, for one mapped config."""
    return _figures(engine.evaluate(None, sets))


def _matches(rid: str, pattern: str | None) -> bool:
    if not pattern:
        return True
    if any(c in pattern for c in "*?["):
        return fnmatch.fnmatchcase(rid, pattern)
    return pattern in rid


def summarize(rows: list[dict[str, Any]], worst: int = 5) -> dict[str, Any]:
    """Per target: n, median, p90, mean and max of |relative error|, and the worst rows."""
    out: dict[str, Any] = {}
    for key in TARGETS:
        errs = [(r["id"], r["rel_error"][key]) for r in rows
                if "rel_error" in r and key in r["rel_error"]]
        if not errs:
            continue
        abs_errs = [abs(e) for _, e in errs]
        signed = [e for _, e in errs]
        ranked = sorted(errs, key=lambda x: -abs(x[1]))[:worst]
        out[key] = {"n": len(errs), "median_abs": percentile(abs_errs, 50),
                    "p90_abs": percentile(abs_errs, 90), "max_abs": max(abs_errs),
                    "mean_abs": sum(abs_errs) / len(abs_errs),
                    "median_signed": percentile(signed, 50),
                    "worst": [{"id": i, "rel_error": e} for i, e in ranked]}
    # Every published run ran, so its peak fitted in its GPU's memory: a predicted peak above
    # the capacity is a miss of the memory model (or of what the run leaves out).
    shares = [(r["id"], r["memory_share"]) for r in rows if "memory_share" in r]
    over = sorted(((i, m) for i, m in shares if m > 1), key=lambda x: -x[1])
    out["over_memory"] = {"n": len(over), "of": len(shares),
                          "worst": [{"id": i, "memory_share": m} for i, m in over[:worst]]}
    out["skipped"] = sum(1 for r in rows if "skipped" in r)
    return out


def validate(engine: Any, path: str, only: str | None = None) -> dict[str, Any]:
    """Predict every run of the runs file at `path` and compare with its targets.

    Returns {"rows": [...], "summary": {...}, "errors": [...]}: each row either
    {"id", "predicted", "target", "rel_error", "config", "assumptions"} or {"id", "skipped"};
    each error {"path", "line", "message"} is a run that could not be read (the others are
    still predicted). A file that is not a list of runs raises UsageError.
    """
    errors: list[DlfError] = []
    runs = load_runs(path, errors)
    dpath = display_path(path)
    ctx = context(engine)
    rows: list[dict[str, Any]] = []
    for located in runs:
        row = Row(located, dpath, errors)
        if not _matches(row.id, only):
            continue
        targets = _targets(row)
        if targets is None:
            check_types(row)  # report the run's other malformed fields with it
            continue
        if not targets:
            rows.append({"id": row.id, "skipped": "the row has no target (step_time_s, "
                         "memory_gib_peak or layer_fwd_bwd_ms) to compare with"})
            continue
        predicted = _predict_row(engine, row, ctx, targets)
        if predicted is not None:  # None: malformed, reported with its lines
            rows.append(predicted)
    if only and not rows and not errors:
        raise UsageError(f"--only '{only}' matches no run id in {dpath}")
    errors.sort(key=lambda e: e.line or 0)
    return {"rows": rows, "summary": summarize(rows),
            "errors": [{"path": e.path, "line": e.line, "message": e.message} for e in errors]}


def context(engine: Any) -> Context:
    """What the mapping needs from `engine`: its inputs, nodes, and the layout search."""
    from .feasible import best_feasible

    inputs = {d.config: d for d in engine.model.inputs.values() if d.config}
    node_ids = engine.catalog.node_ids()
    per_node = {n: int(s.value) for n in node_ids
                if (s := engine.catalog.node(n).specs.get("gpus_per_node")) is not None}
    vendors = {n: engine.catalog.node(n).vendor for n in node_ids}
    return Context(inputs, node_ids, _hbm_specs(engine.catalog, node_ids),
                   lambda sets, knobs: best_feasible(engine, sets, knobs), node_gpus=per_node,
                   node_vendor=vendors)


def _predict_row(engine: Any, row: Row, ctx: Context,
                 targets: dict[str, float]) -> dict[str, Any] | None:
    try:
        mapped = map_row(row, ctx)
    except Skip as exc:
        return {"id": row.id, "skipped": str(exc)}
    except Invalid:
        return None  # reported with its lines
    try:
        result = engine.evaluate(None, mapped.values)
    except DlfError as exc:  # the layout or a value the run states cannot run: bad input
        reason = "; ".join(getattr(e, "message", str(e)) for e in _errors_of(exc))
        row.errors.append(UsageError(
            f"run '{row.id}': the config it states cannot run: {reason.rstrip('.')}; fix the "
            f"run (`dlformula validate {row.path} --show {row.id}` prints its config)", row.path,
            row.line))
        return None
    except (ArithmeticError, ValueError) as exc:  # a formula bug: keep the other rows
        return {"id": row.id, "skipped": f"evaluation failed ({type(exc).__name__}: {exc}); "
                "this is a dlformula bug"}
    predicted = _figures(result)
    bad = [k for k in targets if not math.isfinite(predicted[k])]
    if bad:
        return {"id": row.id, "skipped": f"the model gives a non-finite {bad[0]}"}
    notes = mapped.assumptions + _stages(result)
    if "step_time_s" in targets and wall_clock_target(row):
        # Compare steady state with steady state: the run's average over its wall-clock time
        # includes interruptions, which goodput_share estimates (formulas/time.yaml).
        share = float(result["goodput_share"])
        notes.append(f"target.step_time_s {targets['step_time_s']:g} s is a wall-clock average "
                     f"(interruptions included): compared as {share:.3f} x that, the "
                     f"steady-state share goodput_share gives")
        targets = {**targets, "step_time_s": targets["step_time_s"] * share}
    pred = {k: predicted[k] for k in targets}
    rel = {k: (pred[k] - targets[k]) / targets[k] for k in targets}
    return {"id": row.id, "predicted": pred, "target": targets, "rel_error": rel,
            "memory_share": float(result["hbm_capacity_used"]),
            "config": mapped.sets, "assumptions": notes}


# A target basis that says the run's time includes its stalls: total time over steps.
WALL_CLOCK = re.compile(r"wall[- ]?clock|includ\w* (?:all )?(?:restarts|failures|interruptions|"
                        r"stalls|downtime)|end[- ]to[- ]end (?:run|training) time|total "
                        r"(?:training |run )?(?:time|days|duration)|calendar", re.I)


def wall_clock_target(row: Row) -> bool:
    """True when the run's step-time target averages its wall-clock time, stalls included:
    `target.basis_kind: wall_clock`, or a `target.basis` that says so."""
    kind = (row.text("target.basis_kind") or "").strip().lower().replace("-", "_")
    if kind in ("wall_clock", "wallclock", "steady_state", "steady"):
        return kind.startswith("wall")
    return bool(WALL_CLOCK.search(row.text("target.basis") or ""))


def _figures(result: Any) -> dict[str, float]:
    return {key: float(result[q]) * factor for key, (q, factor, _) in TARGETS.items()}


def _stages(result: Any) -> list[str]:
    """How the formulas split uneven pipeline stages (formulas/parallelism.yaml), as a note."""
    try:
        layers, pp = int(result["layers"]), int(result["pp"])
        first, last = int(result["layers_first_stage"]), int(result["layers_last_stage"])
        middle = int(result["layers_middle_stage"])
    except KeyError:
        return []
    if pp < 2 or layers % pp == 0:
        return []
    chunks = f" (all {int(result['vpp'])} model chunks of a GPU together)" \
        if result["vpp"] > 1 else ""
    return [f"{layers} layers over {pp} stages{chunks}: {first} on the first, {last} on the "
            f"last, {middle} on each other stage (formulas/parallelism.yaml)"]


def _hbm_specs(catalog: Any, node_ids: list[str]) -> dict[str, tuple[float, str]]:
    out = {}
    for node_id in node_ids:
        spec = catalog.node(node_id).specs.get("hbm_capacity")
        if spec is not None:
            out[node_id] = (float(spec.value), spec.unit)
    return out


def _errors_of(exc: DlfError) -> list[DlfError]:
    return list(getattr(exc, "errors", [exc]))


def _targets(row: Row) -> dict[str, float] | None:
    """The run's targets; None when one is malformed (reported with its line)."""
    out = {}
    problems = row.problems
    for key in TARGETS:
        item = row.get(f"target.{key}")
        v = row.number(f"target.{key}", minimum=-math.inf)
        if v is not None and v > 0:
            out[key] = float(v)
        elif v is not None and item is not None:
            row.bad(f"target.{key}", item, "a positive number")
    return None if row.problems > problems else out


# -- presenting ---------------------------------------------------------------------------------

def _pct(e: float) -> str:
    return f"{e * 100:+.1f}%"


def to_table(report: dict[str, Any]) -> str:
    """Rows with predicted / target and the relative error, the skipped rows, the summary."""
    if not report["rows"]:
        return "no run to report (each was malformed: see the errors)\n"
    lines: list[str] = []
    done = [r for r in report["rows"] if "skipped" not in r]
    skipped = [r for r in report["rows"] if "skipped" in r]
    width = min(max([len(r["id"]) for r in report["rows"]] + [3]), 48)
    cols = [k for k in TARGETS if any(k in r["target"] for r in done)]
    if done:
        lines.append(f"{'run':{width}}" + "".join(f"  {TARGETS[k][2]:>26}" for k in cols))
        lines.append(f"{'':{width}}" + "".join(f"  {'predicted / target  error':>26}"
                                                 for _ in cols))
        for r in done:
            line = f"{r['id'][:width]:{width}}"
            for key in cols:
                cell = "-"
                if key in r["target"]:
                    cell = (f"{_num(r['predicted'][key])} / {_num(r['target'][key])}  "
                            f"{_pct(r['rel_error'][key]):>7}")
                line += f"  {cell:>26}"
            lines.append(line.rstrip())
    if skipped:
        lines += ["", f"skipped ({len(skipped)}):"]
        lines += [f"  {r['id']}: {r['skipped']}" for r in skipped]
    if done:
        lines += ["", "summary of |relative error|:"]
    for key in TARGETS:
        s = report["summary"].get(key)
        if not s:
            continue
        lines.append(f"  {TARGETS[key][2]:20} n={s['n']:<3} median {s['median_abs'] * 100:5.1f}%"
                     f"  p90 {s['p90_abs'] * 100:5.1f}%  max {s['max_abs'] * 100:5.1f}%"
                     f"  mean {s['mean_abs'] * 100:5.1f}%  (median signed "
                     f"{_pct(s['median_signed'])})")
        worst = ", ".join(f"{w['id']} {_pct(w['rel_error'])}" for w in s["worst"])
        lines.append(f"  {'':20} worst: {worst}")
    over = report["summary"].get("over_memory")
    if over and over["n"]:
        worst = ", ".join(f"{w['id']} {w['memory_share'] * 100:.0f}%" for w in over["worst"])
        lines += ["", f"memory: {over['n']} of {over['of']} runs ran, but the model puts their "
                  f"peak above their GPU's memory (memory_per_gpu / hbm_capacity; worst: "
                  f"{worst})"]
    return "\n".join(lines).lstrip("\n") + "\n"


def _num(v: float) -> str:
    if v >= 100:
        return f"{v:,.1f}"
    if v >= 10:
        return f"{v:.2f}"
    return f"{v:.3f}"


def to_json(report: dict[str, Any]) -> str:
    import json

    return json.dumps(report, indent=2, allow_nan=False, default=_json_default) + "\n"


def _json_default(v: Any) -> Any:
    if hasattr(v, "item"):
        return v.item()
    raise TypeError(f"not JSON serialisable: {type(v).__name__}")
