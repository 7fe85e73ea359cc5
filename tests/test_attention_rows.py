"""The node files' per-row attention cost against the kernel benchmarks it was fitted on.

`attention_row_overhead` (formulas/hardware.yaml) is the k of time = c x (keys + k) per query
row, fitted by bench/attention_rows.py on the shipped extract of cuDNN's SDPA training benchmark
(bench/data/cudnn_sdpa_training.csv) and on FlashAttention-2's plotted speeds. A node figure
that drifted away from its data, or data edited without refitting, fails here.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import load_script
from dlformula.core import Engine

BENCH = Path(__file__).resolve().parent.parent / "bench" / "attention_rows.py"
GPT3 = str(Path(__file__).resolve().parent.parent / "examples" / "gpt3-175b.yaml")


@pytest.fixture(scope="module")
def rows():
    return load_script(BENCH)


@pytest.fixture(scope="module")
def groups(rows):
    return rows.load()


@pytest.fixture(scope="module")
def engine() -> Engine:
    return Engine()


@pytest.mark.parametrize("node, gpu, key", [
    ("h100-sxm", "H200", "hardware.attention_row_overhead_fa3"),
    ("gb200-nvl72", "GB200", "hardware.attention_row_overhead"),
    ("gb300-nvl72", "GB300", "hardware.attention_row_overhead"),
])
def test_cudnn_row_cost_is_the_benchmark_fit(rows, groups, engine, node, gpu, key):
    data = groups[(gpu, "llama3.1", "top_left", None)]
    k, e_inf = rows.fit(data, rows.PEAK_BF16[gpu])
    shipped = engine.evaluate(GPT3, {"hardware.node": node})[key.split(".")[1]]
    assert shipped == pytest.approx(k, abs=10)
    # The form holds at every length within 0.03 of the peak (0.05 on GB200, whose 32K falls).
    for r in data:
        assert e_inf * r["span"] / (r["span"] + k) == pytest.approx(r["eff"], abs=0.05)


def test_the_fit_predicts_the_sliding_windows_it_never_saw(rows, groups):
    k, e_inf = rows.fit(groups[("GB200", "llama3.1", "top_left", None)], rows.PEAK_BF16["GB200"])
    window = groups[("GB200", "gpt_oss", "top_left", 128)]
    for r in window:
        predicted = e_inf * rows.HEAD64_FACTOR * r["span"] / (r["span"] + k)
        assert predicted == pytest.approx(r["eff"], rel=0.3)  # measured 0.061-0.073
        assert predicted < 0.1  # a flat efficiency would say about 0.43


def test_gb300_attention_ratio_is_the_benchmark_median(rows, groups, engine):
    ratios = rows.gb300_over_gb200(groups)
    median = ratios[len(ratios) // 2]
    shipped = engine.evaluate(GPT3, {"hardware.node": "gb300-nvl72"})["attention_rate_ratio"]
    assert shipped == pytest.approx(median, abs=0.01)
