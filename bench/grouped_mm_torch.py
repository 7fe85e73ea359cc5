"""PyTorch's grouped GEMM (torch._grouped_mm) on B200, from torchao's published benchmark.

Data: pytorch/ao @ 36027d82d, torchao/prototype/moe_training/README.md, section "Autograd
function": the BF16 forward + backward time of torch._grouped_mm (column bf16_fwd_bwd_us) for
M tokens, N x K expert weights and G groups on a B200 (torch 2.10 nightly, torchao 0.14), at
the Llama 4 Scout and DeepSeek-V3 expert shapes. These are the grouped GEMMs torchtitan's MoE
experts run (torchtitan/models/moe: torch._grouped_mm when use_grouped_mm).

A forward + backward of one grouped GEMM is three GEMMs of 2 M N K FLOPs (output, input
gradient, weight gradient). This script prints each point's sustained share of the B200's
BF16 peak (hardware/b200.yaml), that share divided by the model's shape factor, the product of
d / (d + k) over tokens per group, N and K (k the MoE plugin's grouped_gemm_small_dim), and the
mean of the latter: hardware.grouped_mm_efficiency_torch in hardware/b200.yaml.

    python bench/grouped_mm_torch.py
"""

from __future__ import annotations

import math
import statistics

# (M, N, K, G, bf16 forward + backward time in microseconds), as printed
POINTS = [
    (128000, 8192, 5120, 1, 43140.20),
    (128000, 8192, 5120, 2, 39487.60),
    (128000, 8192, 5120, 4, 39189.20),
    (128000, 8192, 5120, 8, 37700.70),
    (128000, 2048, 7168, 1, 13064.80),
    (128000, 2048, 7168, 2, 14900.20),
    (128000, 2048, 7168, 4, 15823.60),
    (128000, 2048, 7168, 8, 14966.80),
]
PEAK_BF16 = 2250e12  # hardware/b200.yaml peak_flops_bf16
SMALL_DIM = 128  # plugins/moe/formulas/moe.yaml grouped_gemm_small_dim (BF16)


def points() -> list[tuple[str, float, float, float]]:
    """(shape, TFLOP/s, share of the BF16 peak, that share over the shape factor) per point."""
    out = []
    for m, n, k, g, us in POINTS:
        rate = 6 * m * n * k / (us * 1e-6)
        share = rate / PEAK_BF16
        shape = math.prod(d / (d + SMALL_DIM) for d in (m / g, n, k))
        out.append((f"{m}, {n}, {k}, {g}", rate / 1e12, share, share / shape))
    return out


def main() -> None:
    rows = points()
    print(f"{'M, N, K, G':>26}  {'TFLOP/s':>8}  {'of peak':>7}  {'/ shape':>7}")
    for shape, tflops, share, large in rows:
        print(f"{shape:>26}  {tflops:8.0f}  {share:7.3f}  {large:7.3f}")
    shares = [large for *_, large in rows]
    print(f"mean large-shape share of the BF16 peak: {statistics.mean(shares):.3f} "
          f"(range {min(shares):.3f}-{max(shares):.3f})")


if __name__ == "__main__":
    main()
