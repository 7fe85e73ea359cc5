"""Presenting results: human units for people, SI numbers for programs.

`human()` picks a readable unit from a value's dimension (GiB, TFLOP/s, ms, days, ...). The
table groups quantities by formula file and puts the key results first; JSON, CSV and YAML carry
raw values in each quantity's declared unit (SI base units for all but the few whose name says
otherwise: training_days, gpu_hours, cost_usd, energy_kwh).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from .errors import display_path
from .humanize import human
from .units import parse_unit

if TYPE_CHECKING:
    from .core import Result


def _matches(name: str, pattern: str | None) -> bool:
    """Whether `name` matches --only's PATTERN: a glob, a substring, or several of either
    separated by commas."""
    if not pattern:
        return True
    for part in (p.strip() for p in pattern.split(",")):
        if any(c in part for c in "*?["):
            import fnmatch

            if fnmatch.fnmatchcase(name, part):
                return True
        elif part and part in name:
            return True
    return False


def matches_any(result: Result, pattern: str) -> bool:
    """Whether --only's PATTERN names anything of `result` (a quantity, input or constant)."""
    m = result.model
    return any(_matches(n, pattern) for n in (*m.order, *m.inputs, *m.constants))


def _plain(v: Any) -> Any:
    """A JSON-safe number: floats stay floats, non-finite become None, numpy scalars unwrap."""
    if hasattr(v, "item"):
        v = v.item()
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, float) and v.is_integer() and abs(v) < 2**53:
        return int(v)
    return v


def as_dict(result: Result, only: str | None = None) -> dict[str, Any]:
    """The JSON contract: {"quantities": {...}, "inputs": {...}, "constants": {...}}."""
    m = result.model
    out: dict[str, Any] = {"quantities": {}, "inputs": {}, "constants": {}}
    band = result_band(result)
    for name in m.order:
        if _matches(name, only):
            q = m.quantities[name]
            out["quantities"][name] = {"value": _plain(result.values[name]), "unit": q.unit,
                                       "doc": q.doc}
            if name in BANDED:
                out["quantities"][name]["band"] = band.as_dict() if band else None
    for name, d in m.inputs.items():
        if _matches(name, only):
            v = result.config.labels.get(name, result.values[name])
            out["inputs"][name] = {"value": v if isinstance(v, (str, bool)) else _plain(v),
                                   "unit": d.unit, "config": d.config,
                                   "from": str(result.config.origins.get(name, "default"))}
    for name, c in m.constants.items():
        if _matches(name, only):
            out["constants"][name] = {"value": _plain(c.value), "unit": c.unit}
    return out


def to_json(result: Result, only: str | None = None) -> str:
    import json

    return json.dumps(as_dict(result, only), indent=2)


def to_yaml(result: Result, only: str | None = None) -> str:
    import yaml

    return yaml.safe_dump(as_dict(result, only), sort_keys=False, width=120)


def to_csv(result: Result, only: str | None = None) -> str:
    import csv
    import io

    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["name", "kind", "group", "value", "unit", "doc"])
    m = result.model
    for name, d in m.inputs.items():
        if _matches(name, only):
            v = result.config.labels.get(name, result.values[name])
            w.writerow([name, "input", d.group, _plain(v) if not isinstance(v, str) else v,
                        d.unit, d.doc])
    for name in m.order:
        if _matches(name, only):
            q = m.quantities[name]
            w.writerow([name, "quantity", q.group, _plain(result.values[name]), q.unit, q.doc])
    return buf.getvalue()


def _short(doc: str, width: int) -> str:
    doc = " ".join(doc.split())
    return doc if len(doc) <= width else doc[: width - 1] + "…"


def quantity_text(q: Any, value: Any) -> str:
    """A quantity's (or an input's) value as people read it: a share as a percent (`display:
    percent`), a choice by its label, the rest in human units."""
    if isinstance(value, (str, bool)):
        return str(value).lower() if isinstance(value, bool) else value
    if getattr(q, "display", "") == "percent":
        return f"{100 * float(value):.1f} %"
    n, u = human(value, q.unit)
    return f"{n} {u}".strip()


# Key results the memory line shows (memory per GPU of HBM capacity, the share, the verdict).
MEMORY_LINE: tuple[str, ...] = ("memory_per_gpu", "hbm_capacity", "hbm_capacity_used",
                                "memory_fits", "memory_headroom")


def key_results(result: Result) -> list[str]:
    v, m, c = result.values, result.model, result.config
    lines = []
    what = []
    if c.preset:
        what.append(c.preset.id)
    if c.node:
        what.append(f"{int(v['gpus'])} x {c.node.id}" if "gpus" in v else c.node.id)
    lines.append(f"Key results: {c.path}" + (f" ({' on '.join(what)})" if what else ""))
    if "memory_per_gpu" in v and "hbm_capacity" in v:
        mem, cap = v["memory_per_gpu"], v["hbm_capacity"]
        n1, u1 = human(mem, "byte")
        n2, u2 = human(cap, "byte")
        verdict = "fits" if mem <= cap else "DOES NOT FIT"
        lines.append(f"  {'memory_per_gpu':<26}{n1} {u1} of {n2} {u2} "
                     f"({100 * mem / cap:.0f}%): {verdict}")
        shown = MEMORY_LINE
    else:
        shown = ()
    band = result_band(result)
    for name in m.summary:  # the key results, by their `summary:` rank
        if name in shown or name not in v:
            continue
        d = m.quantities.get(name) or m.inputs[name]
        if d.unit == "s" and v[name] == 0:  # a time this layout does not spend (ep on a dense
            continue                        # model, tp_comm_time at tp 1): not a result

        text = quantity_text(d, result.config.labels.get(name, v[name]))
        if name == "step_time":
            shown_band = (band.text(lambda x, d=d, t=v[name]: quantity_text(d, x * t))
                          if band else "no comparable validated run")
            text = f"{text:<16}({shown_band})"
        elif name == "training_days" and "goodput_share" in v:
            text = f"{text:<16}({goodput_words(result)})"
        lines.append(f"  {name:<26}{text}".rstrip())
    return lines


# Where the default goodput comes from and what published runs lost (eval and the workbook say
# it beside training_days; formulas/time.yaml goodput_share, docs/validation.md Goodput).
GOODPUT_ESTIMATE = ("Llama 3's interruption rate at this GPU count; published runs on older "
                    "stacks lost 10-40%")


def goodput_words(result: Result) -> str:
    """What training_days assumes of the wall-clock time lost to interruptions: the goodput the
    config gives, or the one the formulas estimate from interruptions in proportion to the GPU
    count (Llama 3's rate: a 2024 production stack with automatic recovery)."""
    share = float(result.values["goodput_share"])
    if float(result.values.get("goodput", 0) or 0) > 0:
        return f"at {100 * share:.1f}% goodput, as given"
    return f"at {100 * share:.1f}% goodput, {GOODPUT_ESTIMATE}: set training.goodput"


# Quantities whose relative error is step time's: the validated runs' error band applies.
BANDED = ("step_time", "mfu", "hfu", "tokens_per_second", "tokens_per_second_per_gpu",
          "training_days", "training_time", "gpu_hours", "cost_usd", "energy_kwh",
          "achieved_flops_per_gpu", "wall_time_per_step")


def result_band(result: Result) -> Any:
    """The error band of a result's step time (dlformula.validation.bands), or None."""
    from .validation.bands import band_for

    values = dict(result.values)
    values["precision"] = result.config.labels.get("precision", values.get("precision"))
    return band_for(values, result.config.node)


def to_table(result: Result, only: str | None = None, width: int = 120) -> str:
    m, v = result.model, result.values
    lines = [] if only else key_results(result) + [""]
    groups: dict[str, list[str]] = {}
    for name in m.order:
        if _matches(name, only):
            groups.setdefault(m.quantities[name].group, []).append(name)
    inputs_by_group: dict[str, list[str]] = {}
    for name, d in m.inputs.items():
        if _matches(name, only):
            inputs_by_group.setdefault(d.group, []).append(name)
    from .display import ordered_groups

    all_groups = ordered_groups(m, {*groups, *inputs_by_group})  # their files' `order:`
    col = 2 + max([len(n) for names in (*groups.values(), *inputs_by_group.values())
                   for n in names] or [10])
    doc_width = max(20, width - col - 24)
    for g in all_groups:
        lines.append(f"[{g}]")
        for name in inputs_by_group.get(g, []):
            d = m.inputs[name]
            label = result.config.labels.get(name, v[name])
            if isinstance(label, (str, bool)):
                text = str(label).lower() if isinstance(label, bool) else label
            else:
                n, u = human(label, d.unit)
                text = f"{n} {u}".strip()
            origin = result.config.origins.get(name)
            src = f" ({origin.kind})" if origin and origin.kind != "config" else ""
            lines.append(f"  {name:<{col}}{text:<22}input{src}")
        for name in groups.get(g, []):
            q = m.quantities[name]
            lines.append(f"  {name:<{col}}{quantity_text(q, v[name]):<22}"
                         f"{_short(q.doc, doc_width)}")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def hardware_table(catalog: Any) -> str:
    cols = [("peak_flops_bf16", "BF16 TFLOP/s", 1e12), ("peak_flops_fp8", "FP8 TFLOP/s", 1e12),
            ("peak_flops_fp4", "FP4 TFLOP/s", 1e12),
            ("hbm_capacity", "HBM GiB", 2.0**30), ("hbm_bandwidth", "HBM TB/s", 1e12),
            ("scaleup_bandwidth", "scale-up GB/s", 1e9), ("scaleup_domain", "domain", 1),
            ("scaleout_bandwidth", "net GB/s", 1e9),
            ("price_per_gpu_hour", "USD/h", 1 / 3600)]
    lines = [f"{'node':<18}" + "".join(f"{title:>14}" for _, title, _ in cols) + "  name"]
    for node_id in catalog.node_ids():
        node = catalog.node(node_id)
        cells = []
        for key, _, scale in cols:
            spec = node.specs.get(key)
            if spec is None:
                cells.append(f"{'-':>14}")
                continue
            si = spec.value * parse_unit(spec.unit).scale
            cells.append(f"{si / scale:>14.6g}")
        lines.append(f"{node_id:<18}" + "".join(cells) + f"  {node.name}")
    return "\n".join(lines) + "\n"


def _replaces(catalog: Any, kind: str, ident: str) -> list[str]:
    """`  replaces: ...` when a plugin's file replaced the node or preset (override: true)."""
    was = getattr(catalog, "replaced", {}).get(kind, {}).get(ident)
    return [f"  replaces: the one of {was[0]} ({display_path(was[1])})"] if was else []


def node_details(node: Any, catalog: Any = None) -> str:
    lines = [f"{node.id}: {node.name} ({node.vendor})", f"  file: {display_path(node.path)}"]
    lines += _replaces(catalog, "hardware", node.id)
    if node.derived_from:
        lines.append(f"  derived from: {node.derived_from} (dlformula calibrate, "
                     f"{len(node.calibration_errors)} left-out run errors)")
    if node.notes:
        lines.append(f"  notes: {' '.join(node.notes.split())}")
    for key, spec in node.specs.items():
        lines.append(f"  {key:<25} {spec.value:g} {spec.unit}")
        lines.append(f"  {'':<25} source: {' '.join(spec.source.split())}")
    return "\n".join(lines) + "\n"


def preset_table(catalog: Any) -> str:
    keys = ["layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab"]
    lines = [f"{'preset':<16}" + "".join(f"{k:>11}" for k in keys) + f"{'published':>12}  name"]
    for pid in catalog.preset_ids():
        p = catalog.preset(pid)
        cells = "".join(f"{p.values[f'model.{k}'].value if f'model.{k}' in p.values else '-':>11}"
                        for k in keys)
        pub = p.published.get("params")
        lines.append(f"{pid:<16}{cells}{(f'{pub / 1e9:.1f}B' if pub else '-'):>12}  {p.name}")
    return "\n".join(lines) + "\n"


def preset_details(p: Any, catalog: Any = None) -> str:
    lines = [f"{p.id}: {p.name}", f"  file: {display_path(p.path)}",
             *_replaces(catalog, "presets", p.id), f"  source: {p.source}"]
    for key, item in p.values.items():
        lines.append(f"  {key:<28}{item.value}")
    for key, v in p.published.items():
        lines.append(f"  published {key:<18}{v:.4g}")
    return "\n".join(lines) + "\n"


BREAKDOWN_COLUMNS = [  # (figure, header, scale) with the scale dividing the SI value
    ("flops_fwd", "fwd GFLOP", 1e9), ("flops_bwd", "bwd GFLOP", 1e9),
    ("bytes_fwd", "fwd MiB", 2.0**20), ("weight_bytes", "weight MiB", 2.0**20),
    ("grad_bytes", "grad MiB", 2.0**20), ("intensity", "FLOP/B", 1.0),
    ("compute_bound", "bound", 1.0), ("time_fwd", "fwd us", 1e-6), ("time_bwd", "bwd us", 1e-6),
    ("comm_fwd", "comm fwd us", 1e-6), ("comm_bwd", "comm bwd us", 1e-6),
    ("comm_share", "comm %", 0.01),
]


def layer_breakdown(result: Result) -> str:
    """One row per sublayer of a block (names sl_<sublayer>_<figure> in formula-file order)."""
    m, v = result.model, result.values
    subs = [n[3:-len("_flops_fwd")] for n in m.quantities
            if n.startswith("sl_") and n.endswith("_flops_fwd")]
    if not subs:
        from .errors import UsageError

        raise UsageError("no sublayer quantities (sl_*) are loaded, so there is no breakdown")
    width = 12
    head = f"{'sublayer':<14}" + "".join(f"{t:>{width}}" for _, t, _ in BREAKDOWN_COLUMNS)
    tier = v.get("tp_link_tier")
    lines = [f"Per-sublayer roofline of one block, one micro-batch, one GPU ({result.config.path}"
             + (f"; TP traffic on {'the scale-up domain' if tier == 1 else 'the network'})"
                if tier is not None else ")"), head]
    scales = {k: sc for k, _, sc in BREAKDOWN_COLUMNS}

    def cell(name: str, key: str) -> str:
        val = v.get(name)
        if val is None:
            return f"{'':>{width}}"
        if key == "compute_bound":
            return f"{'compute' if val else 'memory':>{width}}"
        if key == "intensity" and not v.get(name.replace("_intensity", "_bytes_fwd"), 1):
            return f"{'-':>{width}}"  # no HBM traffic (fused into the attention kernel)
        x = float(val) / scales[key]
        return f"{x:>{width}.4g}" if abs(x) < 1e6 else f"{x:>{width}.3e}"

    for sub in subs:
        lines.append(f"{sub:<14}" + "".join(cell(f"sl_{sub}_{k}", k)
                                            for k, _, _ in BREAKDOWN_COLUMNS))
    lines.append(f"{'total':<14}" + "".join(
        cell(f"sl_total_{k}", k) if f"sl_total_{k}" in v else f"{'':>{width}}"
        for k, _, _ in BREAKDOWN_COLUMNS))
    return "\n".join(lines) + "\n"
