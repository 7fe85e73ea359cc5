"""How a GEMM's efficiency falls with its shape: the node files' shape factor against cuBLASLt.

Data: Azure/AI-benchmarking-guide, Azure_Results/ND_A100_v4_results.md (commit 3bb66cac; FP16
on A100 SXM4 80GB), ND_H200_v5_results.md (commit 7f20e5fa; FP8 on H200) and
ND_GB200_v6_results.md (commit 2a370be6; FP8 on GB200): cuBLASLt TFLOP/s at the m x n x k shapes
the guide runs, random data, 10,000 warm-up iterations.

The model's GEMM formulas (formulas/compute.yaml gemm_*_efficiency; the MoE plugin's
grouped_gemm_efficiency) scale a large-GEMM efficiency by a factor of the GEMM's shape. This
script fits, for two candidate factors, the small dimension s (at the BF16 scale; FP8 doubles it,
formulas/compute.yaml gemm_small_dim_effective; `k` in the code) and a free large-shape rate per
part, by least squares on log TFLOP/s, and prints each point's residual:

    min:      d / (d + s), d the smallest of m, n, k      (dlformula before stop 43)
    product:  m / (m + s) * n / (n + s) * k / (k + s)      (each side's own fixed cost)

Points with a side of 1,024 are left out: their few output tiles leave SMs idle (wave
quantisation), a regime below the GEMMs of training steps that neither factor follows. The
joint fit over the three parts gives hardware.gemm_small_dim's default.

    python bench/gemm_shapes.py
"""

from __future__ import annotations

import math

# (m, n, k, TFLOP/s) as printed
A100_FP16 = [
    (1024, 1024, 1024, 119.4), (2048, 2048, 2048, 221.8), (4096, 4096, 4096, 228.0),
    (8192, 8192, 8192, 253.7), (16384, 16384, 16384, 256.5), (1024, 2145, 1024, 132.8),
    (6144, 12288, 12288, 250.8), (802816, 192, 768, 157.8),
]
H200_FP8 = [
    (1024, 1024, 1024, 290.8), (2048, 2048, 2048, 1013.4), (4096, 4096, 4096, 1249.1),
    (8192, 8192, 8192, 1300.6), (16384, 16384, 16384, 1366.3), (32768, 32768, 32768, 1349.5),
    (1024, 2145, 1024, 407.9), (6144, 12288, 12288, 1318.0), (802816, 192, 768, 717.5),
]
GB200_FP8 = [
    (1024, 1024, 1024, 489.2), (2048, 2048, 2048, 2243.6), (4096, 4096, 4096, 2834.6),
    (8192, 8192, 8192, 2876.6), (16384, 16384, 16384, 2906.9), (32768, 32768, 32768, 2825.6),
    (1024, 2145, 1024, 1022.2), (6144, 12288, 12288, 2895.6), (802816, 192, 768, 1459.5),
]
# (name, points, k's multiple: FP8 doubles it)
PARTS = [("A100 FP16", A100_FP16, 1), ("H200 FP8", H200_FP8, 2), ("GB200 FP8", GB200_FP8, 2)]


def factor(form: str, dims: tuple[int, int, int], k: float) -> float:
    if form == "min":
        d = min(dims)
        return d / (d + k)
    return math.prod(d / (d + k) for d in dims)


def residuals(form: str, points: list, k: float) -> list[float]:
    """log(measured) - log(rate * factor), the free rate at its least-squares value."""
    logs = [math.log(t) - math.log(factor(form, (m, n, kk), k)) for m, n, kk, t in points]
    mean = sum(logs) / len(logs)
    return [x - mean for x in logs]


def fit(form: str, parts: list) -> tuple[int, float]:
    """The k (BF16 scale, step 8) minimising the summed squared log residual over `parts`."""
    best = None
    for k in range(0, 1025, 8):
        sse = sum(r * r for _, pts, scale in parts for r in residuals(form, pts, k * scale))
        n = sum(len(pts) for _, pts, _ in parts)
        if best is None or sse < best[0]:
            best = (sse, k, math.sqrt(sse / n))
    assert best is not None
    return best[1], best[2]


def training_points(points: list) -> list:
    """The points without a dimension of 1,024 (the wave-quantised ones)."""
    return [p for p in points if 1024 not in p[:3]]


def main() -> None:
    for form in ("min", "product"):
        print(f"{form} factor")
        for name, pts, scale in PARTS:
            k, rms = fit(form, [(name, training_points(pts), scale)])
            print(f"  {name}: k = {k} (BF16 scale), rms log residual {rms:.3f}")
        parts = [(n, training_points(p), s) for n, p, s in PARTS]
        k, rms = fit(form, parts)
        print(f"  all parts: k = {k}, rms {rms:.3f}")
        for name, pts, scale in PARTS:
            res = residuals(form, training_points(pts), k * scale)
            cells = "  ".join(f"{m}x{n}x{kk} {100 * (math.exp(r) - 1):+.0f}%"
                              for (m, n, kk, _), r in zip(training_points(pts), res))
            print(f"    {name}: {cells}")


if __name__ == "__main__":
    main()
