"""Controlled pairs: does each mechanism move the step time as much as the measurements do?

Two shipped runs whose mapped configs differ in one or two inputs only (the micro-batch, the
precision, the layout's dp and tp, the MoE dispatch settings, ...) form a pair. The measured
ratio of their step times is set by the inputs that differ, since the node, the shape and the
fitted efficiency figures are the same on both sides; the model's ratio should match it. Per
group of differing inputs this prints the number of pairs, the median of log(model ratio /
measured ratio) as a factor (above 1: the model moves the step time further in the direction
of the first run than was measured), the median |log| of that, and the median measured move,
so a mechanism that transfers shows a small middle column beside a large last one.

Run: python bench/controlled_pairs.py [--max-diff N] [--min-pairs N] [--show INPUT+INPUT]
(--show lists the pairs of one group, e.g. --show precision or --show dp+tp).
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from collections import defaultdict

from dlformula.core import Engine
from dlformula.validation.fit import FitRun, collect
from dlformula.validation.shipped import shipped_paths

Pair = tuple[float, FitRun, FitRun, float, float]  # log(model / measured), run a, run b, ratios


def pairs(runs: list[FitRun], steps: list[float],
          max_diff: int) -> dict[tuple[str, ...], list[Pair]]:
    """Group every pair of runs whose mapped inputs differ in 1..max_diff keys by those keys;
    steps[i] is the model's step time of runs[i] (ids are unique per file only)."""
    keys = sorted({k for r in runs for k in r.values})
    grouped: dict[tuple[str, ...], list[Pair]] = defaultdict(list)
    for i, a in enumerate(runs):
        for j in range(i + 1, len(runs)):
            b = runs[j]
            diff = tuple(k for k in keys if str(a.values.get(k)) != str(b.values.get(k)))
            if not 1 <= len(diff) <= max_diff:
                continue
            measured = a.target / b.target
            model = steps[i] / steps[j]
            grouped[diff].append((math.log(model / measured), a, b, measured, model))
    return grouped


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--max-diff", type=int, default=2)
    parser.add_argument("--min-pairs", type=int, default=4)
    parser.add_argument("--show", default="")
    args = parser.parse_args()
    start = time.perf_counter()
    engine = Engine()
    runs = collect(engine, list(shipped_paths().values()))
    steps = [float(engine.model.evaluate(r.values)["step_time"]) for r in runs]
    grouped = pairs(runs, steps, args.max_diff)
    print(f"{len(runs)} runs, {sum(map(len, grouped.values()))} pairs differing in "
          f"1-{args.max_diff} inputs, {time.perf_counter() - start:.0f} s")
    print(f"{'inputs that differ':44} {'pairs':>5}  {'model/measured':>14}  {'median |off|':>12}"
          f"  {'median measured move':>20}")
    for diff, group in sorted(grouped.items(), key=lambda kv: -len(kv[1])):
        if len(group) < args.min_pairs:
            continue
        off = [g[0] for g in group]
        moved = statistics.median(abs(math.log(g[3])) for g in group)
        factor = math.exp(statistics.median(off))
        spread = math.exp(statistics.median(map(abs, off))) - 1
        print(f"{'+'.join(diff)[:44]:44} {len(group):5}  {factor:13.3f}x"
              f"  {spread:11.1%}  {math.exp(moved) - 1:19.1%}")
    if args.show:
        want = tuple(args.show.split("+"))
        print(f"\npairs differing in {args.show} (first run / second run):")
        for _off, a, b, measured, model in sorted(grouped.get(want, []), key=lambda g: g[0]):
            values = " ".join(f"{k}={a.values.get(k)}/{b.values.get(k)}" for k in want)
            print(f"  {a.id[:44]:44} / {b.id[:44]:44} measured {measured:6.3f} model {model:6.3f}"
                  f"  {values}")


if __name__ == "__main__":
    main()
