"""Runs the model cannot tell apart: how far their measured steps differ, the floor that sets.

Maps every run of the shipped runs files (or RUNS) to its config and groups the runs whose
configs are identical: same model, node, layout, batch, precision and every setting the mapping
reads. The model gives each group one step time, so however good it is, it cannot be closer to
each run than the runs are to each other. For every group of two or more runs the print shows
how far each measured step lies from the group's median (in log terms, as a ratio - 1): the
error an oracle that knew each group's median step exactly would still leave.

Most such groups are one benchmark table timed again in a later software release (the same
layout, a new container) or two teams timing the same recipe; the spread is the release or the
cluster, not the layout. With SAVED (a result `bench/crossval_sources.py --save` wrote) the
model's held-out errors on the same runs are printed beside the floor.

    python bench/replicate_floor.py [RUNS ...] [--saved SAVED.json] [--top N]
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path

from dlformula.core import Engine
from dlformula.errors import UsageError
from dlformula.validation.fit import REGIMES, collect, read_saved, regimes, summary
from dlformula.validation.shipped import resolve_all


def groups(runs: list) -> list[list]:
    """The runs whose mapped configs are identical, groups of two or more, largest first."""
    by: dict[frozenset[str], list] = {}
    for r in runs:
        by.setdefault(frozenset(r.config), []).append(r)
    return sorted((g for g in by.values() if len(g) > 1), key=lambda g: (-len(g), g[0].id))


def deviations(group: list) -> list[float]:
    """Each run's measured step against the group's median step (log median), as ratio - 1."""
    logs = [math.log(r.target) for r in group]
    mid = statistics.median(logs)
    return [math.expm1(v - mid) for v in logs]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="*", metavar="RUNS",
                        help="shipped set names or runs files (default: every shipped set)")
    parser.add_argument("--saved", metavar="SAVED.json", type=Path,
                        help="a result bench/crossval_sources.py --save wrote: the model's "
                             "held-out errors on the same runs, printed beside the floor")
    parser.add_argument("--top", type=int, default=12, metavar="N",
                        help="groups listed, widest spread first (default 12)")
    args = parser.parse_args(argv)
    if args.top < 0:
        parser.error("--top must be at least 0")
    start = time.perf_counter()
    try:
        files = resolve_all(args.runs)
        saved = read_saved(args.saved, "--saved")["runs"] if args.saved else None
    except UsageError as e:
        parser.error(str(e))
    runs = collect(Engine(), files)
    found = groups(runs)
    dev = {(r.id, r.file): d for g in found for r, d in zip(g, deviations(g))}
    held = {(r["id"], r["file"]): r["held_out"] for r in saved or []}
    members = [r for g in found for r in g]
    sources = sum(len({r.source for r in g}) > 1 for g in found)
    print(f"{len(runs)} runs; {len(members)} of them in {len(found)} groups of identical configs "
          f"({sources} groups mixing sources)\n")

    def line(label: str, rows: list) -> str:
        floor = summary([dev[(r.id, r.file)] for r in rows])
        text = f"{label:30} {len(rows):>5}  {floor['median']:6.1%} {floor['p90']:6.1%}"
        errs = [held[(r.id, r.file)] for r in rows if (r.id, r.file) in held]
        if saved is not None and errs:
            model = summary(errs)
            text += f"   {model['median']:6.1%} {model['p90']:6.1%}"
        return text

    print(f"{'':30} {'runs':>5}  {'floor':>13}" + ("   model held out" if saved else ""))
    print(f"{'':30} {'':>5}  {'median':>6} {'p90':>6}" + ("   median    p90" if saved else ""))
    print(line("every grouped run", members))
    for regime in REGIMES:
        sub = [r for r in members if regime in regimes(r)]
        if sub:
            print(line("  " + regime, sub))
    print("\nwidest groups (slowest measured step / fastest):")

    def spread(g: list) -> float:
        return max(r.target for r in g) / min(r.target for r in g)

    for g in sorted(found, key=spread, reverse=True)[:args.top]:
        ratio = spread(g)
        names = ", ".join(f"{r.id} {r.target:.4g} s" for r in g[:4])
        names += " ..." if len(g) > 4 else ""
        print(f"  {ratio:5.2f}x  {len(g)} runs, {len({r.source for r in g})} source(s): {names}")
    print(f"\n({time.perf_counter() - start:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
