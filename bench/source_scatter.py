"""Bias or scatter: how much of the held-out error a per-source correction could remove at best.

Reads a result `bench/crossval_sources.py --save` wrote and splits every run's held-out error
into its source's bias (the source's median of log(predicted / measured)) and what is left
within the source once that bias is divided out. Every run of a source shares its hardware,
fabric, software release and way of measuring, so a mechanism that acts on the whole source
(a framework's kernels, a cluster's network, a benchmark's timing) moves its bias; only a
mechanism that depends on the layout, model or batch can shrink the scatter within it.

The "floor" is the held-out median and p90 with every source's bias removed, an oracle no
model can beat by correcting whole sources. Sources with fewer than --min-runs runs are left
out of the floor (a one-run source has no scatter by construction, which would flatter it).

    python bench/source_scatter.py SAVED.json [--min-runs N] [--top N]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from dlformula.errors import UsageError
from dlformula.validation.fit import REGIMES, bias_floor, read_saved, source_bias, summary


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("saved", type=Path, metavar="SAVED.json",
                        help="a result bench/crossval_sources.py --save wrote")
    parser.add_argument("--min-runs", type=int, default=3, metavar="N",
                        help="sources with fewer runs stay out of the floor (default 3)")
    parser.add_argument("--top", type=int, default=15, metavar="N",
                        help="sources listed, most runs off by more than 6%% first (default 15)")
    args = parser.parse_args(argv)
    if args.min_runs < 1 or args.top < 0:
        parser.error("--min-runs must be at least 1 and --top at least 0")
    try:
        runs = read_saved(args.saved)["runs"]
    except UsageError as e:
        parser.error(str(e))
    parts = source_bias(runs)
    floor = bias_floor(runs, args.min_runs)
    kept = [r for r in runs if (r["id"], r["file"]) in floor]

    def stat(rows: list[dict], errors: dict[tuple[str, str], float] | None = None) -> str:
        s = summary([errors[(r["id"], r["file"])] if errors else r["held_out"] for r in rows])
        return f"{s['median']:6.1%} {s['p90']:6.1%}"

    print(f"{len(runs)} runs from {len(parts)} sources; the floor counts the {len(kept)} runs "
          f"of the {len({r['source'] for r in kept})} sources with "
          f"{args.min_runs} or more runs\n")
    print(f"{'':40} {'runs':>5}  {'held out':>13}   {'source bias removed':>19}")
    print(f"{'':40} {'':>5}  {'median':>6} {'p90':>6}   {'median':>6} {'p90':>6} (floor)")
    print(f"{'every run':40} {len(kept):>5}  {stat(kept)}   {stat(kept, floor)}")
    for regime in REGIMES:
        sub = [r for r in kept if regime in r["regimes"]]
        if sub:
            print(f"  {regime:38} {len(sub):>5}  {stat(sub)}   {stat(sub, floor)}")
    off = {s: sum(abs(w) > 0.06 for w in p["within"]) for s, p in parts.items()
           if p["runs"] >= args.min_runs}
    ranked = sorted(off, key=lambda s: (-off[s], s))
    print("\nsources with the most runs off by more than 6% once their bias is removed:")
    print(f"  {'':48} {'runs':>4}  {'bias':>6}  {'within: median':>14} {'p90':>6}  {'> 6%':>4}")
    for source in ranked[:args.top]:
        p, w = parts[source], summary(parts[source]["within"])
        print(f"  {source[:48]:48} {p['runs']:>4}  {p['bias']:+6.1%}  {w['median']:14.1%} "
              f"{w['p90']:6.1%}  {off[source]:>4}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
