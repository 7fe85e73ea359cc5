"""The dense GEMMs' shape factor: its form by hand, and its constant against the cuBLASLt tables.

formulas/compute.yaml scales each weight GEMM's large-shape efficiency by d / (d + k) for each
of its three sides; `hardware.gemm_small_dim` (k at BF16) is the least-squares fit of
bench/gemm_shapes.py over Azure's published cuBLASLt shapes. A node default that drifted from the
bench, or a formula that went back to one side, fails here.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import load_script
from dlformula.core import Engine

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench" / "gemm_shapes.py"
GPT3 = str(ROOT / "examples" / "gpt3-175b.yaml")


@pytest.fixture(scope="module")
def bench():
    return load_script(BENCH)


def test_each_side_of_a_gemm_pays_its_own_fixed_cost():
    # GPT-3 175B (h 12288) at tp 8, one 2,048-token micro-batch, BF16 on H100: the attention
    # output GEMM is 2,048 tokens x (12,288 / 8) x 12,288.
    r = Engine().evaluate(GPT3, {"hardware.node": "h100-sxm", "training.precision": "bf16",
                                 "parallelism.tp": 8, "training.micro_batch": 1,
                                 "training.seq_len": 2048})
    k = r["gemm_small_dim"]
    by_hand = 2048 / (2048 + k) * 1536 / (1536 + k) * 12288 / (12288 + k)
    assert r["gemm_attn_out_efficiency"] == pytest.approx(r["gemm_peak_efficiency"] * by_hand)
    # The MLP up GEMM's sides are 2,048, 12,288 and 4 x 12,288 / 8.
    up = 2048 / (2048 + k) * 12288 / (12288 + k) * 6144 / (6144 + k)
    assert r["gemm_mlp_up_efficiency"] == pytest.approx(r["gemm_peak_efficiency"] * up)
    # Halving the token side costs more than halving a side that is already long.
    assert r["gemm_attn_out_efficiency"] < r["gemm_mlp_up_efficiency"]


def test_the_default_is_the_benchs_joint_fit(bench):
    parts = [(name, bench.training_points(points), scale) for name, points, scale in bench.PARTS]
    k, rms = bench.fit("product", parts)
    assert Engine().evaluate(GPT3)["gemm_small_dim"] == k
    # The three-sided form follows the tables better than the smallest side alone.
    _, rms_min = bench.fit("min", parts)
    assert rms < 0.8 * rms_min
    # No shape with a side of 1,024 (wave-quantised) enters the fit.
    assert all(1024 not in p[:3] for _, pts, _ in parts for p in pts)
