"""Leave-one-source-out check of the fitted figures: how well runs nobody fitted on predict.

For each source family of the runs (engine/validation/fit.yaml groups them: every release of a
publisher's benchmark page is one source), the hardware families' fitted figures, the ratios
families share and the framework figures are refitted on all other sources and the left-out runs
are predicted with them. Prints the pooled figure, per source, per regime (≥ 4,096 GPUs, MoE,
FP8, CP ≥ 8, FSDP, Blackwell, NVFP4) and per hardware family, in-sample beside held out, and the
figures fitted on everything (a shared ratio with the values its refits took).

    python bench/crossval_sources.py [RUNS ...]      # default: every shipped runs file
    python bench/crossval_sources.py --save before.json          # keep every run's errors
    python bench/crossval_sources.py --against before.json       # after a change: what moved

`--against` reads a file an earlier `--save` wrote and prints, for the runs both hold, each
regime's held-out median and p90 before and after, and the sources whose held-out errors moved
most (the sum of |error| over their runs), with their medians and signed medians: the
before/after table a model change reports beside its source.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from dlformula.core import Engine
from dlformula.errors import UsageError
from dlformula.validation.fit import REGIMES, collect, cross_validate, read_saved, summary
from dlformula.validation.shipped import resolve_all


def row(label: str, rows: list[dict]) -> str:
    i, h = summary([r["in_sample"] for r in rows]), summary([r["held_out"] for r in rows])
    return (f"{label:44} {i['n']:>4}  {i['median']:6.1%} {i['p90']:6.1%}   "
            f"{h['median']:6.1%} {h['p90']:6.1%}  {h['signed_median']:+6.1%}")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="*", metavar="RUNS",
                        help="shipped set names or runs files (default: every shipped set)")
    parser.add_argument("--save", metavar="FILE", type=Path,
                        help="write the figures and every run's errors to FILE (JSON)")
    parser.add_argument("--against", metavar="FILE", type=Path,
                        help="compare with a result an earlier --save wrote")
    parser.add_argument("--top", type=int, default=15, metavar="N",
                        help="sources listed by --against (default 15)")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    try:
        files = resolve_all(args.runs)
        before = read_saved(args.against, "--against") if args.against else None
    except UsageError as e:
        parser.error(str(e))
    if args.save and not args.save.parent.is_dir():
        parser.error(f"--save {args.save}: the folder '{args.save.parent}' does not exist")
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
    for name, value in result.get("shared", {}).items():
        folds = result["shared_held_out"].get(name, {})
        print(f"  {'shared':12} {name}={value:g}  (runs held out at each ratio: "
              + ", ".join(f"{k:g}: {n}" for k, n in sorted(folds.items())) + ")")
    if before is not None:
        print(f"\nagainst {args.against}:")
        print("\n".join(compare(before["runs"], runs, args.top)))
    if args.save:
        try:
            args.save.write_text(json.dumps({"figures": result["figures"],
                                             "framework": result.get("framework", {}),
                                             "shared": result.get("shared", {}),
                                             "runs": runs}, default=str), encoding="utf-8")
        except OSError as e:
            parser.error(f"--save {args.save}: {e.strerror or e}")
    print(f"\n{len(runs)} runs, {time.perf_counter() - start:.1f} s")
    return 0


def compare(old: list[dict], new: list[dict], top: int) -> list[str]:
    """Regimes and the most-moved sources, held out, before -> after, over the runs both hold."""
    was = {(r["id"], r["file"]): r for r in old}
    pairs = [(was[(r["id"], r["file"])], r) for r in new if (r["id"], r["file"]) in was]
    if not pairs:
        return ["  no run in common"]

    def stat(rows: list[dict]) -> str:
        h = summary([r["held_out"] for r in rows])
        return f"{h['median']:6.1%} {h['p90']:6.1%}"

    out = [f"  {'':42} {'runs':>4}  {'before':>13} -> {'after':>13}",
           f"  {'all runs':42} {len(pairs):>4}  {stat([a for a, _ in pairs])} -> "
           f"{stat([b for _, b in pairs])}"]
    for regime in REGIMES:
        sub = [(a, b) for a, b in pairs if regime in b["regimes"]]
        if sub:
            out.append(f"  {regime:42} {len(sub):>4}  {stat([a for a, _ in sub])} -> "
                       f"{stat([b for _, b in sub])}")
    by: dict[str, list[tuple[float, float]]] = {}
    for a, b in pairs:
        by.setdefault(b["source"], []).append((a["held_out"], b["held_out"]))

    def shift(v: list[tuple[float, float]]) -> float:
        return sum(abs(y) - abs(x) for x, y in v)

    moved = sorted((kv for kv in by.items() if abs(shift(kv[1])) > 1e-9),
                   key=lambda kv: -abs(shift(kv[1])))
    out.append("\n  sources that moved most (held out |error| median, signed median):")
    if not moved:
        out.append("  none: every run's held-out error is unchanged")
    for source, v in moved[:top]:
        med = [statistics.median(abs(x) for x, _ in v), statistics.median(abs(y) for _, y in v)]
        sig = [statistics.median(x for x, _ in v), statistics.median(y for _, y in v)]
        out.append(f"  {source[:42]:42} {len(v):>4}  {med[0]:6.1%} -> {med[1]:6.1%}   "
                   f"signed {sig[0]:+6.1%} -> {sig[1]:+6.1%}")
    return out


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
