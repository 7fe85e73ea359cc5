"""How well the error bands are calibrated on sources they never saw.

An error band (dlformula.validation.bands) is a 90% band: a high percentile (bands.QUANTILE) of
the held-out errors of the validated runs most like a config; beside it, the same percentile of
the same runs' first, blind predictions. Here
each source is taken in turn: its runs get the bands computed from the *other* sources' runs
only, as a planner on a stack no validated source covers would read them, and the bands are
scored on that source's own errors (held out, and first predictions where a blind record holds
one):

- coverage: share of runs whose |error| is inside the band (a 90% band should cover 90%);
  |error| <= w is the measured step between 1 / (1 + w) and 1 / (1 - w) times the estimate,
  the range eval and search print;
- read as ±w: the coverage, and the share of runs whose measured step lies above the top, if
  the band were read as 1 - w to 1 + w times the estimate (how "±w" reads; stop 54);
- width: the median band;
- score: the mean interval score of a 90% band, width + 20 x (|error| - width) when the error
  falls outside (Gneiting and Raftery 2007, eq. 43, for the one-sided |error|); lower is
  better, and a band cannot win it by being wide or narrow alone.

Reads a result `bench/crossval_sources.py --save` wrote and the blind records in
bench/runs/blind/. The shipped traits and pool size come first, then the variants named on the
command line.

    python bench/band_calibration.py SAVED.json [--variant TRAITS:POOL[:PERCENTILE] ...]

e.g. `--variant family,scale,moe,fp8:8:90` (the traits in the order they are kept, the last
given up first; POOL the comparable runs sought before a trait is given up; PERCENTILE the
percentile of their |error| the band takes, default the shipped bands.QUANTILE).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from dlformula.errors import UsageError
from dlformula.validation import bands
from dlformula.validation.blind import first_predictions
from dlformula.validation.fit import read_saved

BLIND = Path(__file__).resolve().parent / "runs" / "blind"
OUTSIDE = 2 / 0.1  # the interval score's penalty for a 90% band: 2 / alpha


def band_rows(saved: list[dict[str, Any]], firsts: dict[str, Any]) -> list[dict[str, Any]]:
    """Each fitted run as bands.json holds it (docs/update_validation.py), with its source."""
    return [{**bands.validated_run_traits(r), "held_out": r["held_out"], "source": r["source"],
             **({"first": firsts[r["id"]].error} if r["id"] in firsts else {})}
            for r in saved if r["family"]]


def score(rows: list[dict[str, Any]], traits: tuple[str, ...], pool: int,
          quantile: float = bands.QUANTILE) -> dict[str, Any]:
    """Coverage, median width and mean interval score of the bands, each source's runs banded
    from the other sources' runs."""
    by_source: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        by_source[r["source"]].append(r)
    kinds: dict[str, list[tuple[bool, float, float, bool, bool]]] = {"held_out": [],
                                                                      "first": []}
    for source, own in by_source.items():
        others = [r for r in rows if r["source"] != source]
        seen: dict[tuple, Any] = {}
        for r in own:
            key = tuple(r[t] for t in traits)
            if key not in seen:
                seen[key] = bands.comparable_band(r, others, traits, pool, quantile)
            band = seen[key]
            if band is None:
                continue
            for kind, width in (("held_out", band.width), ("first", band.width_new_source)):
                if width is None or r.get(kind) is None:
                    continue
                err = abs(r[kind])
                measured = 1 / (1 + r[kind])  # the measured step, as a multiple of the estimate
                kinds[kind].append((err <= width, width,
                                    width + OUTSIDE * max(0.0, err - width),
                                    1 - width <= measured <= 1 + width, measured > 1 + width))
    return {kind: {"runs": len(v), "coverage": sum(x[0] for x in v) / len(v),
                   "width": statistics.median(x[1] for x in v),
                   "score": statistics.fmean(x[2] for x in v),
                   "read_as_pm": sum(x[3] for x in v) / len(v),
                   "above_pm": sum(x[4] for x in v) / len(v)}
            for kind, v in kinds.items() if v}


def _variant(text: str) -> tuple[tuple[str, ...], int, float]:
    traits, _, rest = text.partition(":")
    pool, _, quantile = rest.partition(":")
    names = tuple(t.strip() for t in traits.split(",") if t.strip())
    unknown = [t for t in names if t not in bands.run_traits("x", 1, False, False)]
    try:
        q = float(quantile) if quantile else float(bands.QUANTILE)
    except ValueError:
        q = -1.0
    if (not names or names[0] != "family" or unknown or not pool.isdigit() or int(pool) < 1
            or not 0 < q <= 100):
        raise UsageError(f"--variant {text}: give traits (family first; of "
                         f"{', '.join(bands.run_traits('x', 1, False, False))}), a pool size "
                         "and optionally a percentile (0-100], e.g. family,scale,moe,fp8:8:90")
    return names, int(pool), q


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("saved", type=Path, metavar="SAVED.json",
                        help="a result bench/crossval_sources.py --save wrote")
    parser.add_argument("--variant", action="append", default=[],
                        metavar="TRAITS:POOL[:PERCENTILE]",
                        help="another trait order, pool size and percentile to score "
                             "(repeatable)")
    args = parser.parse_args(argv)
    try:
        variants = ([(bands.TRAITS, bands.POOL_RUNS, float(bands.QUANTILE))]
                    + [_variant(v) for v in args.variant])
        saved = read_saved(args.saved)["runs"]
    except UsageError as e:
        parser.error(str(e))
    if not all({"family", "traits"} <= r.keys() for r in saved):
        parser.error(f"{args.saved}: its runs carry no family and traits; save it again with "
                     "python bench/crossval_sources.py --save")
    rows = band_rows(saved, first_predictions(BLIND))
    print(f"{len(rows)} runs of {len({r['source'] for r in rows})} sources; each source banded "
          "from the others' runs\n")
    print(f"{'traits (kept longest first) : pool : pct':44} {'held out':>28}   "
          f"{'first prediction':>28}")
    print(f"{'':44} {'cover':>7} {'width':>6} {'score':>6} {'runs':>5}   "
          f"{'cover':>7} {'width':>6} {'score':>6} {'runs':>5}")
    read: list[str] = []
    for i, (traits, pool, quantile) in enumerate(variants):
        s = score(rows, traits, pool, quantile)
        cells = "   ".join(f"{s[k]['coverage']:7.1%} {s[k]['width']:6.1%} {s[k]['score']:6.3f} "
                           f"{s[k]['runs']:>5}" if k in s else f"{'-':>28}"
                           for k in ("held_out", "first"))
        label = f"{','.join(traits)} : {pool} : {quantile:g}" + (" (shipped)" if i == 0 else "")
        print(f"{label:44} {cells}")
        read.append("   ".join(f"{s[k]['read_as_pm']:7.1%} {s[k]['above_pm']:7.1%}{'':12}"
                               if k in s else f"{'-':>28}" for k in ("held_out", "first")))
    print(f"\nthe same bands read as ±w (1 - w to 1 + w times the estimate), as they printed "
          f"until stop 54:\n{'':44} {'cover':>7} {'above':>7}{'':12}   {'cover':>7} {'above':>7}")
    for (traits, pool, quantile), cells in zip(variants, read, strict=True):
        print(f"{','.join(traits) + f' : {pool} : {quantile:g}':44} {cells}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
