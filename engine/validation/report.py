"""Predicting the runs of a runs file and saying how close the predictions are.

`validate` evaluates each row's mapped config (mapping.py) with the engine and compares with
its `target` block (`step_time_s`, `memory_gib_peak`, `layer_fwd_bwd_ms`); `to_table` and
`to_json` present the report. A row the model cannot express is listed with the reason, never
dropped.
"""

from __future__ import annotations

import fnmatch
import math
from typing import Any

from ..errors import DlfError, UsageError, display_path, raise_all
from .mapping import Skip, map_row
from .runsfile import Row, load_runs

# target key -> (quantity, factor from the quantity's SI unit to the target's unit, label)
TARGETS: dict[str, tuple[str, float, str]] = {
    "step_time_s": ("step_time", 1.0, "step time (s)"),
    "memory_gib_peak": ("memory_per_gpu", 1.0 / 2**30, "peak memory (GiB)"),
    "layer_fwd_bwd_ms": ("layer_microbatch_time", 1e3, "layer fwd+bwd (ms)"),
}

# -- predicting and comparing -------------------------------------------------------------------

def predict(engine: Any, sets: list[str]) -> dict[str, float]:
    """The figures TARGETS names, for one mapped config."""
    result = engine.evaluate(None, sets)
    return {key: float(result[q]) * factor for key, (q, factor, _) in TARGETS.items()}


def _matches(rid: str, pattern: str | None) -> bool:
    if not pattern:
        return True
    if any(c in pattern for c in "*?["):
        return fnmatch.fnmatchcase(rid, pattern)
    return pattern in rid


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0-100) with linear interpolation between ranks (NumPy's default)."""
    if not values:
        return math.nan
    s = sorted(values)
    pos = (len(s) - 1) * q / 100
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


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
    out["skipped"] = sum(1 for r in rows if "skipped" in r)
    return out


def validate(engine: Any, path: str, only: str | None = None) -> dict[str, Any]:
    """Predict every run of the runs file at `path` and compare with its targets.

    Returns {"rows": [...], "summary": {...}}: each row either
    {"id", "predicted", "target", "rel_error", "config", "assumptions"} or {"id", "skipped"}.
    """
    errors: list[DlfError] = []
    runs = load_runs(path, errors)
    dpath = display_path(path)
    known = {d.config for d in engine.model.inputs.values() if d.config}
    catalog = engine.catalog
    node_ids = catalog.node_ids()
    node_hbm = _hbm_specs(catalog, node_ids)
    rows: list[dict[str, Any]] = []
    for located in runs:
        row = Row(located, dpath, errors)
        if not _matches(row.id, only):
            continue
        targets = _targets(row)
        if not targets:
            rows.append({"id": row.id, "skipped": "the row has no target (step_time_s, "
                         "memory_gib_peak or layer_fwd_bwd_ms) to compare with"})
            continue
        n_errors = len(errors)
        try:
            mapped = map_row(row, known, node_ids, node_hbm)
        except Skip as exc:
            rows.append({"id": row.id, "skipped": str(exc)})
            continue
        if len(errors) > n_errors:
            continue  # a malformed field: reported below with its line
        try:
            predicted = predict(engine, mapped.sets)
        except DlfError as exc:
            reason = "; ".join(getattr(e, "message", str(e)) for e in _errors_of(exc))
            rows.append({"id": row.id, "skipped": f"cannot evaluate: {reason}"})
            continue
        except (ArithmeticError, ValueError) as exc:  # a formula bug: keep the other rows
            rows.append({"id": row.id, "skipped": f"evaluation failed ({type(exc).__name__}: "
                         f"{exc}); this is a dlformula bug"})
            continue
        bad = [k for k in targets if not math.isfinite(predicted[k])]
        if bad:
            rows.append({"id": row.id, "skipped": f"the model gives a non-finite {bad[0]}"})
            continue
        pred = {k: predicted[k] for k in targets}
        rel = {k: (pred[k] - targets[k]) / targets[k] for k in targets}
        rows.append({"id": row.id, "predicted": pred, "target": targets, "rel_error": rel,
                     "config": mapped.sets, "assumptions": mapped.assumptions})
    raise_all(sorted(errors, key=lambda e: e.line or 0))
    if only and not rows:
        raise UsageError(f"--only '{only}' matches no run id in {dpath}")
    return {"rows": rows, "summary": summarize(rows)}


def _hbm_specs(catalog: Any, node_ids: list[str]) -> dict[str, tuple[float, str]]:
    out = {}
    for node_id in node_ids:
        spec = catalog.node(node_id).specs.get("hbm_capacity")
        if spec is not None:
            out[node_id] = (float(spec.value), spec.unit)
    return out


def _errors_of(exc: DlfError) -> list[DlfError]:
    return list(getattr(exc, "errors", [exc]))


def _targets(row: Row) -> dict[str, float]:
    out = {}
    for key in TARGETS:
        v = row.number(f"target.{key}")
        if v is not None and v > 0:
            out[key] = float(v)
    return out


# -- presenting ---------------------------------------------------------------------------------

def _pct(e: float) -> str:
    return f"{e * 100:+.1f}%"


def to_table(report: dict[str, Any]) -> str:
    """Rows with predicted / target and the relative error, the skipped rows, the summary."""
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
    return "\n".join(lines) + "\n"


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
