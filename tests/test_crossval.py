"""Leave-one-source-out fitting (engine/validation/fit.py): the framework figures are fitted over
every run they act on and refitted without each source, like the hardware families' figures."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from conftest import load_script
from dlformula.core import Engine
from dlformula.errors import ModelError
from dlformula.validation import fit

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
GPT3 = str(EXAMPLES / "gpt3-175b.yaml")
# A node of no fitted family, so that the framework figure is the only one fitted.
NODE = "mi300x"
TRUE_H = 0.01
# Short sequences: the MoE layers' GPU work (3 x moe_mlp_time) is well under TRUE_H, so the host
# wait shows in every MoE run's step time.
SHORT = {"training.seq_len": 512}


@pytest.fixture(scope="module")
def engine() -> Engine:
    return Engine()


def _run(engine, ident, source, config, h=TRUE_H):
    """A FitRun whose target is the model's own step time at host_sync_time h."""
    items = tuple(f"{k}={v}" for k, v in {"hardware.node": NODE, **SHORT, **config}.items())
    values = dict(engine.config(str(EXAMPLES / "gpt4-like-moe.yaml"), list(items)).values)
    moe = float(values.get("experts", 0)) > 1
    target = float(engine.model.evaluate({**values, "host_sync_time": h})["step_time"])
    traits = {"gpus": int(values["gpus"]), "moe": moe, "precision": "bf16", "cp": 1,
              "zero": 1, "node": NODE}
    return fit.FitRun(ident, "synthetic.yaml", items, target, NODE, None, source, traits,
                      values)


def test_a_framework_figure_is_fitted_on_the_runs_it_acts_on_and_refitted_held_out(engine):
    runs = [_run(engine, "a1", "source A", {"training.micro_batch": 1}),
            _run(engine, "a2", "source A", {"training.micro_batch": 2}),
            _run(engine, "b1", "source B", {"moe.top_k": 4}),
            _run(engine, "d1", "source C", {"moe.experts": 0, "parallelism.ep": 1})]
    assert [r.traits["moe"] for r in runs] == [True, True, True, False]
    result = fit.cross_validate(engine, runs)
    launch = engine.model.inputs["host_launch_time"].default
    # host_launch_time acts on every run, but only the dense run's blocks wait for the host at
    # it (every block of the MoE runs is a MoE layer): fitted on d1, whose target is at the default.
    assert result["framework"] == {"moe.host_sync_time": TRUE_H,
                                   "training.host_launch_time": launch}
    by_id = {r["id"]: r for r in result["runs"]}
    for ident in ("a1", "a2", "b1"):
        assert by_id[ident]["in_sample"] == pytest.approx(0, abs=1e-9)
        # Held out, the figure comes from the other source's runs, which say the same.
        assert by_id[ident]["held_out_figures"]["moe.host_sync_time"] == TRUE_H
        assert by_id[ident]["held_out"] == pytest.approx(0, abs=1e-9)
    # A dense run is not predicted with the MoE figure at all; held out, no other run moves with
    # the launch figure, so it keeps its default rather than the grid's first value.
    assert by_id["d1"]["held_out_figures"] is None
    assert by_id["d1"]["held_out"] == pytest.approx(0, abs=1e-9)


def test_a_source_alone_in_constraining_the_figure_is_held_out_at_the_default(engine):
    runs = [_run(engine, "a1", "source A", {"training.micro_batch": 1}),
            _run(engine, "d1", "source C", {"moe.experts": 0, "parallelism.ep": 1})]
    result = fit.cross_validate(engine, runs)
    a1 = next(r for r in result["runs"] if r["id"] == "a1")
    assert a1["in_sample"] == pytest.approx(0, abs=1e-9)
    # no other MoE run: the MoE figure is the input's default (the launch figure, which the dense
    # run constrains, is held out from it)
    assert "moe.host_sync_time" not in (a1["held_out_figures"] or {})
    default = engine.model.inputs["host_sync_time"].default
    assert default != TRUE_H and a1["held_out"] < -0.01  # the default waits less


def test_a_malformed_framework_figure_is_refused_with_the_file():
    shipped = (Path(fit.__file__).parent / "fit.yaml").read_text(encoding="utf-8")
    bad = shipped.replace("runs: moe}", "runs: dense}")
    assert bad != shipped
    with pytest.raises(ModelError, match="fit.yaml: malformed fit spec.*runs must be moe or all"):
        fit.parse(bad, "fit.yaml")
    assert "moe.host_sync_time" in fit.parse(shipped, "fit.yaml").framework


def test_every_source_weighs_the_same_in_a_framework_figure(engine):
    # Three runs of source A say 10 ms, one run each of sources B and C say 4 ms: weighing runs,
    # A would carry the figure; weighing sources, B and C do (the figure spans frameworks and
    # publishers, and one publisher's many runs must not drag it).
    runs = [_run(engine, f"a{m}", "source A", {"training.micro_batch": m}) for m in (1, 2, 4)]
    runs += [_run(engine, "b1", "source B", {"moe.top_k": 4}, h=0.004),
             _run(engine, "c1", "source C", {"moe.top_k": 1}, h=0.004)]
    result = fit.cross_validate(engine, runs)
    assert result["framework"] == {"moe.host_sync_time": 0.004}
    # The families' objective still weighs runs: per_source is the framework figures' choice.
    predict = fit.Predictor(engine)
    point = {"moe.host_sync_time": 0.004}
    a_terms = [min(abs(math.log(predict(r, point) / r.target)), 0.5) for r in runs[:3]]
    # B and C are exact at 4 ms: by run the mean of five terms, by source the mean of three
    # sources' means
    assert fit.objective(predict, runs, point, 0.5) == pytest.approx(sum(a_terms) / 5)
    assert fit.objective(predict, runs, point, 0.5, per_source=True) == pytest.approx(
        sum(a_terms) / 3 / 3)


def test_the_shared_attention_ratio_is_what_the_node_files_carry(engine):
    # fit.yaml ties the fused-attention figures of several families to their GEMM figure at one
    # shared ratio, written into the ties (and the node files) at `written_at`, the value fitted
    # on every run (bench/crossval_sources.py prints it; too slow to refit here): every member's
    # FlashAttention-3 / cuDNN class tie is that value and every member node carries GEMM x its
    # tie factor.
    spec = fit.spec()
    [shared] = spec.shared.values()
    assert shared.written_at in shared.grid
    for name in shared.families:
        family = spec.families[name]
        factors = [f for f, other in family.ties.values() if other == shared.key]
        # the FlashAttention-3 / cuDNN class figure follows at the ratio itself
        assert max(factors) == pytest.approx(shared.written_at), name
        for node in family.nodes:
            r = engine.evaluate(GPT3, {"hardware.node": node})
            for key, (factor, other) in family.ties.items():
                assert r[key.split(".")[1]] == pytest.approx(
                    factor * r[other.split(".")[1]], abs=0.001), (node, key)


class _Rates:
    """A stand-in predictor: step = a / gemm + b / attention, the attention figure being the
    one the run's family ties (no model needed to check the search)."""

    caps: dict = {}

    def __call__(self, run, point):
        att = point.get("hardware.attention_efficiency_fa3",
                        point.get("hardware.attention_efficiency"))
        return run.values["a"] / point["hardware.gemm_efficiency"] + run.values["b"] / att


def _shared_spec(monkeypatch, families):
    gemm = fit.grid("0.40:0.70:0.05")
    fams = {name: fit.Family(name, (name.lower(),), {"hardware.gemm_efficiency": gemm},
                             {key: (0.7, "hardware.gemm_efficiency")})
            for name, key in families.items()}
    shared = {"ratio": fit.Shared("ratio", tuple(fams), "hardware.gemm_efficiency",
                                  fit.grid("0.50:0.80:0.05"), 0.7)}
    spec = fit.Spec(0.5, fams, {}, {}, [], shared)
    monkeypatch.setattr(fit, "spec", lambda: spec)


def _rate_run(ident, family, a, b, gemm, ratio):
    target = a / gemm + b / (ratio * gemm)
    return fit.FitRun(ident, "synthetic.yaml", (), target, family.lower(), family, "s",
                      {}, {"a": a, "b": b})


def test_a_shared_ratio_is_fitted_on_its_families_runs_together(monkeypatch):
    _shared_spec(monkeypatch, {"X": "hardware.attention_efficiency_fa3",
                               "Y": "hardware.attention_efficiency"})
    # X's runs pin the ratio (0.6: GEMM and attention shares of the step vary); Y's runs are
    # all GEMM and say nothing about it, so Y's attention follows the ratio X's runs fix.
    runs = [_rate_run(f"x{i}", "X", a, b, 0.5, 0.6) for i, (a, b) in
            enumerate([(1.0, 0.1), (1.0, 0.5), (0.5, 1.0)])]
    runs += [_rate_run(f"y{i}", "Y", a, 0.0, 0.65, 0.6) for i, a in enumerate((1.0, 2.0))]
    figures, ratios = fit.fit_families(_Rates(), runs, 0.5)
    assert ratios == {"ratio": pytest.approx(0.6)}
    assert figures["X"]["hardware.gemm_efficiency"] == pytest.approx(0.5)
    assert figures["X"]["hardware.attention_efficiency_fa3"] == pytest.approx(0.3)
    assert figures["Y"]["hardware.gemm_efficiency"] == pytest.approx(0.65)
    assert figures["Y"]["hardware.attention_efficiency"] == pytest.approx(0.39)
    # Without X's runs nothing pins the ratio: the first grid value at the lowest objective, and
    # a family without runs is left out.
    figures, ratios = fit.fit_families(_Rates(), runs[3:], 0.5)
    assert ratios == {"ratio": 0.5}
    assert set(figures) == {"Y"} and figures["Y"]["hardware.gemm_efficiency"] == pytest.approx(0.65)


def test_a_malformed_shared_ratio_is_refused_with_the_file():
    shipped = (Path(fit.__file__).parent / "fit.yaml").read_text(encoding="utf-8")
    members = "families: [H100, Blackwell, Blackwell Ultra]"
    assert members in shipped
    with pytest.raises(ModelError, match="shared attention_ratio: family A100 has no tie on"):
        fit.parse(shipped.replace(members, "families: [H100, A100]"), "fit.yaml")
    twice = shipped.replace("  attention_ratio:\n", "  other:\n    families: [H100]\n"
                            "    key: hardware.gemm_efficiency\n    grid: \"0.6:0.8:0.1\"\n"
                            "    written_at: 0.7\n  attention_ratio:\n")
    with pytest.raises(ModelError, match="shared attention_ratio: no family H200"):
        fit.parse(shipped.replace(members, "families: [H100, H200]"), "fit.yaml")
    # a section of the wrong shape is refused the same way, not with a traceback
    listed = shipped.replace("shared:\n  #", "shared: [attention_ratio]\nunused:\n  #")
    assert listed != shipped
    with pytest.raises(ModelError, match="fit.yaml: malformed fit spec"):
        fit.parse(listed, "fit.yaml")
    assert twice != shipped
    with pytest.raises(ModelError, match="a family is a member of two shared ratios"):
        fit.parse(twice, "fit.yaml")


def test_gh200_borrows_the_h100_familys_fitted_figures(engine):
    # hardware/gh200.yaml borrows the H100 family's fitted GEMM and attention figures from
    # h100-sxm (`from:`; its own fit is the tensor-rate ratio only), so a refit of the H100
    # family carries over.
    h100 = engine.evaluate(GPT3, {"hardware.node": "h100-sxm"})
    gh200 = engine.evaluate(GPT3, {"hardware.node": "gh200"})
    for key in ("gemm_efficiency", "attention_efficiency", "attention_efficiency_fa3"):
        assert gh200[key] == pytest.approx(h100[key]), key


def test_a_tied_figure_is_capped_at_its_own_domain_not_at_one(engine):
    # A tie follows another figure by a factor and stays inside the tied input's declared
    # domain: a share (attention_efficiency_fa3, 0..1) stops at 1, a rate ratio
    # (attention_rate_ratio, 0.5..2) may pass 1 with the figure it follows. Capping every tie
    # at 1 silently flattened a rate ratio above 1.
    family = fit.Family("test", ("h100-sxm",),
                        {"hardware.tensor_rate_ratio": [1.2],
                         "hardware.attention_efficiency": [0.8]},
                        {"hardware.attention_rate_ratio": (1.0, "hardware.tensor_rate_ratio"),
                         "hardware.attention_efficiency_fa3":
                             (1.75, "hardware.attention_efficiency")})
    [point] = fit.points(family, fit.Predictor(engine).caps)
    assert point["hardware.attention_rate_ratio"] == pytest.approx(1.2)
    assert point["hardware.attention_efficiency_fa3"] == 1.0
    # without caps the rule is the product itself
    [free] = fit.points(family)
    assert free["hardware.attention_efficiency_fa3"] == pytest.approx(1.4)


def test_crossval_bench_saves_a_result_and_reports_what_moved_against_it(tmp_path, capsys):
    # A model change reports its held-out figures beside the ones before it: --save keeps every
    # run's errors, --against prints the regimes and the sources that moved.
    bench = load_script(ROOT / "bench" / "crossval_sources.py")
    runs = [str(ROOT / "runs" / "llmjp-scripts.yaml"), str(ROOT / "runs" / "tinyllama.yaml")]
    saved = tmp_path / "before.json"
    assert bench.main([*runs, "--save", str(saved)]) == 0
    data = json.loads(saved.read_text())
    assert len(data["runs"]) == 3 and data["figures"]
    # Unchanged model: nothing moved.
    capsys.readouterr()
    assert bench.main([*runs, "--against", str(saved)]) == 0
    assert "none: every run's held-out error is unchanged" in capsys.readouterr().out
    # One run 10 points worse before: its source is listed with its medians before -> after.
    moved = data["runs"][0]
    moved["held_out"] += 0.10 if moved["held_out"] >= 0 else -0.10
    saved.write_text(json.dumps(data))
    assert bench.main([*runs, "--against", str(saved)]) == 0
    out = capsys.readouterr().out
    assert moved["source"][:42] in out and "signed" in out
    # A file that is not a saved result is refused by name, not with a traceback.
    bad = tmp_path / "bad.json"
    bad.write_text('{"runs": [1]}')
    with pytest.raises(SystemExit) as exit_info:
        bench.main([*runs, "--against", str(bad)])
    assert exit_info.value.code == 2
    assert "not a result --save wrote" in capsys.readouterr().err


def test_source_scatter_splits_a_sources_bias_from_the_scatter_within_it(tmp_path, capsys):
    # Source A is 20% slow on every run: its bias, none of it scatter. Source B is unbiased,
    # with runs 10% either side. With each bias divided out, A's runs are exact and B's keep
    # their 10%, so the floor's median is the middle of six zeros and four tens.
    bench = load_script(ROOT / "bench" / "source_scatter.py")
    runs = ([{"id": f"a{i}", "file": "a.yaml", "source": "A", "regimes": ["MoE"],
              "held_out": 0.20} for i in range(6)]
            + [{"id": f"b{i}", "file": "b.yaml", "source": "B", "regimes": [],
                "held_out": e} for i, e in enumerate([-0.10, 0.10, 0.0, -0.10, 0.10])])
    parts = fit.source_bias(runs)
    assert parts["A"]["bias"] == pytest.approx(0.20)
    assert all(w == pytest.approx(0.0) for w in parts["A"]["within"])
    assert parts["B"]["bias"] == pytest.approx(0.0)
    assert sorted(abs(w) for w in parts["B"]["within"]) == pytest.approx([0, 0.1, 0.1, 0.1, 0.1])
    # The floor keeps sources of at least min_runs runs, each run with its own remainder.
    floor = fit.bias_floor(runs, min_runs=6)
    assert set(floor) == {(f"a{i}", "a.yaml") for i in range(6)}
    assert fit.bias_floor(runs)[("b1", "b.yaml")] == pytest.approx(0.10)
    saved = tmp_path / "saved.json"
    saved.write_text(json.dumps({"figures": {}, "runs": runs}))
    assert bench.main([str(saved)]) == 0
    out = capsys.readouterr().out
    every = next(line for line in out.splitlines() if line.startswith("every run"))
    # held out: median of six 20s and five 10s-or-0s is 20%; floor: zeros for A, B's scatter.
    assert every.split()[2:] == ["11", "20.0%", "20.0%", "0.0%", "10.0%"]
    # B is listed first: four of its runs are off by more than 6% once bias is removed.
    listed = [line.split()[0] for line in out.splitlines()[-2:]]
    assert listed == ["B", "A"]
    # Not a saved result: one line, exit 2.
    bad = tmp_path / "bad.json"
    bad.write_text("[]")
    with pytest.raises(SystemExit) as exit_info:
        bench.main([str(bad)])
    assert exit_info.value.code == 2
    assert "not a result --save wrote" in capsys.readouterr().err


def test_band_calibration_scores_each_sources_bands_from_the_other_sources(tmp_path, capsys):
    # Source A's runs are 10% off, B's 20%, on the same hardware and traits. A's band, from B's
    # runs, is 20%: covered, interval score 0.2. B's band, from A's, is 10%: missed by 10
    # points, score 0.1 + 20 x 0.1 = 2.1. Half covered, median width 15%, mean score 1.15.
    from dlformula.validation.bands import POOL_RUNS

    bench = load_script(ROOT / "bench" / "band_calibration.py")
    traits = {"gpus": 64, "moe": False, "precision": "bf16", "cp": 1, "zero": 1,
              "node": "h100-sxm"}
    runs = [{"id": f"{s}{i}", "file": f"{s}.yaml", "source": s, "regimes": [], "family": "H100",
             "traits": traits, "held_out": e * (-1) ** i}
            for s, e in (("A", 0.10), ("B", 0.20)) for i in range(POOL_RUNS)]
    rows = bench.band_rows(runs, {})
    got = bench.score(rows, ("family", "moe", "fsdp", "scale", "fp8"), POOL_RUNS)["held_out"]
    assert got["runs"] == 2 * POOL_RUNS and got["coverage"] == pytest.approx(0.5)
    assert got["width"] == pytest.approx(0.15) and got["score"] == pytest.approx(1.15)
    saved = tmp_path / "saved.json"
    saved.write_text(json.dumps({"figures": {}, "runs": runs}))
    assert bench.main([str(saved), "--variant", "family,scale:8"]) == 0
    out = capsys.readouterr().out
    assert "(shipped)" in out and "family,scale : 8 : 95" in out and "50.0%" in out
    # a percentile of its own: |errors| of 0.1 and 0.2 give the same widths at any percentile
    assert bench.main([str(saved), "--variant", "family,scale:8:80"]) == 0
    assert "family,scale : 8 : 80" in capsys.readouterr().out
    for bad in ("family,scale:8:0", "family,scale:8:x", "family,scale:8:101"):
        with pytest.raises(SystemExit) as exit_info:
            bench.main([str(saved), "--variant", bad])
        assert exit_info.value.code == 2 and f"--variant {bad}" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:  # a trait it does not know: one line, exit 2
        bench.main([str(saved), "--variant", "family,colour:8"])
    assert exit_info.value.code == 2 and "--variant family,colour:8" in capsys.readouterr().err


def test_replicate_floor_groups_runs_the_model_cannot_tell_apart():
    """bench/replicate_floor.py: runs with identical configs form a group; each run's
    deviation is its measured step against the group's median step."""
    bench = load_script(ROOT / "bench" / "replicate_floor.py")

    def run(i: int, config: tuple[str, ...], target: float) -> fit.FitRun:
        return fit.FitRun(f"r{i}", "x.yaml", config, target, "h100-sxm", "H100", "S",
                          {}, {})

    same = ("hardware.node=h100-sxm", "parallelism.tp=8")
    runs = [run(0, same, 1.0), run(1, tuple(reversed(same)), 2.0), run(2, same, 4.0),
            run(3, ("hardware.node=h100-sxm", "parallelism.tp=4"), 3.0)]
    found = bench.groups(runs)
    assert [[r.id for r in g] for g in found] == [["r0", "r1", "r2"]]  # order of keys ignored
    assert bench.deviations(found[0]) == pytest.approx([-0.5, 0.0, 1.0])
