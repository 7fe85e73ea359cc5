"""The node files' torch._grouped_mm rate against the benchmark it comes from.

`grouped_mm_efficiency_torch` (formulas/hardware.yaml) is the mean large-shape share of the B200's
BF16 peak that bench/grouped_mm_torch.py computes from torchao's published timings. A node figure
that drifted from those numbers, or a bench constant that no longer matches the model, fails here.
"""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from conftest import load_script
from dlformula.core import Engine

BENCH = Path(__file__).resolve().parent.parent / "bench" / "grouped_mm_torch.py"
MOE = str(Path(__file__).resolve().parent.parent / "examples" / "gpt4-like-moe.yaml")


@pytest.fixture(scope="module")
def bench():
    return load_script(BENCH)


@pytest.fixture(scope="module")
def b200():
    return Engine().evaluate(MOE, {"hardware.node": "b200"})


def test_the_bench_uses_the_models_peak_and_small_dimension(bench, b200):
    assert bench.PEAK_BF16 == pytest.approx(b200["peak_flops_bf16"])
    assert bench.SMALL_DIM == pytest.approx(b200["grouped_gemm_small_dim"])


@pytest.mark.parametrize("node", ["b200", "gb200-nvl72", "b300", "gb300-nvl72"])
def test_the_blackwell_nodes_carry_the_benchmarks_mean(bench, node):
    rows = bench.points()
    assert len(rows) == 8 and all(0.3 < share < 0.4 for _, _, share, _ in rows)
    mean = statistics.mean(large for *_, large in rows)
    got = Engine().evaluate(MOE, {"hardware.node": node})["grouped_mm_efficiency_torch"]
    assert got == pytest.approx(round(mean, 2))
