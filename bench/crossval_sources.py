"""Leave-one-source-out check of the calibrated figures: how well runs nobody fitted on predict.

For each source of the runs file (Megatron-LM 2021, DeepSpeed ZeRO-3, Korthikanti 2022, NeMo,
MosaicML, torchtitan), the fitted node figures (A100: gemm and attention efficiency; H100: gemm,
FP8 gemm and attention efficiency, FlashAttention-3 class tied at 1.75x) are refitted on the
other sources' runs with the grid and objective of bench/fit_efficiency.py, and the held-out
source is predicted with them. Prints, per source, the median |step-time error| with the shipped
figures and held out, and the pooled held-out median and p90 over all runs.

    python bench/crossval_sources.py [RUNS]

The overlap efficiency and the allocator overhead stay at their shipped values (a second
level of refits would multiply the run time; bench/fit_efficiency.py refits them alone).
"""

from __future__ import annotations

import itertools
import math
import sys
from pathlib import Path

from dlformula.core import Engine
from dlformula.validate import percentile, predict, validate

ROOT = Path(__file__).resolve().parent.parent
RUNS = ROOT / "runs" / "public.yaml"
CLIP = 0.5
SOURCES = [("Megatron-LM 2021 (Narayanan, PTD-P)", lambda i: i.startswith("narayanan21")
            and "zero3" not in i),
           ("DeepSpeed ZeRO-3 (Narayanan, Table 2)", lambda i: "zero3" in i),
           ("Korthikanti et al. 2022", lambda i: i.startswith("korthikanti")),
           ("NVIDIA NeMo 24.07", lambda i: i.startswith("nemo")),
           ("MosaicML llm-foundry", lambda i: i.startswith("mosaic")),
           ("torchtitan 2024-12", lambda i: i.startswith("torchtitan"))]
GRIDS = {
    "a100": {"hardware.gemm_efficiency": [0.66, 0.68, 0.7, 0.72, 0.74, 0.76, 0.78],
             "hardware.attention_efficiency": [0.25, 0.3, 0.35, 0.4, 0.45]},
    "h100": {"hardware.gemm_efficiency": [0.45, 0.5, 0.55, 0.6, 0.65],
             "hardware.gemm_efficiency_fp8": [0.45, 0.5, 0.55, 0.6, 0.65],
             "hardware.attention_efficiency": [0.15, 0.2, 0.25, 0.3]},
}
TIE = ("hardware.attention_efficiency_fa3", 1.75, "hardware.attention_efficiency")


def family(config: list[str]) -> str:
    node = next(s.split("=", 1)[1] for s in config if s.startswith("hardware.node="))
    return "a100" if node.startswith("a100") else "h100" if node.startswith("h100") else node


def fit(engine, runs) -> dict[str, list[str]]:
    """Best grid point per node family over `runs` [(config, target)]."""
    best = {}
    for fam, grid in GRIDS.items():
        mine = [r for r in runs if family(r[0]) == fam]
        scored = []
        for point in itertools.product(*grid.values()):
            sets = dict(zip(grid, point))
            if fam == "h100":
                sets[TIE[0]] = round(TIE[1] * sets[TIE[2]], 6)
            extra = [f"{k}={v}" for k, v in sets.items()]
            logs = [min(abs(math.log(predict(engine, c + extra)["step_time_s"] / t)), CLIP)
                    for c, t in mine]
            scored.append((sum(logs) / max(len(logs), 1), extra))
        best[fam] = min(scored)[1]
    return best


def main(argv: list[str]) -> int:
    engine = Engine()
    report = validate(engine, argv[0] if argv else str(RUNS))
    runs = [(r["id"], r["config"], r["target"]["step_time_s"]) for r in report["rows"]
            if "step_time_s" in r.get("target", {})]
    held_out_errors = []
    print(f"{'held-out source':40} {'runs':>4} {'shipped':>9} {'held out':>9}  refit figures")
    for name, member in SOURCES:
        test = [r for r in runs if member(r[0])]
        train = [(c, t) for i, c, t in runs if not member(i)]
        figures = fit(engine, train)
        shipped, held = [], []
        for _, config, target in test:
            shipped.append(abs(predict(engine, config)["step_time_s"] / target - 1))
            extra = figures.get(family(config), [])
            held.append(abs(predict(engine, config + extra)["step_time_s"] / target - 1))
        held_out_errors += held
        used = sorted({family(c) for _, c, _ in test})
        shown = "; ".join(f"{fam}: " + " ".join(s.split(".", 1)[1].replace("_efficiency", "")
                                                for s in figures[fam]) for fam in used)
        print(f"{name:40} {len(test):>4} {percentile(shipped, 50):>9.1%} "
              f"{percentile(held, 50):>9.1%}  {shown}")
    print(f"{'all runs, each predicted held out':40} {len(held_out_errors):>4} {'':>9} "
          f"{percentile(held_out_errors, 50):>9.1%}  p90 {percentile(held_out_errors, 90):.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
