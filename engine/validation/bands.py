"""How sure an estimate is: error bands from the validated runs most like it.

docs/update_validation.py writes bands.json beside this module: every validated run's
leave-one-source-out step-time error (its prediction with the fitted figures refitted without
its source, engine/validation/fit.py) and the traits comparable runs share. `band` picks the
runs comparable to a config (same hardware family, dense or MoE, ZeRO-3 / FSDP or not,
GPU-count bracket, FP8 or 16-bit), relaxing the traits in reverse order of importance until at
least POOL_RUNS remain, and returns a 90% band: the |relative error| within which 90% of a new
source's runs fall. Its text states it as the range the measured step time fell in, as a
multiple of the estimate: an error e is a prediction of (1 + e) x the measured step, so
|e| <= w puts the measured step between 1 / (1 + w) and 1 / (1 - w) times the estimate, a
range longer above than below (read as "±w" around the estimate, it would miss half the slow
side). Days, GPU-hours, cost and energy scale with step time; throughput, MFU and HFU with its
inverse, whose range is 1 - w to 1 + w times the estimate. Beside it, the same band of the same
runs' first, blind predictions (`first` in bands.json): the range to read on a stack, cluster
or model family no validated source covers. bench/band_calibration.py scores the traits'
order, POOL_RUNS and QUANTILE.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from functools import lru_cache
from typing import Any, NamedTuple

from .stats import percentile

MIN_RUNS = 8  # fewest errors a band is taken over (calibration runs, first predictions)
# The family bands.json gives a node no hardware family fits (its figures are the node file's,
# not fitted), followed by the node's id: its own validated runs, however few, are its band.
UNFITTED = "node:"


def band_family(family: str | None, node: str) -> str:
    """The family a run's band is sought in: its fitted family, or the node's own (UNFITTED)."""
    return family or UNFITTED + node


def unfitted_node(family: Any) -> str | None:
    """The node's id when `family` is a node no family fits (band_family's UNFITTED), else None."""
    text = str(family)
    return text[len(UNFITTED):] if text.startswith(UNFITTED) else None

# Comparable runs a band is sought over: traits are given up until this many share the rest.
# The traits, their order and this count are the ones whose bands, computed for each source
# from the other sources' runs, score best on that source's runs (python bench/band_calibration.py;
# docs/validation.md, stop 51): with sharding and MoE kept longest, the bands are narrower at the
# same coverage.
POOL_RUNS = 30
# The percentile of the comparable runs' |error| that a 90% band takes. A source's runs share
# its bias (its cluster, release, timing), so the errors of a source the runs do not include
# spread wider than the runs among themselves: their 90th percentile covers 85% of each
# source's runs when computed from the other sources', the 95th 91% (first predictions: 85%
# and 90%), and it scores best on the interval score of a 90% band (python
# bench/band_calibration.py; docs/validation.md, stop 52).
QUANTILE = 95
# Traits in the order they are given up (the last first) when too few runs share them all.
TRAITS = ("family", "moe", "fsdp", "scale", "fp8")
SCALES = ((64, "< 64 GPUs"), (1024, "64-1,023 GPUs"), (4096, "1,024-4,095 GPUs"),
          (float("inf"), "≥ 4,096 GPUs"))


def step_range(width: float) -> tuple[float, float]:
    """The measured step time, as a multiple of the estimate, that a band of |relative error|
    `width` allows: (1 / (1 + width), 1 / (1 - width)); the upper end is infinite from a width
    of 1 (an estimate twice as long as the measured step or more bounds nothing above)."""
    return 1 / (1 + width), (1 / (1 - width) if width < 1 else math.inf)


def range_text(width: float, around: Callable[[float], str] | None = None) -> str:
    """`width`'s step range in words: "0.74x to 1.56x" (of the estimate), or, with `around` (a
    multiple of the estimate -> that many of its units, e.g. seconds), "13.0 s to 27.5 s"."""
    low, high = step_range(width)
    say = around or (lambda x: f"{x:.2f}x")
    return f"{say(low)} or more" if math.isinf(high) else f"{say(low)} to {say(high)}"


class Band(NamedTuple):
    width: float  # half-width of the 90% band, as |relative error|
    n: int
    matched: tuple[str, ...]  # the traits the comparable runs share, as words
    # the same band of the same runs' first, blind predictions (made before their source could
    # change the model; dlformula.validation.blind), when at least MIN_RUNS of them have one
    width_new_source: float | None = None
    n_new_source: int = 0
    basis: str = ""  # what the width is, in words (comparable_band and band_for write it)
    # False for a node no family fits: its own runs (few, and few sources) are the band, which
    # then claims no 9-in-10 coverage
    claimed: bool = True

    def text(self, around: Callable[[float], str] | None = None) -> str:
        """Where the measured step time fell, in 9 runs of 10 of the comparable runs: as
        multiples of the estimate, or through `around` (see range_text) in its units."""
        new = (f"; {range_text(self.width_new_source, around)} for a new source"
               if self.width_new_source is not None else "")
        of = "" if around else " the estimate"
        if not self.claimed:  # a node no family fits, or too few runs: no 9-in-10 claim
            only = "only " if self.n < MIN_RUNS else ""
            return (f"{range_text(self.width, around)}{of} over the {only}{self.n} validated "
                    f"runs on {self.matched[0]}: no 90% band claimed")
        return (f"{range_text(self.width, around)}{of} in 9 runs of 10, {self.n} comparable "
                f"runs{new}")

    def as_dict(self) -> dict[str, Any]:
        def ends(width: float | None) -> tuple[float | None, float | None]:
            if width is None:
                return None, None
            low, high = step_range(width)
            return low, (None if math.isinf(high) else high)

        low, high = ends(self.width)
        low_new, high_new = ends(self.width_new_source)
        return {"width": self.width, "coverage": 0.9 if self.claimed else None,
                "runs": self.n,
                "matched": list(self.matched), "basis": self.basis,
                "step_time_low": low, "step_time_high": high,
                "width_new_source": self.width_new_source, "runs_new_source": self.n_new_source,
                "step_time_low_new_source": low_new, "step_time_high_new_source": high_new,
                "reads": "width is the band's |relative error| (estimate / measured - 1); "
                         "step_time_low and step_time_high are the measured step time it "
                         "allows as multiples of the estimate, 1 / (1 + width) and 1 / (1 - "
                         "width) (null above when width >= 1): days, GPU-hours, cost and "
                         "energy scale with step time, throughput, MFU and HFU with its "
                         "inverse (1 - width to 1 + width times the estimate)",
                "basis_new_source": "the same percentile of the same runs' first predictions, "
                                    "made before their source could change the model"}


def scale(gpus: float) -> str:
    return next(label for limit, label in SCALES if gpus < limit)


def run_traits(family: str | None, gpus: float, moe: bool, fp8: bool,
               fsdp: bool = False) -> dict[str, Any]:
    return {"family": family, "scale": scale(gpus), "moe": moe, "fp8": fp8, "fsdp": fsdp}


def validated_run_traits(run: dict[str, Any]) -> dict[str, Any]:
    """The traits of a run as cross-validation reports it (fit.cross_validate: family and
    traits), the form bands.json holds them in."""
    t = run["traits"]
    return run_traits(run["family"], t["gpus"], t["moe"], t["precision"] in ("fp8", "nvfp4"),
                      t["zero"] >= 3)


@lru_cache(maxsize=1)
def table() -> dict[str, Any]:
    """The shipped bands.json: {"families": {node: family}, "runs": [...]} (empty without it).
    Read beside this module rather than through importlib.resources: eval reads it on every
    run and its start-up path stays small."""
    import os

    path = os.path.join(os.path.dirname(__file__), "bands.json")
    try:
        with open(path, encoding="utf-8") as fh:
            return dict(json.load(fh))
    except (OSError, ValueError):
        return {"families": {}, "runs": []}


def band_for(values: dict[str, Any], node: Any,
             data: dict[str, Any] | None = None) -> Band | None:
    """The band of a config's step time (None when no validated run is comparable). `node` is
    a resources.Node (or its id). A node calibrated on at least MIN_RUNS runs has its own band,
    their left-out errors; one calibrated on fewer takes the band of the node it came from."""
    data = table() if data is None else data
    node_id = node if isinstance(node, str) or node is None else node.id
    errors = getattr(node, "calibration_errors", ())
    if len(errors) >= MIN_RUNS:  # the cluster's own runs: no other source's bias to cover
        return Band(percentile([abs(e) for e in errors], 90), len(errors),
                    ("calibration runs of this node, each left out",),
                    basis="the 90th percentile of the left-out |step-time error| of this "
                          "node's calibration runs")
    family = data["families"].get(node_id or "")
    if family is None:
        family = data["families"].get(getattr(node, "derived_from", "") or "")
    if family is None:
        return None
    want = run_traits(family, float(values.get("gpus", 1)),
                      float(values.get("experts", 0) or 0) > 1, _fp8(values),
                      float(values.get("zero", 0) or 0) >= 3)
    return comparable_band(want, data["runs"])


def comparable_band(want: dict[str, Any], runs: list[dict[str, Any]],
                    traits: tuple[str, ...] = TRAITS, pool: int = POOL_RUNS,
                    quantile: float = QUANTILE) -> Band | None:
    """The band of the runs sharing `want`'s traits, the last of `traits` given up first until
    at least `pool` runs remain: the `quantile` percentile of their |error| (bench/
    band_calibration.py scores other orders, pools and percentiles)."""
    kept = list(traits)
    while True:
        same = [r for r in runs if all(r.get(t, False) == want[t] for t in kept)]
        if len(same) >= pool or len(kept) == 1:
            break
        kept.pop()
    if not same:
        return None
    width = percentile([abs(r["held_out"]) for r in same], quantile)
    first = [abs(r["first"]) for r in same if r.get("first") is not None]
    new = percentile(first, quantile) if len(first) >= MIN_RUNS else None
    unfitted = unfitted_node(want["family"]) is not None
    claimed = not unfitted and len(same) >= MIN_RUNS
    if unfitted:  # a node's own runs (UNFITTED): few, of few sources, no coverage to claim
        basis = (f"the {quantile:g}th percentile of the |step-time error| of the {len(same)} "
                 "validated runs on this node, whose figures are not fitted: no 90% band claimed")
    elif not claimed:  # a fitted family whose comparable runs are fewer than MIN_RUNS
        basis = (f"the {quantile:g}th percentile of the leave-one-source-out |step-time error| "
                 f"of the only {len(same)} comparable validated runs, too few for a 90% band: "
                 "none claimed")
    else:
        basis = (f"the {quantile:g}th percentile of the leave-one-source-out |step-time error| "
                 "of comparable validated runs" + (", which covers 90% of the runs of a source "
                                                   "they do not include" if quantile == QUANTILE
                                                   else ""))
    return Band(width, len(same), tuple(_words(t, want[t]) for t in kept), new,
                len(first) if new is not None else 0, basis, claimed)


def _fp8(values: dict[str, Any]) -> bool:
    # precision is a choice input: its codes for fp8 and nvfp4 are 2 and 4
    # (formulas/training.yaml); both are low-precision GEMMs against 16-bit ones
    v = values.get("precision")
    return v in ("fp8", "nvfp4", 2, 4)


def _words(trait: str, value: Any) -> str:
    if trait == "family":
        if (node := unfitted_node(value)) is not None:
            return f"the {node} node (its figures not fitted)"
        return f"{value} family"
    if trait == "moe":
        return "MoE" if value else "dense"
    if trait == "fp8":
        return "FP8" if value else "16-bit"  # NVFP4 runs are grouped with FP8 ones
    if trait == "fsdp":
        return "ZeRO-3 / FSDP" if value else "ZeRO 0-2"
    return str(value)
