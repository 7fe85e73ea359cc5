"""Residuals: does the held-out step-time error drift with what the model itself predicts?

A mechanism priced right leaves no trend in the errors of the runs it dominates: the runs the
model gives a large pipeline bubble, a large exposed-communication share or a large attention
share should be neither slower nor faster than measured, on the whole, than the others. This
predicts every shipped run (or the named sets) leave-one-source-out, as bench/crossval_sources.py
does, evaluates the quantities below for each run, and prints, per quantity, bins of runs with
their count, the median signed error (model / measured - 1: positive is too slow) and the
median |error|. A bin whose signed median stands far from the others names a mechanism to
look at; `--show QUANTITY` lists the sources in each of its bins.

`--within` bins each run's error with its source's bias divided out (the source's median of
log(predicted / measured); sources of fewer than three runs are left out, as in
bench/source_scatter.py). A trend that survives it is one a mechanism depending on the layout,
model or batch would have to explain; one that vanishes was a few sources' bias.

    python bench/residuals.py [RUNS ...] [--show QUANTITY] [--within]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import Counter
from typing import Any

from dlformula.core import Engine
from dlformula.errors import UsageError
from dlformula.validation.fit import Predictor, bias_floor, collect, cross_validate
from dlformula.validation.shipped import resolve_all

# quantity -> bin edges (a run falls in [lo, hi)); each is a quantity of the model
BINS: dict[str, list[float]] = {
    "gpus": [1, 9, 65, 257, 1025, 4097, 1e9],
    "tp": [1, 2, 4, 8, 1e9],
    "pp": [1, 2, 8, 16, 1e9],
    "microbatches": [1, 2, 5, 17, 65, 257, 1e12],
    "microbatch_tokens": [0, 2049, 4097, 8193, 16385, 65537, 1e12],
    "pipeline_bubble_fraction": [0, 0.001, 0.05, 0.1, 0.2, 1e9],
    "exposed_comm_share": [0, 0.02, 0.05, 0.1, 0.2, 0.4, 1e9],
    "attention_share": [0, 0.05, 0.1, 0.2, 0.4, 1e9],
    "mfu": [0, 0.2, 0.3, 0.4, 0.5, 0.6, 1e9],
    "seq_len": [0, 4097, 8193, 16385, 32769, 65537, 131073, 1e12],
    # MoE runs only (a dense run has no value and is left out of these): how many scale-up
    # domains the expert-parallel group spans, and the all-to-all's share of the step
    "ep_domains": [1, 2, 3, 9, 1e9],
    "ep_comm_share": [0, 0.02, 0.05, 0.1, 0.2, 0.4, 1e9],
}
DERIVED = {"attention_share": ("attention_core_time", "layer_forward_time"),
           "ep_comm_share": ("ep_comm_time", "step_time")}
MOE_ONLY = {"ep_domains", "ep_comm_share"}


def bins(values: list[float | None], errors: list[float],
         edges: list[float]) -> list[dict[str, Any]]:
    """The runs whose value lies in each [lo, hi) of edges, with their signed and |error| medians;
    empty bins, and runs without a value (None: a MoE quantity of a dense run), are left out."""
    out = []
    for lo, hi in zip(edges[:-1], edges[1:]):
        inside = [e for v, e in zip(values, errors) if v is not None and lo <= v < hi]
        if inside:
            out.append({"lo": lo, "hi": hi, "n": len(inside),
                        "signed": statistics.median(inside),
                        "abs": statistics.median(abs(e) for e in inside)})
    return out


def quantity(result: dict[str, Any], name: str) -> float | None:
    """The named quantity of an evaluated run, or None for a MoE quantity of a dense run (one
    expert or none; the MoE plugin's formulas give it a value all the same)."""
    if name in MOE_ONLY and float(result.get("experts") or 0) <= 1:
        return None
    if name in DERIVED:
        num, den = DERIVED[name]
        if result.get(num) is None:
            return None
        return float(result[num]) / max(float(result[den]), 1e-30)
    return None if result.get(name) is None else float(result[name])


def within_source(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows ({id, file, source, held_out, ...}) of the sources bias_floor keeps (its default
    minimum of runs), each with held_out replaced by its error with its source's bias divided
    out."""
    floor = bias_floor(rows)
    return [{**r, "held_out": floor[(r["id"], r["file"])]} for r in rows
            if (r["id"], r["file"]) in floor]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="*", metavar="RUNS",
                        help="shipped set names or runs files (default: every shipped set)")
    parser.add_argument("--show", default="", metavar="QUANTITY",
                        help="list the sources in each bin of one quantity: " + ", ".join(BINS))
    parser.add_argument("--within", action="store_true",
                        help="bin each run's error with its source's bias divided out "
                             "(sources of fewer than 3 runs left out)")
    args = parser.parse_args(argv)
    if args.show and args.show not in BINS:
        parser.error(f"--show {args.show}: not a binned quantity; choose one of {', '.join(BINS)}")
    start = time.perf_counter()
    try:
        files = resolve_all(args.runs)
    except UsageError as e:
        parser.error(str(e))
    engine = Engine()
    runs = collect(engine, files)
    held = {(r["file"], r["id"]): r for r in cross_validate(engine, runs)["runs"]}
    names = Predictor(engine).names  # config key -> input name, as the fit predicts
    rows = []
    for run in runs:
        row = held[(run.file, run.id)]
        # the figures the run was predicted at when its source was held out
        point = {names[k]: v for k, v in (row["held_out_figures"] or {}).items()}
        result = engine.model.evaluate({**run.values, **point})
        rows.append({"id": run.id, "file": run.file, "source": run.source,
                     "held_out": row["held_out"],
                     "values": {q: quantity(result, q) for q in BINS}})
    if args.within:
        rows = within_source(rows)
    errors = [r["held_out"] for r in rows]
    sources = [r["source"] for r in rows]
    values = {q: [r["values"][q] for r in rows] for q in BINS}
    print(f"{len(rows)} runs, held out by source"
          + (", each source's bias divided out" if args.within else "")
          + f"; {time.perf_counter() - start:.0f} s")
    print(f"{'quantity':26} {'bin':>16} {'runs':>5} {'signed':>8} {'|error|':>8}")
    for q, edges in BINS.items():
        for i, b in enumerate(bins(values[q], errors, edges)):
            label = "[{:g}, {})".format(b["lo"], "" if b["hi"] >= 1e9 else f"{b['hi']:g}")
            print(f"{q if i == 0 else '':26} {label:>16} {b['n']:5} "
                  f"{b['signed']:+8.1%} {b['abs']:8.1%}")
    if args.show:
        print(f"\nsources by bin of {args.show}:")
        for lo, hi in zip(BINS[args.show][:-1], BINS[args.show][1:]):
            inside = Counter(s for v, s in zip(values[args.show], sources)
                             if v is not None and lo <= v < hi)
            if inside:
                top = ", ".join(f"{s} {n}" for s, n in inside.most_common(4))
                print(f"  [{lo:g}, {'' if hi >= 1e9 else f'{hi:g}'}): {top}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
