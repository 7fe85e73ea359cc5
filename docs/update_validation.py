"""Regenerate the figures in docs/validation.md from `dlformula validate`.

    python docs/update_validation.py          # rewrite docs/validation.md
    python docs/update_validation.py --check  # exit 1 if docs/validation.md is out of date

Each block between `<!-- validate: NAME -->` and `<!-- end validate -->` is replaced by what
the shipped model predicts now: `summary`, `distribution` and `by-source` over the public runs
(the shipped set runs/public.yaml), `rows` (every public run), `held-out` (every other shipped
runs file, runs/*.yaml, which no figure is fitted on) and `ablations` (each modelling choice
undone alone). The prose around the blocks is written by hand. tests/test_docs.py runs the
--check form.
"""

from __future__ import annotations

import fnmatch
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "validation.md"
PUBLIC = ROOT / "runs" / "public.yaml"
HELD_OUT = sorted(p for p in (ROOT / "runs").glob("*.yaml") if p != PUBLIC)
BLIND = ROOT / "bench" / "runs" / "blind"
BLOCK = re.compile(r"(<!-- validate: ([\w-]+) -->\n)(.*?)(<!-- end validate -->)", re.S)

# Groups of the public runs for the by-source table, by run id; a run in none of them is shown
# under "other", so none is left out.
GROUPS = [
    ("Narayanan et al. 2021, Table 1 (Megatron-LM weak scaling, A100)", "narayanan21_t1_*"),
    ("Narayanan et al. 2021, Table 2, PTD-P (A100)", "narayanan21_t2_ptdp_*"),
    ("Narayanan et al. 2021, Table 2, DeepSpeed ZeRO-3 (A100)", "narayanan21_t2_zero3_*"),
    ("Korthikanti et al. 2022, Table 5 and sec. 6.3 (A100)", "korthikanti22_*"),
    ("NVIDIA NeMo 24.07 (H100)", "nemo*"),
    ("MosaicML llm-foundry (H100)", "mosaic_*_h100_*"),
    ("MosaicML llm-foundry (A100)", "mosaic_*_a100_*"),
    ("torchtitan 2024-12 (H100 96 GB, 500 W)", "torchtitan_*"),
]
# Each modelling choice removed alone from the shipped model, figures not refitted: a label,
# the config item a run must have for the change to apply (None: every run), the --set items.
ABLATIONS = [
    ("network collectives at NVLink's collective efficiency, not the NIC's", None,
     ["hardware.scaleout_efficiency=0"]),
    ("NVIDIA performance recipes reducing gradients in fp32", "training.grad_bytes=2",
     ["training.grad_bytes=4"]),
    ("communication behind compute costs nothing (overlap_slowdown 0)", None,
     ["hardware.overlap_slowdown=0"]),
    ("Megatron's bucket fixed at 40M parameters (not max(40M, 1M x dp))", None,
     ["parallelism.bucket_size=40000000"]),
    ("DeepSpeed ZeRO-3 gathering a layer at a time (not a tensor)",
     "parallelism.zero3_gather_unit=tensor", ["parallelism.zero3_gather_unit=layer"]),
    ("TP overlap switched on read as off", "parallelism.tp_comm_overlap=1",
     ["parallelism.tp_comm_overlap=0"]),
    ("no FlashAttention-3 class for Transformer Engine stacks", "training.attention_kernel=fa3",
     ["training.attention_kernel=fa2"]),
    ("DeepSpeed ZeRO-3 at the node's NIC bandwidth", "parallelism.dp_node_nics=false",
     ["parallelism.dp_node_nics=true"]),
    ("torchtitan's selective checkpointing as Megatron-LM's", "training.recompute=op",
     ["training.recompute=selective"]),
    ("no allocator overhead on the peak", None, ["training.allocator_overhead=0"]),
    ("all-to-all dispatch sending every routed copy (no DeepEP)", "moe.dispatcher=deepep",
     ["moe.dispatcher=alltoall"]),
    ("MoE layers never waiting for the host (moe.host_sync_time 0)", None,
     ["moe.host_sync_time=0"]),
    ("gpt-oss without its sliding window (every layer full attention)",
     "model.sliding_window=128", ["model.sliding_window=0"]),
    ("GB300 at GB200's sustained tensor rate (hardware.tensor_rate_ratio 1)",
     "hardware.node=gb300-nvl72", ["hardware.tensor_rate_ratio=1"]),
    ("MaxText's save_qkv_proj as a full recompute", "training.recompute=save_qkv_proj",
     ["training.recompute=full"]),
    ("NVFP4 GEMMs at the datasheet FP4 / FP8 ratio (hardware.fp4_gemm_ratio 0)",
     "training.precision=nvfp4", ["hardware.fp4_gemm_ratio=0"]),
    ("attention at its 128-wide figure for every head width", None,
     ["hardware.attention_head_exponent=0", "hardware.attention_head_exponent_fa3=0"]),
    ("fused attention with no per-row cost (hardware.attention_row_overhead 0)", None,
     ["hardware.attention_row_overhead=0"]),
    ("every run's loss as Megatron-LM's unfused default (training.loss_kernel unfused)", None,
     ["training.loss_kernel=unfused"]),
    ("GB300 attention at GB200's rate (hardware.attention_rate_ratio 1)",
     "hardware.node=gb300-nvl72", ["hardware.attention_rate_ratio=1"]),
]
BINS = [(0, 0.02, "< 2%"), (0.02, 0.05, "2-5%"), (0.05, 0.10, "5-10%"), (0.10, 0.12, "10-12%"),
        (0.12, 0.20, "12-20%"), (0.20, float("inf"), "≥ 20%")]
LABELS = {"step_time_s": "step time", "memory_gib_peak": "peak memory",
          "layer_fwd_bwd_ms": "layer fwd+bwd"}
UNITS = {"step_time_s": "s", "memory_gib_peak": "GiB", "layer_fwd_bwd_ms": "ms"}
SUFFIX = {"step_time_s": "", "memory_gib_peak": " (memory)", "layer_fwd_bwd_ms": " (layer)"}


def pct(x: float, signed: bool = False) -> str:
    return f"{x * 100:+.1f}%" if signed else f"{x * 100:.1f}%"


def num(v: float) -> str:
    return f"{v:.4g}"


def errors(report: dict[str, Any], key: str) -> list[tuple[str, float]]:
    return [(r["id"], r["rel_error"][key]) for r in report["rows"]
            if key in r.get("rel_error", {})]


def summary(report: dict[str, Any]) -> str:
    s = report["summary"]
    lines = ["| | goal | shipped model |", "|---|---:|---:|"]
    goals = {("step_time_s", "median_abs"): "≤ 5%", ("step_time_s", "p90_abs"): "≤ 12%",
             ("memory_gib_peak", "median_abs"): "≤ 8%"}
    for key in ("step_time_s", "memory_gib_peak", "layer_fwd_bwd_ms"):
        if key not in s:
            continue
        t = s[key]
        lines.append(f"| {LABELS[key]}, median \\|error\\| ({t['n']} runs) | "
                     f"{goals.get((key, 'median_abs'), '')} | **{pct(t['median_abs'])}** |")
        lines.append(f"| {LABELS[key]}, p90 \\|error\\| | {goals.get((key, 'p90_abs'), '')} | "
                     f"**{pct(t['p90_abs'])}** |")
        lines.append(f"| {LABELS[key]}, mean / max \\|error\\|, signed median | | "
                     f"{pct(t['mean_abs'])} / {pct(t['max_abs'])}, "
                     f"{pct(t['median_signed'], True)} |")
    lines.append(f"| runs skipped (listed with the reason below) | | {s['skipped']} |")
    return "\n".join(lines) + "\n"


def distribution(report: dict[str, Any]) -> str:
    lines = ["| \\|error\\| | " + " | ".join(b[2] for b in BINS) + " |",
             "|---|" + "---:|" * len(BINS)]
    for key in ("step_time_s", "memory_gib_peak"):
        errs = [abs(e) for _, e in errors(report, key)]
        if errs:
            counts = [sum(lo <= e < hi for e in errs) for lo, hi, _ in BINS]
            lines.append(f"| {LABELS[key]} ({len(errs)} runs) | "
                         + " | ".join(str(c) for c in counts) + " |")
    return "\n".join(lines) + "\n"


def by_source(report: dict[str, Any]) -> str:
    from dlformula.validate import percentile

    groups: dict[str, list[float]] = {}
    for rid, e in errors(report, "step_time_s"):
        label = next((g for g, pattern in GROUPS if fnmatch.fnmatchcase(rid, pattern)), "other")
        groups.setdefault(label, []).append(e)
    lines = ["| source | runs | median \\|error\\| | signed median | max \\|error\\| |",
             "|---|---:|---:|---:|---:|"]
    for label, errs in groups.items():
        absolute = [abs(e) for e in errs]
        lines.append(f"| {label} | {len(errs)} | {pct(percentile(absolute, 50))} | "
                     f"{pct(percentile(errs, 50), True)} | {pct(max(absolute))} |")
    return "\n".join(lines) + "\n"


def rows(report: dict[str, Any]) -> str:
    lines = ["| run | target | predicted | error |", "|---|---:|---:|---:|"]
    for r in report["rows"]:
        if "skipped" in r:
            lines.append(f"| {r['id']} | skipped: {r['skipped']} | | |")
            continue
        for key in ("step_time_s", "memory_gib_peak", "layer_fwd_bwd_ms"):
            if key in r["target"]:
                lines.append(f"| {r['id']}{SUFFIX[key]} | {num(r['target'][key])} {UNITS[key]} "
                             f"| {num(r['predicted'][key])} {UNITS[key]} | "
                             f"{pct(r['rel_error'][key], True)} |")
    return "\n".join(lines) + "\n"


def held_out(reports: dict[Path, dict[str, Any]]) -> str:
    out = []
    for path, report in reports.items():
        name = path.relative_to(ROOT)
        s = report["summary"]
        parts = [f"{LABELS[k]}: n={s[k]['n']}, median {pct(s[k]['median_abs'])}, p90 "
                 f"{pct(s[k]['p90_abs'])}, max {pct(s[k]['max_abs'])}, signed median "
                 f"{pct(s[k]['median_signed'], True)}" for k in LABELS if k in s]
        out.append(f"`{name}`: " + "; ".join(parts or ["nothing predicted"])
                   + f"; skipped {s['skipped']}.\n")
        out.append("\n" + rows(report) + "\n")
    return "".join(out) or "No other runs files in runs/.\n"


def ablations(engine: Any, reports: dict[str, dict[str, Any]]) -> str:
    """Error statistics with each choice of ABLATIONS undone, over every runs file."""
    from dlformula.validate import percentile, predict

    def stats(label: str, change: tuple[str | None, list[str]] | None) -> str:
        cells = []
        for name, report in reports.items():
            for key in ("step_time_s", "memory_gib_peak") if name == "public" else (
                    "step_time_s",):
                errs = []
                for r in report["rows"]:
                    if key not in r.get("rel_error", {}):
                        continue
                    e = r["rel_error"][key]
                    if change is not None and (change[0] is None or change[0] in r["config"]):
                        got = predict(engine, r["config"] + change[1])[key]
                        e = (got - r["target"][key]) / r["target"][key]
                    errs.append(abs(e))
                cells.append(f"{pct(percentile(errs, 50))} / {pct(percentile(errs, 90))}")
        return f"| {label} | " + " | ".join(cells) + " |"

    head = ["public step time", "public peak memory"] + [f"{n} step time"
                                                         for n in reports if n != "public"]
    lines = ["| variant (median / p90 \\|error\\|) | " + " | ".join(head) + " |",
             "|---|" + "---:|" * len(head), stats("as shipped", None)]
    lines += [stats(label, (when, sets)) for label, when, sets in ABLATIONS]
    return "\n".join(lines) + "\n"


BANDS = ROOT / "engine" / "validation" / "bands.json"
README = ROOT / "README.md"
GOALS = {"all runs": ("≤ 6%", "≤ 15%")}


def crossval(engine: Any) -> dict[str, Any]:
    """Leave-one-source-out over every shipped runs file (engine/validation/fit.py)."""
    from dlformula.validation.fit import collect, cross_validate

    return cross_validate(engine, collect(engine, [str(PUBLIC), *map(str, HELD_OUT)]))


def _stat_cells(rows: list[dict[str, Any]]) -> str:
    from dlformula.validation.fit import summary as stat

    i, h = stat([r["in_sample"] for r in rows]), stat([r["held_out"] for r in rows])
    return (f"{i['n']} | {pct(i['median'])} / {pct(i['p90'])} | **{pct(h['median'])}** / "
            f"**{pct(h['p90'])}** | {pct(h['signed_median'], True)}")


def loso(cv: dict[str, Any]) -> str:
    """Pooled, per regime and per hardware family: in-sample beside leave-one-source-out."""
    from dlformula.validation.fit import REGIMES, bias_floor
    from dlformula.validation.fit import summary as stat

    runs = cv["runs"]
    lines = ["| runs | n | in-sample median / p90 | held out (leave-one-source-out) median / p90 "
             "| held out, signed median |", "|---|---:|---:|---:|---:|",
             f"| every run held (goal: median ≤ 6%, p90 ≤ 15%) | {_stat_cells(runs)} |"]
    for regime in REGIMES:
        lines.append(f"| {regime} | {_stat_cells([r for r in runs if regime in r['regimes']])} |")
    for fam in sorted({r["family"] or "not fitted" for r in runs}):
        mine = [r for r in runs if (r["family"] or "not fitted") == fam]
        lines.append(f"| {fam} nodes | {_stat_cells(mine)} |")
    figures = "; ".join(f"{fam}: " + ", ".join(f"`{k.split('.')[-1]}` {v:g}"
                                              for k, v in point.items())
                        for fam, point in cv["figures"].items())
    for key, value in cv.get("framework", {}).items():
        held = sorted({(r["held_out_figures"] or {}).get(key) for r in cv["runs"]} - {None})
        figures += (f"; framework: `{key}` {value:g} (refitted without each source: "
                    f"{', '.join(f'{v:g}' for v in held)})")
    for name, value in cv.get("shared", {}).items():
        folds = sorted(cv.get("shared_held_out", {}).get(name, {}))
        figures += (f"; shared by the families whose attention figures follow their GEMM figure: "
                    f"`{name}` {value:g} (refitted without each source: "
                    f"{', '.join(f'{v:g}' for v in folds)})")
    min_runs = 3  # a one-run source has no scatter by construction
    floor = bias_floor(runs, min_runs)
    kept = [r for r in runs if (r["id"], r["file"]) in floor]
    h, f = stat([r["held_out"] for r in kept]), stat(list(floor.values()))
    sources = len({r["source"] for r in kept})
    return ("\n".join(lines) + f"\n\nFigures fitted on every run: {figures}.\n\n"
            f"With every source's held-out bias divided out (its median error, shared by all its "
            f"runs: its cluster, software release and timing), an oracle no correction of whole "
            f"sources can beat, the {len(kept)} runs of the {sources} sources with {min_runs} or "
            f"more runs would be {pct(f['median'])} / {pct(f['p90'])} (held out as they are: "
            f"{pct(h['median'])} / {pct(h['p90'])}); the rest is scatter within sources "
            f"(`python bench/source_scatter.py`).\n")


def loso_sources(cv: dict[str, Any]) -> str:
    runs = cv["runs"]
    lines = ["| source (held out in turn) | n | in-sample median / p90 | held out median / p90 "
             "| held out, signed median |", "|---|---:|---:|---:|---:|"]
    for source in sorted({r["source"] for r in runs}):
        lines.append(f"| {source} | {_stat_cells([r for r in runs if r['source'] == source])} |")
    return "\n".join(lines) + "\n"


def blind(cv: dict[str, Any], firsts: dict[str, Any], records: list[str]) -> str:
    """Every run's first, blind prediction (bench/runs/blind/), pooled, beside the same runs'
    in-sample and held-out errors now, by regime and by the age of the record."""
    from dlformula.validation.blind import eras
    from dlformula.validation.fit import REGIMES
    from dlformula.validation.fit import summary as stat

    now = {r["id"]: r for r in cv["runs"]}
    held = [i for i in firsts if i in now]

    def cells(ids: list[str]) -> str:
        b = stat([firsts[i].error for i in ids])
        i_, h = stat([now[i]["in_sample"] for i in ids]), stat([now[i]["held_out"] for i in ids])
        return (f"{b['n']} | **{pct(b['median'])}** / **{pct(b['p90'])}** | "
                f"{pct(b['signed_median'], True)} | {pct(h['median'])} / {pct(h['p90'])} | "
                f"{pct(i_['median'])} / {pct(i_['p90'])}")

    b = stat([f.error for f in firsts.values()])
    lines = ["| runs | n | first prediction, blind: median / p90 | blind, signed median | "
             "now held out (leave-one-source-out) | now in-sample |",
             "|---|---:|---:|---:|---:|---:|",
             f"| every run's first prediction ({len(records)} records) | {b['n']} | "
             f"**{pct(b['median'])}** / **{pct(b['p90'])}** | {pct(b['signed_median'], True)} "
             "| | |",
             f"| of them, the runs still shipped | {cells(held)} |"]
    for regime in REGIMES:
        mine = [i for i in held if regime in now[i]["regimes"]]
        if mine:
            lines.append(f"| {regime} | {cells(mine)} |")
    for first, last, ids in eras({i: firsts[i] for i in held}):
        lo, hi = firsts[ids[0]].position, firsts[ids[-1]].position
        lines.append(f"| records {lo + 1}-{hi + 1} of {len(records)}, oldest first "
                     f"(`{first}` to `{last}`) | {cells(ids)} |")
    return "\n".join(lines) + "\n"


def headline(cv: dict[str, Any], firsts: dict[str, Any]) -> str:
    """The README's one-paragraph fidelity statement."""
    from dlformula.validation.fit import summary as stat

    runs = cv["runs"]
    h, i = stat([r["held_out"] for r in runs]), stat([r["in_sample"] for r in runs])
    sources = len({r["source"] for r in runs})
    b = stat([f.error for f in firsts.values()])
    return (f"Step-time error over {h['n']} published runs from {sources} sources, each source "
            f"predicted with the fitted figures refitted without it (leave-one-source-out): "
            f"median {pct(h['median'])}, p90 {pct(h['p90'])} (in-sample {pct(i['median'])} / "
            f"{pct(i['p90'])}). A source the model has never seen fares worse: the first, "
            f"blind predictions of {b['n']} runs, each made before its source could change the "
            f"model, were off by {pct(b['median'])} at the median and {pct(b['p90'])} at p90. "
            "By regime and source in [docs/validation.md](docs/validation.md#where-we-are).\n")


def bands_json(cv: dict[str, Any], firsts: dict[str, Any]) -> str:
    """Each validated run's held-out error, its first prediction where a blind record holds
    one, and the traits error bands match on."""
    import json

    from dlformula.validation.bands import band_family, validated_run_traits
    from dlformula.validation.fit import spec

    families = {node: f.name for f in spec().families.values() for node in f.nodes}
    runs = []
    for r in cv["runs"]:
        # a node no family fits still has its validated runs: they are its band, under the
        # node's own name (bands.band_family), so that an estimate on it says how they fared
        family = band_family(r["family"], r["traits"]["node"])
        families.setdefault(r["traits"]["node"], family)
        runs.append({"id": r["id"], **validated_run_traits({**r, "family": family}),
                     "held_out": round(r["held_out"], 6),
                     **({"first": round(firsts[r["id"]].error, 6)} if r["id"] in firsts
                        else {})})
    body = {"about": "Generated by docs/update_validation.py: leave-one-source-out step-time "
                     "errors of the validated runs and, where a blind record holds one, each "
                     "run's first prediction (bench/runs/blind/), read by "
                     "dlformula.validation.bands.",
            "families": families, "runs": runs}
    return json.dumps(body, indent=1, ensure_ascii=False) + "\n"


def makers(engine: Any, cv: dict[str, Any], firsts: dict[str, Any],
           records: list[str]) -> dict[str, Any]:
    """Block name -> a function rendering it; the reports are computed once, on first use."""
    from functools import cache

    from dlformula.validate import validate

    @cache
    def reports() -> dict[str, dict[str, Any]]:
        out = {"public": validate(engine, str(PUBLIC))}
        out.update({str(p): validate(engine, str(p)) for p in HELD_OUT})
        return out

    def held() -> dict[Path, dict[str, Any]]:
        return {p: reports()[str(p)] for p in HELD_OUT}

    def named() -> dict[str, dict[str, Any]]:
        return {"public": reports()["public"],
                **{p.stem: r for p, r in held().items()}}

    return {"summary": lambda: summary(reports()["public"]),
            "distribution": lambda: distribution(reports()["public"]),
            "by-source": lambda: by_source(reports()["public"]),
            "rows": lambda: rows(reports()["public"]), "held-out": lambda: held_out(held()),
            "ablations": lambda: ablations(engine, named()), "loso": lambda: loso(cv),
            "loso-sources": lambda: loso_sources(cv), "headline": lambda: headline(cv, firsts),
            "blind": lambda: blind(cv, firsts, records)}


def render(text: str, blocks: dict[str, Any], name: str) -> str:
    def replace(m: re.Match) -> str:
        block = m.group(2)
        if block not in blocks:
            sys.exit(f"{name}: unknown block '{block}' (one of {', '.join(blocks)})")
        return m.group(1) + blocks[block]() + m.group(4)

    return BLOCK.sub(replace, text)


def main() -> int:
    from dlformula.core import Engine
    from dlformula.validation.blind import first_predictions, records

    try:  # a malformed blind record or ORDER is named before the long cross-validation
        firsts, order = first_predictions(BLIND), records(BLIND)
    except ValueError as exc:
        sys.exit(f"error: {exc}")
    engine = Engine()
    cv = crossval(engine)
    blocks = makers(engine, cv, firsts, order)
    outputs = {DOC: render(DOC.read_text(), blocks, "docs/validation.md"),
               README: render(README.read_text(), blocks, "README.md"),
               BANDS: bands_json(cv, firsts)}
    stale = [p for p, new in outputs.items() if not p.exists() or p.read_text() != new]
    if "--check" in sys.argv:
        for path in stale:
            print(f"{path.relative_to(ROOT)} is out of date: run python docs/update_validation.py")
        return 1 if stale else 0
    for path in stale:
        path.write_text(outputs[path])
    return 0


if __name__ == "__main__":
    sys.exit(main())
