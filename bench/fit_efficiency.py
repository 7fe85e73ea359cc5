"""Refit calibrated figures over a runs file: a grid search, printed best first.

The efficiency figures in hardware/<node>.yaml and the overlap efficiency say "fit over the
public runs"; this is the procedure. Every run of the runs file that `dlformula validate` can
predict, on the nodes named by --node (all nodes when omitted), is evaluated at every point of
the grid; the objective is the mean over runs of |log(predicted / target)| of the step time
(or of --target), clipped at 0.5 so that no single run drags a figure. One value per figure
serves every selected run: nothing is fitted per run or per source.

    python bench/fit_efficiency.py --node h100-sxm \\
        --grid hardware.gemm_efficiency=0.5:0.7:0.05 \\
        --grid hardware.gemm_efficiency_fp8=0.5:0.65:0.05 \\
        --grid hardware.attention_efficiency=0.15:0.3:0.05 \\
        --tie hardware.attention_efficiency_fa3=1.75*hardware.attention_efficiency
    python bench/fit_efficiency.py --grid parallelism.overlap_efficiency=0.3:1:0.1
    python bench/fit_efficiency.py --target memory_gib_peak \
        --grid training.allocator_overhead=0:0.3:0.01

RUNS defaults to the shipped public set, runs/public.yaml.
"""

from __future__ import annotations

import argparse
import itertools
import math
import sys
from pathlib import Path

from dlformula.core import Engine
from dlformula.validate import percentile, predict, validate

ROOT = Path(__file__).resolve().parent.parent
RUNS = ROOT / "runs" / "public.yaml"
CLIP = 0.5


def grid_values(spec: str) -> tuple[str, list[float]]:
    """'key=lo:hi:step' or 'key=a,b,c' -> (key, values)."""
    key, _, text = spec.partition("=")
    if ":" in text:
        lo, hi, step = (float(x) for x in text.split(":"))
        n = int(round((hi - lo) / step)) + 1
        return key, [round(lo + i * step, 6) for i in range(n)]
    return key, [float(x) for x in text.split(",")]


def tie(spec: str) -> tuple[str, float, str]:
    """'key=factor*other' -> (key, factor, other)."""
    key, _, text = spec.partition("=")
    factor, _, other = text.partition("*")
    return key, float(factor), other


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs", nargs="?", default=str(RUNS))
    ap.add_argument("--node", action="append", default=[], help="only runs on this node")
    ap.add_argument("--grid", action="append", default=[], help="KEY=LO:HI:STEP or KEY=A,B,C")
    ap.add_argument("--tie", action="append", default=[], help="KEY=FACTOR*OTHER_KEY")
    ap.add_argument("--target", default="step_time_s",
                    choices=["step_time_s", "memory_gib_peak", "layer_fwd_bwd_ms"])
    ap.add_argument("--top", type=int, default=8)
    args = ap.parse_args(argv)

    engine = Engine()
    report = validate(engine, args.runs)
    runs = []
    for row in report["rows"]:
        if args.target not in row.get("target", {}):
            continue
        node = next(s.split("=", 1)[1] for s in row["config"] if s.startswith("hardware.node="))
        if not args.node or node in args.node:
            runs.append((row["config"], row["target"][args.target]))
    if not runs:
        print(f"no runs with a {args.target} target on those nodes", file=sys.stderr)
        return 1
    axes = [grid_values(g) for g in args.grid]
    ties = [tie(t) for t in args.tie]
    results = []
    for point in itertools.product(*(values for _, values in axes)):
        sets = {key: value for (key, _), value in zip(axes, point)}
        for key, factor, other in ties:
            sets[key] = min(1.0, round(factor * sets[other], 6))
        extra = [f"{k}={v}" for k, v in sets.items()]
        logs, errors = [], []
        for config, target in runs:
            got = predict(engine, config + extra)[args.target]
            logs.append(min(abs(math.log(got / target)), CLIP))
            errors.append(abs(got - target) / target)
        results.append((sum(logs) / len(logs), percentile(errors, 50), percentile(errors, 90),
                        sets))
    results.sort(key=lambda r: r[0])
    print(f"{len(runs)} runs with {args.target}; objective = mean |log(predicted/target)| "
          f"clipped at {CLIP}")
    for objective, median, p90, sets in results[:args.top]:
        point = "  ".join(f"{k.split('.')[-1]}={v:g}" for k, v in sets.items())
        print(f"objective {objective:.4f}  median {median:6.1%}  p90 {p90:6.1%}  {point}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
