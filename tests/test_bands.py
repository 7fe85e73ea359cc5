"""Error bands: every estimate says how far comparable validated runs were off (issue 13)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from dlformula.core import Engine
from dlformula.validation.bands import (
    MIN_RUNS,
    POOL_RUNS,
    QUANTILE,
    band_for,
    run_traits,
    step_range,
    table,
)

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
GPT3 = str(EXAMPLES / "gpt3-175b.yaml")


def _runs(n: int, family: str, gpus: int, moe: bool, fp8: bool, error: float,
          fsdp: bool = False) -> list[dict]:
    return [{**run_traits(family, gpus, moe, fp8, fsdp), "held_out": error * (i + 1) / n}
            for i in range(n)]


def test_band_is_a_high_percentile_of_the_most_alike_runs_relaxing_the_last_trait_first():
    data = {"families": {"h100-sxm": "H100"},
            "runs": _runs(POOL_RUNS, "H100", 2048, False, True, 0.10)
            + _runs(POOL_RUNS, "H100", 2048, False, False, 0.50)
            + _runs(5, "H100", 16, True, True, 0.90)
            + _runs(5, "H100", 2048, False, True, 0.70, fsdp=True)}
    dense_fp8 = band_for({"gpus": 2048, "experts": 0, "precision": "fp8"}, "h100-sxm", data)
    assert dense_fp8 is not None and dense_fp8.n == POOL_RUNS
    # the QUANTILE-th percentile (rank QUANTILE / 100 x (n - 1) of n sorted errors)
    want = 0.10 * (1 + QUANTILE / 100 * (POOL_RUNS - 1)) / POOL_RUNS
    assert dense_fp8.width == pytest.approx(want)
    assert dense_fp8.as_dict()["width"] == pytest.approx(want)
    assert dense_fp8.as_dict()["coverage"] == 0.9
    assert f"{QUANTILE}th percentile" in dense_fp8.as_dict()["basis"]
    assert dense_fp8.matched == ("H100 family", "dense", "ZeRO 0-2", "1,024-4,095 GPUs", "FP8")
    # Five MoE runs are too few: precision, then scale, then sharding, then MoE are given up.
    moe = band_for({"gpus": 16, "experts": 64, "precision": 2}, "h100-sxm", data)
    assert moe is not None and moe.matched == ("H100 family",) and moe.n == 2 * POOL_RUNS + 10
    # Five FSDP runs: precision and scale go, sharding and dense-or-MoE are kept longer.
    fsdp = band_for({"gpus": 2048, "experts": 0, "precision": "fp8", "zero": 3}, "h100-sxm",
                    data)
    assert fsdp is not None and fsdp.matched == ("H100 family", "dense")
    assert fsdp.n == 2 * POOL_RUNS + 5
    assert band_for({"gpus": 8}, "mi300x", data) is None  # no validated run on that family


def test_band_states_the_first_predictions_of_the_same_runs_when_enough_have_one():
    held = _runs(MIN_RUNS, "H100", 2048, False, False, 0.10)
    data = {"families": {"h100-sxm": "H100"},
            "runs": [{**r, "first": -4 * r["held_out"]} for r in held]}
    band = band_for({"gpus": 2048, "experts": 0, "precision": "bf16"}, "h100-sxm", data)
    assert band is not None and band.n_new_source == MIN_RUNS
    assert band.width_new_source == pytest.approx(4 * band.width)
    low, high = 1 / (1 + band.width_new_source), 1 / (1 - band.width_new_source)
    assert band.text().endswith(f"; {low:.2f}x to {high:.2f}x for a new source")
    assert band.as_dict()["width_new_source"] == band.width_new_source
    # one run short of MIN_RUNS with a first prediction: no new-source figure
    data["runs"][0].pop("first")
    band = band_for({"gpus": 2048, "experts": 0, "precision": "bf16"}, "h100-sxm", data)
    assert band is not None and band.width_new_source is None
    assert "new source" not in band.text() and band.as_dict()["runs_new_source"] == 0


def test_brief_and_json_carry_the_band():
    engine = Engine()
    r = engine.evaluate(GPT3)
    from dlformula import report

    line = next(x for x in report.key_results(r) if x.strip().startswith("step_time"))
    band = report.result_band(r)
    assert band is not None and band.n >= MIN_RUNS
    assert band.width_new_source is not None
    # the range of the measured step time, in seconds around this estimate
    step = r.values["step_time"]
    low, high = step / (1 + band.width), step / (1 - band.width)
    assert f"({low:.4g} s to {high:.4g} s in 9 runs of 10, {band.n} comparable runs; " in line
    q = json.loads(report.to_json(r))["quantities"]
    assert q["step_time"]["band"]["width"] == pytest.approx(band.width)
    assert q["step_time"]["band"]["step_time_low"] == pytest.approx(1 / (1 + band.width))
    assert q["step_time"]["band"]["step_time_high"] == pytest.approx(1 / (1 - band.width))
    assert q["cost_usd"]["band"] == q["step_time"]["band"]
    assert "band" not in q["memory_per_gpu"]


def test_a_node_no_validated_run_resembles_says_so():
    engine = Engine()
    data = table()
    assert "trainium2" not in data["families"]  # no published run on it is held
    r = engine.evaluate(GPT3, {"hardware.node": "trainium2"})
    from dlformula import report

    line = next(x for x in report.key_results(r) if x.strip().startswith("step_time"))
    assert "(no comparable validated run)" in line
    assert json.loads(report.to_json(r))["quantities"]["step_time"]["band"] is None


def test_a_node_no_family_fits_takes_its_own_few_runs_without_a_coverage_claim():
    from dlformula.validation.bands import UNFITTED

    # five runs on a node whose figures are not fitted: its band is theirs, and says how few
    data = {"families": {"h100-sxm": "H100", "mi300x": UNFITTED + "mi300x"},
            "runs": _runs(POOL_RUNS, "H100", 64, False, False, 0.10)
            + _runs(5, UNFITTED + "mi300x", 8, False, True, -0.50)}
    band = band_for({"gpus": 512, "experts": 0, "precision": "bf16"}, "mi300x", data)
    assert band is not None and band.n == 5
    assert band.matched == ("the mi300x node (its figures not fitted)",)
    # the QUANTILE-th percentile of |errors| 0.1, 0.2, ... 0.5
    assert band.width == pytest.approx(0.1 * (1 + QUANTILE / 100 * 4))
    assert band.text().endswith("over the only 5 validated runs on the mi300x node (its "
                                "figures not fitted): no 90% band claimed")
    assert "9 runs of 10" not in band.text()
    assert band.as_dict()["coverage"] is None and "not fitted" in band.as_dict()["basis"]
    # as many runs as a band wants, still one node's own: no claim either (and no "only")
    data["runs"] += _runs(MIN_RUNS, UNFITTED + "mi300x", 8, False, True, -0.50)
    band = band_for({"gpus": 512, "experts": 0, "precision": "bf16"}, "mi300x", data)
    assert band is not None and band.n == 5 + MIN_RUNS and not band.claimed
    assert band.text().endswith(f"over the {5 + MIN_RUNS} validated runs on the mi300x node "
                                "(its figures not fitted): no 90% band claimed")
    # the shipped table holds the MI355X runs (no family fits its figures) the same way, and
    # eval says so
    shipped = table()
    assert shipped["families"].get("mi355x") == UNFITTED + "mi355x"
    assert sum(r["family"] == UNFITTED + "mi355x" for r in shipped["runs"]) >= 5
    r = Engine().evaluate(GPT3, {"hardware.node": "mi355x"})
    from dlformula import report

    line = next(x for x in report.key_results(r) if x.strip().startswith("step_time"))
    assert "validated runs on the mi355x node (its figures not fitted): no 90% band" in line


def test_the_shipped_bands_cover_every_fitted_family():
    data = table()
    # every fitted family and every node with validated runs but no family (bands.UNFITTED)
    assert {r["family"] for r in data["runs"]} == set(data["families"].values())
    assert all(abs(r["held_out"]) < 5 for r in data["runs"])


def test_search_recommendation_states_the_band():
    from dlformula.search import search

    engine = Engine()
    result = search(GPT3, gpus=1024, engine=engine, top=3)
    line = next(x for x in result.recommendation if "error band" in x)
    assert "comparable runs" in line or "no comparable validated run" in line


def test_search_rows_carry_each_layouts_band_and_csv_leaves_it_empty_where_there_is_none():
    from dlformula.search import search

    engine = Engine()
    result = search(GPT3, gpus=[64, 8192], engine=engine,
                    fix=["training.recompute=selective", "parallelism.tp=8",
                         "parallelism.pp=8", "parallelism.zero=1,3"])
    gpus, zero = result["gpus"].astype(int), result["zero"].astype(int)
    assert set(gpus.tolist()) == {64, 8192} and set(zero.tolist()) == {1, 3}
    bands, bounded = set(), 0
    for count in (64, 8192):
        for stage in (1, 3):
            want = band_for({**result.config.values, "gpus": count, "precision": "bf16",
                             "zero": stage}, result.config.node)
            assert want is not None and want.width_new_source is not None
            rows = (gpus == count) & (zero == stage)
            step = result["step_time"][rows]
            assert rows.any()
            assert result["step_time_low"][rows] == pytest.approx(step / (1 + want.width))
            assert result["step_time_high"][rows] == pytest.approx(step / (1 - want.width))
            # a band of 1 or wider bounds nothing above: an empty cell (NaN), not a negative time
            high_new = step * step_range(want.width_new_source)[1]
            if want.width_new_source < 1:
                bounded += 1
                assert result["step_time_high_new_source"][rows] == pytest.approx(high_new)
            else:
                assert np.isnan(result["step_time_high_new_source"][rows]).all()
            bands.add(want.width)
    assert len(bands) > 1  # the rows' bands differ with their GPU count or sharding
    assert bounded > 0  # and some new-source band is bounded above
    far = search(GPT3, gpus=64, engine=engine, top=5, sets=["hardware.node=trainium2"])
    header, first = far.to_csv().splitlines()[:2]
    cells = dict(zip(header.split(","), first.split(","), strict=True))
    assert all(cells[c] == "" for c in ("step_time_low", "step_time_high",
                                        "step_time_low_new_source", "step_time_high_new_source"))


def test_a_band_is_the_range_of_the_measured_step_longer_above_the_estimate_than_below():
    """An estimate off by e is (1 + e) x the measured step: a band |e| <= w allows a measured step
    of 1 / (1 + w) to 1 / (1 - w) times the estimate. Read as "±w" it would put the top at
    1 + w and leave out the runs that took longer than that."""
    from dlformula.validation.bands import Band, range_text, step_range

    assert step_range(0.25) == pytest.approx((0.8, 4 / 3))
    assert range_text(0.25) == "0.80x to 1.33x"
    assert range_text(0.25, lambda x: f"{10 * x:.1f} s") == "8.0 s to 13.3 s"
    assert step_range(1.5)[1] == float("inf") and range_text(1.5) == "0.40x or more"
    band = Band(0.25, 40, ("H100 family",), 1.5, 12)
    assert band.text() == ("0.80x to 1.33x the estimate in 9 runs of 10, 40 comparable runs; "
                           "0.40x or more for a new source")
    d = band.as_dict()
    assert d["step_time_high"] == pytest.approx(4 / 3) and d["step_time_high_new_source"] is None
    # a run 25% fast (estimate 0.75 x measured: measured = 1.33 x estimate) is inside the band
    measured_over_estimate = 1 / (1 - 0.25)
    assert d["step_time_low"] <= measured_over_estimate <= d["step_time_high"] + 1e-12


def test_a_search_that_keeps_no_layout_still_has_empty_band_columns():
    """No layout evaluated at all (every one breaks a constraint): no step time to scale the
    band by, so the band columns are there and empty, and nothing raises (validation's
    best-feasible lookup runs such searches)."""
    from dlformula.search import BAND_COLUMNS, search

    result = search(GPT3, gpus=8, engine=Engine(), top=1,
                    fix=["parallelism.tp=8", "parallelism.pp=2"])
    assert len(result) == 0 and result.best() is None
    assert all(len(result.columns[c]) == 0 for c in BAND_COLUMNS)


def test_a_fitted_family_with_too_few_comparable_runs_claims_no_band_and_says_why():
    """A band over fewer than MIN_RUNS runs of a fitted family claims no 9-in-10 coverage, and
    its basis says so rather than calling the family an unfitted node."""
    from dlformula.validation.bands import comparable_band

    want = run_traits("H100", 8, False, False)
    runs = [{**want, "held_out": 0.05 * (i + 1)} for i in range(MIN_RUNS - 3)]
    band = comparable_band(want, runs)
    assert band is not None and not band.claimed and band.n == MIN_RUNS - 3
    assert "too few for a 90% band" in band.basis and "not fitted" not in band.basis
    assert "over the only 5 validated runs on H100 family: no 90% band claimed" in band.text()
    assert band.as_dict()["coverage"] is None
