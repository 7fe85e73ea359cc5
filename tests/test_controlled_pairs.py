"""bench/controlled_pairs.py: runs are paired only when their mapped inputs differ in few keys.

The pairing decides which mechanism a pair tests, so it is checked on hand-made runs: pairs
are grouped by exactly the inputs that differ, runs differing in more keys than allowed are not
paired, and the logged model / measured ratio is the one computed by hand.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from conftest import load_script
from dlformula.validation.fit import FitRun

BENCH = Path(__file__).resolve().parent.parent / "bench" / "controlled_pairs.py"


@pytest.fixture(scope="module")
def bench():
    return load_script(BENCH)


def run(rid: str, target: float, **values) -> FitRun:
    base = {"tp": 1, "pp": 1, "micro_batch": 1, "precision": "bf16"}
    base.update(values)
    return FitRun(rid, "runs.yaml", (), target, "h100-sxm", "H100", "src", {}, base)


def test_pairs_grouped_by_the_inputs_that_differ(bench):
    runs = [run("a", 2.0), run("b", 1.0, micro_batch=2), run("c", 1.5, precision="fp8"),
            run("d", 1.0, tp=2, pp=2, micro_batch=4)]
    steps = [2.0, 1.2, 1.2, 1.0]  # the model's step time of each run, in order
    grouped = bench.pairs(runs, steps, max_diff=2)
    assert sorted(grouped) == [("micro_batch",), ("micro_batch", "precision"), ("precision",)]
    off, first, second, measured, model = grouped[("micro_batch",)][0]
    assert (first.id, second.id) == ("a", "b")
    assert measured == pytest.approx(2.0) and model == pytest.approx(2.0 / 1.2)
    assert off == pytest.approx(math.log((2.0 / 1.2) / 2.0))
    # a and d differ in tp, pp and micro_batch: three keys, beyond max_diff = 2
    assert all("d" not in (p[1].id, p[2].id) for group in grouped.values() for p in group)
    assert ("micro_batch", "pp", "tp") in bench.pairs(runs, steps, max_diff=3)
