"""The default goodput against the effective training time published production runs report.

`goodput_share` (formulas/time.yaml) is 1 / (1 + n x rate x cost) with Llama 3's interruption
rate and cost. Each case below is worked out by hand from those two inputs and checked against
the figure a source publishes at that GPU count (docs/validation.md, "Goodput: what the
published figures say"; bench/goodput_sources.py prints the table), so a default that drifted
away from the sources fails here with the figure beside it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from dlformula.core import Engine

GPT3 = str(Path(__file__).resolve().parent.parent / "examples" / "gpt3-175b.yaml")
RATE = 466 / (54 * 24 * 16384)      # per GPU-hour: Llama 3, 466 interruptions, 54 days, 16K GPUs
COST = 0.1 * 54 * 86400 / 466       # s: "> 90%" effective training time over those 466

# (GPUs, published goodput, "min" for a lower bound or "about" for a value, source)
PUBLISHED = [
    (16384, 0.90, "min", "Llama 3 405B, Dubey et al. 2024, sec. 3.3.4: higher than 90%"),
    (10000, 0.90, "min", "MegaScale, arXiv:2402.15627, sec. 6.3: over 90% on > 10,000 GPUs"),
    (9600, 0.97, "about", "ByteRobust, arXiv:2509.16293: 97% ETTR, three months, 9,600 GPUs"),
    (4096, 0.90, "min", "Kokolis et al. 2024, arXiv:2410.21680: RSC-1 jobs of 2-4K GPUs > 0.9"),
]


@pytest.fixture(scope="module")
def engine() -> Engine:
    return Engine()


def share_at(engine: Engine, gpus: int) -> float:
    sets = {"hardware.node": "h100-sxm", "hardware.gpus": gpus, "parallelism.tp": 1,
            "parallelism.pp": 1, "parallelism.dp": gpus, "training.global_batch": gpus,
            "training.micro_batch": 1}
    return float(engine.evaluate(GPT3, sets)["goodput_share"])


def test_default_inputs_are_llama3s_figures(engine):
    inputs = engine.model.inputs
    assert inputs["interruption_rate"].default == pytest.approx(RATE, rel=1e-3)  # 2.195e-5 /h
    assert inputs["interruption_cost"].default == pytest.approx(COST, rel=1e-3)  # 1002 s


@pytest.mark.parametrize("gpus, published, kind, source", PUBLISHED)
def test_default_goodput_agrees_with_published_production_runs(engine, gpus, published, kind,
                                                               source):
    by_hand = 1 / (1 + gpus * 2.195e-5 * 1002 / 3600)
    share = share_at(engine, gpus)
    assert share == pytest.approx(by_hand)
    if kind == "min":
        assert share > published, source
    else:  # the default is the conservative side of a mature stack's figure, within 3 points
        assert published - 0.03 <= share <= published, source


def test_default_goodput_at_llama3_scale_is_its_bound(engine):
    # At 16,384 GPUs the loss n x rate x cost is Llama 3's 10% (466 x 16.7 min / 54 days);
    # the share 1 / (1 + 0.100) = 0.909 sits above the paper's "> 90%".
    loss = 16384 * RATE * COST / 3600
    assert loss == pytest.approx(0.10, rel=1e-3)
    assert share_at(engine, 16384) == pytest.approx(1 / (1 + loss), rel=1e-3)
