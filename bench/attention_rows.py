"""Fused attention's per-row cost, fitted on the kernels' own benchmarks.

Data: the FlashAttention-2 forward + backward speeds its repository plots
(Dao-AILab/flash-attention @ 0251105, assets/flash2_a100_fwd_bwd_benchmark.png and
flash2_h100_fwd_bwd_benchmark.png: the bar labels, TFLOP/s, 512-16K tokens, below as FA2) and
bench/data/cudnn_sdpa_training.csv, the BF16, non-deterministic rows of
NVIDIA/cudnn-frontend @ 3929da2, benchmark/sdpa_benchmark_training/results (H200 with
cuDNN 9.19, GB200 and GB300 with cuDNN 9.22; the Llama 3.1, DeepSeek-V3, Kimi K2.6 and
gpt-oss attention shapes at 2K-32K tokens), forward and backward times per shape.

The model prices a fused kernel's forward + backward time as c x (keys a query row attends
to + k) per query row (formulas/compute.yaml attention_core_time, the node's
attention_row_overhead k). This script:

1. fits c and k by least squares per GPU, shape and mask (FlashAttention-2 on A100 and H100,
   cuDNN on H200, GB200 and GB300), and prints the measured and fitted rate at each length;
2. predicts the sliding-window shapes (gpt-oss: 128 tokens on GB200 / GB300, 1,024 on H200),
   which the fit never sees, from the causal Llama 3.1 fit of the same GPU and the model's
   head-width factor for 64-wide heads;
3. prints GB300's speed against GB200's over the shapes both ran (the gb300 node's
   attention_rate_ratio).

    python bench/attention_rows.py
"""

from __future__ import annotations

import argparse
import csv
import statistics
from collections import defaultdict
from pathlib import Path

import numpy as np

DATA = Path(__file__).parent / "data" / "cudnn_sdpa_training.csv"
PEAK_BF16 = {"H200": 989e12, "GB200": 2500e12, "GB300": 2500e12}
HEAD64_FACTOR = 0.5**0.49  # formulas/hardware.yaml attention_head_exponent_fa3
# FlashAttention-2's plotted forward + backward TFLOP/s at 512, 1K, 2K, 4K, 8K, 16K tokens
# (None: not plotted); FLOPs counted as the benchmark counts them (causal: half the square).
FA2 = {
    ("A100", "causal, head 128"): [99, 133, 155, 173, 182, 189],
    ("A100", "causal, head 64"): [88, 119, 140, 156, 165, 171],
    ("A100", "no mask, head 128"): [None, None, 187, 196, 201, 203],
    ("H100", "causal, head 128"): [163, 221, 265, 294, 308, 328],
    ("H100", "causal, head 64"): [141, 192, 232, 257, 273, 284],
    ("H100", "no mask, head 128"): [248, 294, 320, 326, 335, 338],
}
FA2_SEQ = [512, 1024, 2048, 4096, 8192, 16384]


def fa2_fits() -> None:
    print("FlashAttention-2 (its repository's plots): k (keys) and TFLOP/s, plotted / fitted")
    for (gpu, shape), speeds in FA2.items():
        pts = [(s, v) for s, v in zip(FA2_SEQ, speeds) if v]
        span = np.array([s / 2 if shape.startswith("causal") else s for s, _ in pts], float)
        rate = np.array([v for _, v in pts], float)
        k, top = row_cost_fit(span, 1 / rate)
        cells = "  ".join(f"{s // 1024 or 0.5}K {v:.0f}/{top * sp / (sp + k):.0f}"
                          for (s, v), sp in zip(pts, span))
        print(f"  {gpu:5} {shape:18} k = {k:4.0f}   {cells}")


def attended_pairs(mask: str, seq: int, window: int | None) -> int:
    """(query, key) pairs one head computes, counted as the benchmark counts its FLOPs."""
    if mask == "no_mask":
        return seq * seq
    if window and seq > window:
        return window * (window + 1) // 2 + (seq - window) * window
    return seq * (seq + 1) // 2


def load() -> dict[tuple, list[dict]]:
    groups: dict[tuple, list[dict]] = defaultdict(list)
    with DATA.open() as fh:
        for r in csv.DictReader(fh):
            window = int(r["sliding_window"]) if r["sliding_window"] else None
            b, s, h = int(r["batch"]), int(r["seq"]), int(r["q_heads"])
            dq, dv = int(r["head_dim_qk"]), int(r["head_dim_vo"])
            pairs = attended_pairs(r["mask"], s, window)
            flops = b * h * pairs * 2 * (4 * dq + 3 * dv)  # forward 2 GEMMs + backward 5
            seconds = (float(r["fwd_ms"]) + float(r["bwd_ms"])) * 1e-3
            groups[(r["gpu"], r["config"], r["mask"], window)].append(
                {"seq": s, "span": pairs / s, "flops": flops, "seconds": seconds,
                 "eff": flops / seconds / PEAK_BF16[r["gpu"]], "dq": dq})
    for rows in groups.values():
        rows.sort(key=lambda r: r["seq"])
    return groups


def row_cost_fit(span: np.ndarray, inverse_rate: np.ndarray) -> tuple[float, float]:
    """k (keys) and the long-row rate 1 / a from 1 / rate = a + a k / span, by least squares."""
    a, ak = np.linalg.lstsq(np.vstack([np.ones_like(span), 1 / span]).T, inverse_rate,
                            rcond=None)[0]
    return ak / a, 1 / a


def fit(rows: list[dict], peak: float) -> tuple[float, float]:
    """k (keys) and the long-row efficiency from seconds / FLOPs = a + a k / span."""
    k, rate = row_cost_fit(np.array([r["span"] for r in rows]),
                           np.array([r["seconds"] / r["flops"] for r in rows]))
    return k, rate / peak


def gb300_over_gb200(groups: dict[tuple, list[dict]]) -> list[float]:
    """GB300's forward + backward speed over GB200's, for every shape and length both ran,
    sorted."""
    ratios = []
    for (gpu, config, mask, window), rows in groups.items():
        other = groups.get(("GB300", config, mask, window)) if gpu == "GB200" else None
        if not other:
            continue
        t300 = {r["seq"]: r["seconds"] for r in other}
        ratios += [r["seconds"] / t300[r["seq"]] for r in rows if r["seq"] in t300]
    return sorted(ratios)


def main() -> None:
    fa2_fits()
    groups = load()
    print("\ncuDNN SDPA (cudnn-frontend's benchmark): k (keys) per GPU, shape and mask;"
          " share of the BF16 peak, measured / fitted")
    causal_llama: dict[str, tuple[float, float]] = {}
    for key, rows in sorted(groups.items()):
        gpu, config, mask, window = key
        if window is not None or len(rows) < 3:
            continue
        k, e_inf = fit(rows, PEAK_BF16[gpu])
        if config == "llama3.1" and mask == "top_left":
            causal_llama[gpu] = (k, e_inf)
        cells = "  ".join(f"{r['seq'] // 1024}K {r['eff']:.2f}/"
                          f"{e_inf * r['span'] / (r['span'] + k):.2f}" for r in rows)
        print(f"  {gpu:6} {config:9} {mask:9} k = {k:4.0f}   {cells}")
    print("\nsliding windows, predicted from the same GPU's causal Llama 3.1 fit (never fitted):")
    for (gpu, config, _mask, window), rows in sorted(groups.items(), key=lambda kv: kv[0][:2]):
        if window is None or gpu not in causal_llama:
            continue
        k, e_inf = causal_llama[gpu]
        head = HEAD64_FACTOR if rows[0]["dq"] == 64 else 1.0
        for r in rows:
            pred = e_inf * head * r["span"] / (r["span"] + k)
            print(f"  {gpu:6} {config} window {window:5}  {r['seq'] // 1024:2}K"
                  f"  measured {r['eff']:.3f}  predicted {pred:.3f}")
    ratios = gb300_over_gb200(groups)
    print(f"\nGB300 speed / GB200 speed over {len(ratios)} matched shapes:"
          f" median {statistics.median(ratios):.3f} (range {ratios[0]:.3f}-{ratios[-1]:.3f})")


if __name__ == "__main__":
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
    main()
