"""`dlformula calibrate`: a node fitted to a team's own runs (issue 13, section 3)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from dlformula.calibrate import calibrate, node_yaml
from dlformula.core import Engine
from dlformula.errors import ModelError, UsageError
from dlformula.report import result_band
from dlformula.resources import read_node
from dlformula.validate import validate
from dlformula.validation.bands import band_for
from dlformula.validation.stats import percentile

# The synthetic cluster's figures keep the H100 family's tie (attention 0.4 x GEMM, fit.yaml), so
# that calibrate's default, the family's one fitted figure, can recover them.
TRUE = {"gemm_efficiency": 0.47, "attention_efficiency": 0.188}
SHAPES = [(32, 4096, 32, 14336, 8192, 1, 1, 8), (80, 8192, 64, 28672, 8192, 8, 1, 8),
          (40, 5120, 40, 13824, 4096, 2, 2, 16), (32, 4096, 32, 14336, 32768, 2, 1, 8),
          (60, 6656, 52, 17920, 4096, 4, 2, 8), (16, 2048, 16, 8192, 2048, 1, 1, 16)]


@pytest.fixture(scope="module")
def engine() -> Engine:
    return Engine()


def _synthetic_runs(engine: Engine, tmp: Path, true: dict[str, float] = TRUE,
                    name: str = "ours.yaml") -> Path:
    """Runs on an 'H100 SXM' cluster whose true efficiencies are `true`: targets are the model's
    own step times at those figures."""
    rows = []
    for i, (layers, hidden, heads, ffn, seq, tp, pp, dp) in enumerate(SHAPES):
        rows.append({"id": f"synthetic_{i}", "source": "our cluster",
                     "model": {"layers": layers, "hidden": hidden, "heads": heads,
                               "kv_heads": 8, "ffn_hidden": ffn, "vocab": 128256,
                               "seq_len": seq, "arch": "Llama (SwiGLU)"},
                     "hardware": {"gpu": "H100 SXM", "count": tp * pp * dp},
                     "parallel": {"tp": tp, "pp": pp, "dp": dp, "vpp": 1,
                                  "recompute": "selective"},
                     "batch": {"global_batch_sequences": dp * 8, "micro_batch": 1},
                     "precision": "bf16", "target": {"step_time_s": 1.0}})
    path = tmp / name
    path.write_text(yaml.safe_dump(rows, sort_keys=False))
    mapped = {r["id"]: r["config"] for r in validate(engine, str(path))["rows"]}
    for row in rows:
        sets = mapped[row["id"]] + [f"hardware.{k}={v}" for k, v in true.items()]
        row["target"]["step_time_s"] = float(engine.evaluate(None, sets)["step_time"])
    path.write_text(yaml.safe_dump(rows, sort_keys=False))
    return path


def test_a_synthetic_cluster_is_recovered_within_one_percent(engine, tmp_path):
    path = _synthetic_runs(engine, tmp_path)
    cal = calibrate(engine, str(path), "h100-sxm", list(TRUE))
    for name, want in TRUE.items():
        assert cal.figures[name][1] == pytest.approx(want, rel=0.01), name
    assert all(abs(r.after / r.target - 1) < 0.01 for r in cal.runs)
    # The node file keeps every figure with its source and is usable by path.
    text = node_yaml(engine, cal)
    node_file = tmp_path / "ours-h100.yaml"
    node_file.write_text(text)
    body = yaml.safe_load(text)
    base = engine.catalog.node("h100-sxm")
    assert set(body["specs"]) == set(base.specs)
    assert body["specs"]["gemm_efficiency"]["value"] == pytest.approx(0.47, rel=0.01)
    assert "calibrated by dlformula calibrate on 6 run(s)" in \
        body["specs"]["gemm_efficiency"]["source"]
    assert body["specs"]["hbm_capacity"]["source"] == base.specs["hbm_capacity"].source
    config = tmp_path / "plan.yaml"
    config.write_text(f"model: {{preset: llama3-70b}}\nhardware: {{node: ./{node_file.name}, "
                      "gpus: 64}\nparallelism: {tp: 8, pp: 1, dp: 8}\n"
                      "training: {seq_len: 8192, global_batch: 64, tokens: 1e9}\n")
    r = engine.evaluate(str(config))
    assert r["gemm_efficiency"] == pytest.approx(0.47, rel=0.01)
    # Six runs are too few for a band of their own: the base node's family band applies.
    assert body["derived_from"] == "h100-sxm"
    assert len(body["calibration"]["left_out_errors"]) == 6
    band = result_band(r)
    base_band = band_for(dict(r.values), "h100-sxm")
    assert band is not None and band == base_band


def test_a_calibrated_node_file_is_calibrated_again_on_new_runs(engine, tmp_path):
    """`--node ./ours.yaml`: the runs of the node the file was derived from, predicted with the
    file's figures, fitted from them; the new file still names the original node."""
    first = calibrate(engine, str(_synthetic_runs(engine, tmp_path)), "h100-sxm", list(TRUE))
    node_file = tmp_path / "ours-h100.yaml"
    node_file.write_text(node_yaml(engine, first))
    later = {"gemm_efficiency": 0.44, "attention_efficiency": 0.24}
    runs = _synthetic_runs(engine, tmp_path, later, "later.yaml")
    again = calibrate(engine, str(runs), str(node_file), list(later))
    for name, want in later.items():
        before, after = again.figures[name]
        assert before == pytest.approx(TRUE[name], rel=0.01), name  # started from the file's
        assert after == pytest.approx(want, rel=0.01), name
    # The runs were predicted on the file (its figures, the runs' own settings on top) before
    # the fit, not on h100-sxm.
    mapped = {r["id"]: r["config"] for r in validate(engine, str(runs))["rows"]}
    for r in again.runs:
        on_file = [s for s in mapped[r.id] if not s.startswith("hardware.node=")]
        want = engine.evaluate(None, [*on_file, f"hardware.node={node_file}"])["step_time"]
        assert r.before == pytest.approx(float(want), rel=1e-9), r.id
        assert r.before != pytest.approx(
            float(engine.evaluate(None, mapped[r.id])["step_time"]), rel=1e-3), r.id
    body = yaml.safe_load(node_yaml(engine, again))
    assert body["derived_from"] == "h100-sxm"
    assert body["name"] == f"{engine.catalog.node('h100-sxm').name}, calibrated to {runs}"
    assert body["specs"]["gemm_efficiency"]["value"] == pytest.approx(0.44, rel=0.01)
    # Without a named figure list the H100 family's figures and tie apply, as for h100-sxm.
    default = calibrate(engine, str(runs), str(node_file))
    assert set(default.figures) <= {"gemm_efficiency", "attention_efficiency",
                                    "attention_efficiency_fa3"}
    # A node file that names no node it came from matches no run: refused, saying what to do.
    plain = tmp_path / "plain.yaml"
    plain.write_text("name: x\nspecs: {gemm_efficiency: {value: 0.5, unit: '1', source: s}}\n")
    with pytest.raises(UsageError, match="names no derived_from"):
        calibrate(engine, str(runs), str(plain), ["gemm_efficiency"])


def test_a_node_calibrated_on_enough_runs_has_its_own_band(engine, tmp_path):
    """Left-out errors written by calibrate become the band once there are MIN_RUNS of them."""
    errors = [0.01, -0.02, 0.03, -0.04, 0.05, -0.06, 0.07, -0.08, 0.2]
    base = engine.catalog.node("h100-sxm")
    node = base._replace(id="./ours.yaml", derived_from="h100-sxm",
                         calibration_errors=tuple(errors))
    band = band_for({"gpus": 64, "experts": 0, "precision": "bf16"}, node)
    # the node's own runs: their 90th percentile (no other source's bias to cover)
    assert band.n == 9 and band.width == pytest.approx(percentile([abs(e) for e in errors], 90))
    assert "90th percentile" in band.as_dict()["basis"]
    assert "calibration runs" in band.text() or "calibration runs" in band.matched[0]
    # Fewer than MIN_RUNS: the family of the node it came from, as for the base node itself.
    few = node._replace(calibration_errors=tuple(errors[:3]))
    assert band_for({"gpus": 64, "experts": 0, "precision": "bf16"}, few) == \
        band_for({"gpus": 64, "experts": 0, "precision": "bf16"}, "h100-sxm")
    # A node file with a malformed calibration block is refused with its line.
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nderived_from: h100-sxm\ncalibration: {left_out_errors: [a]}\n"
                   "specs: {gemm_efficiency: {value: 0.5, unit: '1', source: s}}\n")
    with pytest.raises(ModelError, match="left_out_errors") as info:
        read_node("x", str(bad), "test")
    assert info.value.line == 3


def test_figures_the_runs_cannot_determine_are_refused(engine, tmp_path):
    path = _synthetic_runs(engine, tmp_path)
    # These runs name no Transformer Engine stack: they use FlashAttention-2-class kernels.
    with pytest.raises(UsageError, match="no run of .* exercises attention_efficiency_fa3"):
        calibrate(engine, str(path), "h100-sxm", ["gemm_efficiency",
                                                  "attention_efficiency_fa3"])
    rows = yaml.safe_load(path.read_text())[:1]
    one = tmp_path / "one.yaml"
    one.write_text(yaml.safe_dump(rows))
    with pytest.raises(UsageError, match="1 run\\(s\\) cannot determine 2 figures"):
        calibrate(engine, str(one), "h100-sxm", list(TRUE))
    with pytest.raises(UsageError, match="no run of .* is on node 'a100-sxm4-80gb'"):
        calibrate(engine, str(path), "a100-sxm4-80gb", list(TRUE))


@pytest.fixture(scope="module")
def default_fit(engine, tmp_path_factory):
    """calibrate with its default figures on the synthetic cluster (two tests read it)."""
    return calibrate(engine, str(_synthetic_runs(engine, tmp_path_factory.mktemp("fit"))),
                     "h100-sxm")


def test_the_default_fits_the_family_figures_only(default_fit):
    """Five free figures on a few runs fitted their quirks (Narayanan's ZeRO-3 runs went from
    +2% to +98%); the default is the family's figures from fit.yaml, its ties kept: for H100 the
    GEMM figure, with both attention classes following it at the shared ratio."""
    cal = default_fit
    assert set(cal.figures) == {"gemm_efficiency", "attention_efficiency",
                                "attention_efficiency_fa3"}
    gemm = cal.figures["gemm_efficiency"][1]
    assert gemm == pytest.approx(TRUE["gemm_efficiency"], rel=0.01)
    assert cal.figures["attention_efficiency"][1] == pytest.approx(0.4 * gemm)
    assert cal.figures["attention_efficiency_fa3"][1] == pytest.approx(min(1.0, 0.7 * gemm))


def test_a_fit_that_predicts_left_out_runs_no_better_is_not_written(engine, tmp_path):
    """Runs the base node already predicts within noise: whatever the fit does to them, it
    does not predict a left-out run better, so the node file keeps the base figures (issue 13:
    the other runs of the cluster must not get worse); --force writes the fit anyway."""
    path = _synthetic_runs(engine, tmp_path)
    rows = yaml.safe_load(path.read_text())
    mapped = {r["id"]: r["config"] for r in validate(engine, str(path))["rows"]}
    for i, row in enumerate(rows):  # the base node's own step times, +-3% alternately
        base = float(engine.evaluate(None, mapped[row["id"]])["step_time"])
        row["target"]["step_time_s"] = base * (1.03 if i % 2 else 0.97)
    path.write_text(yaml.safe_dump(rows, sort_keys=False))
    cal = calibrate(engine, str(path), "h100-sxm", ["gemm_efficiency"])
    assert not cal.accepted and cal.verdict.startswith("base figures kept")
    body = yaml.safe_load(node_yaml(engine, cal))
    base_node = engine.catalog.node("h100-sxm")
    assert body["specs"]["gemm_efficiency"]["value"] == base_node.specs["gemm_efficiency"].value
    assert body["specs"]["gemm_efficiency"]["source"] == base_node.specs["gemm_efficiency"].source
    # The band data it records is the base node's own error on these runs.
    assert sorted(abs(e) for e in body["calibration"]["left_out_errors"]) == \
        pytest.approx([0.03] * len(rows), abs=1e-3)
    forced = calibrate(engine, str(path), "h100-sxm", ["gemm_efficiency"], force=True)
    assert forced.accepted and "--force" in forced.verdict
    assert yaml.safe_load(node_yaml(engine, forced))["specs"]["gemm_efficiency"]["value"] == \
        pytest.approx(forced.figures["gemm_efficiency"][1], abs=1e-4)


def test_the_synthetic_fit_is_kept_by_cross_validation(default_fit):
    cal = default_fit
    assert cal.accepted and cal.verdict.startswith("fitted figures kept")
    assert cal.written()["gemm_efficiency"] == pytest.approx(TRUE["gemm_efficiency"], rel=0.01)


def test_the_command_prints_the_verdict_and_writes_the_node(engine, run, tmp_path):
    path = _synthetic_runs(engine, tmp_path)
    out_file = tmp_path / "ours.yaml"
    code, out, err = run("calibrate", str(path), "--node", "h100-sxm", "-o", str(out_file))
    assert code == 0, err
    assert "fitted figures kept: they predict runs they did not see better" in out
    body = yaml.safe_load(out_file.read_text())
    assert body["derived_from"] == "h100-sxm"
    assert body["specs"]["gemm_efficiency"]["value"] == pytest.approx(0.47, rel=0.01)
