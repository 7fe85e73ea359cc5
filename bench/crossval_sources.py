"""Leave-one-source-out check of the fitted figures: how well runs nobody fitted on predict.

For each source family of the runs (engine/validation/fit.yaml groups them: every release of a
publisher's benchmark page is one source), the hardware families' fitted figures are refitted
on all other sources and the left-out runs are predicted with them. Prints the pooled figure,
per source, per regime (≥ 4,096 GPUs, MoE, FP8, CP ≥ 8, FSDP, Blackwell) and per hardware
family, in-sample beside held out, and the figures fitted on everything.

    python bench/crossval_sources.py [RUNS ...]      # default: every shipped runs file
"""

from __future__ import annotations

import argparse
import sys
import time

from dlformula.core import Engine
from dlformula.errors import UsageError
from dlformula.validation.fit import REGIMES, collect, cross_validate, summary
from dlformula.validation.shipped import resolve_all


def row(label: str, rows: list[dict]) -> str:
    i, h = summary([r["in_sample"] for r in rows]), summary([r["held_out"] for r in rows])
    return (f"{label:44} {i['n']:>4}  {i['median']:6.1%} {i['p90']:6.1%}   "
            f"{h['median']:6.1%} {h['p90']:6.1%}  {h['signed_median']:+6.1%}")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="*", metavar="RUNS",
                        help="shipped set names or runs files (default: every shipped set)")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    try:
        files = resolve_all(args.runs)
    except UsageError as e:
        parser.error(str(e))
    engine = Engine()
    result = cross_validate(engine, collect(engine, files))
    runs = result["runs"]
    head = f"{'':44} {'runs':>4}  {'in-sample':>13}   {'held out':>13}  signed"
    print(head + "\n" + f"{'':44} {'':>4}  {'median':>6} {'p90':>6}   {'median':>6} {'p90':>6}")
    print(row("all runs", runs))
    print("\nby source (each held out in turn):")
    for source in sorted({r["source"] for r in runs}):
        print(row("  " + source, [r for r in runs if r["source"] == source]))
    print("\nby regime:")
    for regime in REGIMES:
        print(row("  " + regime, [r for r in runs if regime in r["regimes"]]))
    print("\nby hardware family:")
    for fam in sorted({r["family"] or "(not fitted)" for r in runs}):
        print(row("  " + fam, [r for r in runs if (r["family"] or "(not fitted)") == fam]))
    print("\nfigures fitted on every run:")
    for fam, point in result["figures"].items():
        print(f"  {fam:12} " + "  ".join(f"{k.split('.')[-1]}={v:g}" for k, v in point.items()))
    for key, value in result.get("framework", {}).items():
        held = sorted({(r["held_out_figures"] or {}).get(key) for r in runs} - {None})
        print(f"  {'framework':12} {key.split('.')[-1]}={value:g}"
              f"  (left out in turn: {', '.join(f'{v:g}' for v in held)})")
    print(f"\n{len(runs)} runs, {time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
