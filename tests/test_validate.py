"""`dlformula validate`: predictions, the report and its summary, the command and bad input.
The mapping of a run to a config: test_validation_mapping.py; the shipped runs files:
test_validation_shipped.py."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from dlformula import validate as v
from dlformula.errors import UsageError, display_path

DATA = Path(__file__).resolve().parent / "data" / "validation"
RUNS = str(DATA / "runs.yaml")
SHIPPED = Path(__file__).resolve().parents[1] / "runs"
PUBLIC = SHIPPED / "public.yaml"


@pytest.fixture(scope="module")
def report(engine):
    return v.validate(engine, RUNS)


@pytest.fixture
def run_validate(run):
    """The CLI with the validate command registered (as cli.py does)."""
    from dlformula.cli import cli
    from dlformula.cli_validate import validate

    if "validate" not in cli.commands:
        cli.add_command(validate)
    return run


def by_id(report):
    return {r["id"]: r for r in report["rows"]}


# -- the report ---------------------------------------------------------------------------------

def test_json_shape(report):
    rows = by_id(report)
    assert list(rows) == ["megatron_gpt_22b_a100", "titan_llama_8b_h100_96gb",
                          "layer_22b_no_recompute", "gaudi2_run"]
    for r in report["rows"]:
        if "skipped" in r:
            assert set(r) == {"id", "skipped"}
            continue
        assert set(r) >= {"id", "predicted", "target", "rel_error"}
        assert set(r["predicted"]) == set(r["target"]) == set(r["rel_error"])
    assert set(rows["titan_llama_8b_h100_96gb"]["target"]) == {"step_time_s", "memory_gib_peak"}
    assert set(rows["layer_22b_no_recompute"]["target"]) == {"layer_fwd_bwd_ms"}
    summary = report["summary"]
    for key in ("step_time_s", "memory_gib_peak", "layer_fwd_bwd_ms"):
        assert {"n", "median_abs", "p90_abs", "max_abs"} <= set(summary[key])
    assert summary["step_time_s"]["n"] == 2
    assert summary["skipped"] == 1


def test_json_text_round_trips(report):
    assert json.loads(v.to_json(report)) == json.loads(json.dumps(report))


def test_skipped_row_gives_the_reason(report):
    reason = by_id(report)["gaudi2_run"]["skipped"]
    assert reason == ("no hardware node for 'Intel Gaudi 2' (it would be gaudi2; "
                      "`dlformula hardware` lists the nodes)")


def test_predictions_equal_engine_evaluate(engine, report):
    for r in report["rows"]:
        if "skipped" in r:
            continue
        result = engine.evaluate(None, r["config"])
        expect = {"step_time_s": result["step_time"],
                  "memory_gib_peak": result["memory_per_gpu"] / 2**30,
                  "layer_fwd_bwd_ms": result["layer_microbatch_time"] * 1e3}
        for key, value in r["predicted"].items():
            assert value == pytest.approx(expect[key], rel=1e-12)
            assert r["rel_error"][key] == pytest.approx(
                (value - r["target"][key]) / r["target"][key], rel=1e-12)


def test_targets_are_read_not_predicted(report):
    rows = by_id(report)
    assert rows["megatron_gpt_22b_a100"]["target"] == {"step_time_s": 2.5}
    assert rows["titan_llama_8b_h100_96gb"]["target"] == {"step_time_s": 2.8,
                                                          "memory_gib_peak": 80.0}
    # nothing the row measured reaches the config
    for r in report["rows"]:
        for item in r.get("config", []):
            assert not item.startswith("training.achieved_flops_per_gpu")


# -- summary statistics -------------------------------------------------------------------------

def test_percentile_interpolates_between_ranks():
    values = [0.5, 0.1, 0.4, 0.2, 0.3]
    assert v.percentile(values, 50) == pytest.approx(0.3)
    assert v.percentile(values, 90) == pytest.approx(0.46)  # rank 3.6: 0.4 + 0.6 * 0.1
    assert v.percentile([0.7], 90) == 0.7
    assert math.isnan(v.percentile([], 50))


def test_summary_statistics():
    errors = [0.10, -0.20, 0.05, -0.40, 0.00, 0.30]
    rows = [{"id": f"r{i}", "rel_error": {"step_time_s": e}} for i, e in enumerate(errors)]
    rows.append({"id": "skip", "skipped": "reason"})
    s = v.summarize(rows, worst=2)
    step = s["step_time_s"]
    assert step["n"] == 6
    assert step["median_abs"] == pytest.approx(0.15)  # 0, .05, .1, .2, .3, .4
    assert step["p90_abs"] == pytest.approx(0.35)  # rank 4.5
    assert step["max_abs"] == pytest.approx(0.40)
    assert step["mean_abs"] == pytest.approx(sum(abs(e) for e in errors) / 6)
    assert step["median_signed"] == pytest.approx(0.025)
    assert step["worst"] == [{"id": "r3", "rel_error": -0.40}, {"id": "r5", "rel_error": 0.30}]
    assert "memory_gib_peak" not in s
    assert s["skipped"] == 1


def test_runs_the_model_puts_over_their_gpus_memory_are_counted(engine):
    """Every published run ran, so a predicted peak above the GPU's memory is a miss of the
    memory model: validate counts such runs and names the worst."""
    rows = [{"id": "fits", "rel_error": {"step_time_s": 0.0}, "memory_share": 0.9},
            {"id": "over", "rel_error": {"step_time_s": 0.0}, "memory_share": 1.3},
            {"id": "skip", "skipped": "reason"}]
    s = v.summarize(rows)
    assert s["over_memory"] == {"n": 1, "of": 2, "worst": [{"id": "over", "memory_share": 1.3}]}
    table = v.to_table({"rows": [{**r, "predicted": {"step_time_s": 1.0},
                                  "target": {"step_time_s": 1.0}} for r in rows[:2]],
                        "summary": s})
    assert "memory: 1 of 2 runs ran, but the model puts their peak above their GPU's memory" \
        in table and "over 130%" in table
    # A validated row carries the share the engine gives it.
    report = v.validate(engine, RUNS)
    row = next(r for r in report["rows"] if "memory_share" in r)
    values = engine.evaluate(None, row["config"])
    assert row["memory_share"] == pytest.approx(float(values["hbm_capacity_used"]))


def test_summary_matches_the_rows(report):
    errs = [abs(r["rel_error"]["step_time_s"]) for r in report["rows"]
            if "step_time_s" in r.get("rel_error", {})]
    s = report["summary"]["step_time_s"]
    assert s["max_abs"] == max(errs)
    assert s["median_abs"] == pytest.approx(sum(errs) / 2)


# -- the command --------------------------------------------------------------------------------

def test_cli_table(run_validate):
    code, out, err = run_validate("validate", RUNS)
    assert code == 0, err
    assert "megatron_gpt_22b_a100" in out
    assert "skipped (1):" in out and "gaudi2_run: no hardware node for 'Intel Gaudi 2'" in out
    assert "summary of |relative error|:" in out
    assert "step time (s)        n=2" in out


def test_cli_json_and_only(run_validate, engine):
    code, out, err = run_validate("validate", RUNS, "--format", "json", "--only", "titan*")
    assert code == 0, err
    data = json.loads(out)
    assert [r["id"] for r in data["rows"]] == ["titan_llama_8b_h100_96gb"]
    assert data["summary"]["step_time_s"]["n"] == 1
    assert data == json.loads(v.to_json(v.validate(engine, RUNS, "titan*")))


def test_cli_only_matching_nothing(run_validate):
    code, out, err = run_validate("validate", RUNS, "--only", "nothing-like-this")
    assert code == 2
    assert err == ("error: --only 'nothing-like-this' matches no run id in "
                   f"{display_path(RUNS)}\n")


def test_cli_missing_file(run_validate):
    code, out, err = run_validate("validate", "no/such/runs.yaml")
    assert code == 2
    assert err.startswith("error: runs file 'no/such/runs.yaml' does not exist")


def test_malformed_yaml_names_file_and_line(run_validate):
    code, out, err = run_validate("validate", str(DATA / "bad_yaml.yaml"))
    assert code == 2
    assert err == (f"error: {display_path(str(DATA / 'bad_yaml.yaml'))}:4: YAML syntax "
                   "error: did not find expected key; fix the indentation or quoting on this "
                   "line\n")


def test_malformed_fields_all_reported_with_lines(run_validate):
    path = display_path(str(DATA / "bad_fields.yaml"))
    code, out, err = run_validate("validate", str(DATA / "bad_fields.yaml"))
    assert code == 2
    assert err.splitlines() == [
        f"error: {path}:3: run 'wrong_types': model.layers = 'many' is not an integer; "
        "write an integer there",
        f"error: {path}:14: run 'wrong_types': parallel.sp = 'maybe' is not true or false; "
        "write true or false there",
        f"error: {path}:19: duplicate run id 'wrong_types' (first on line 1); make ids unique",
    ]


def test_not_a_list(tmp_path, engine):
    p = tmp_path / "runs.yaml"
    p.write_text("model: {layers: 2}\n")
    with pytest.raises(UsageError, match="a runs file is a YAML list of runs"):
        v.validate(engine, str(p))


def test_not_a_list_names_the_file_and_line(run_validate, tmp_path):
    p = tmp_path / "runs.yaml"
    p.write_text("# a comment\nmodel: {layers: 2}\n")
    code, out, err = run_validate("validate", str(p))
    assert code == 2 and out == ""
    assert err == (f"error: {display_path(str(p))}:2: a runs file is a YAML list of runs (- id: "
                   "..., model: ..., hardware: ..., parallel: ..., target: ...); start each run "
                   "with '- id:'\n")


def test_bad_rows_are_reported_and_good_rows_kept(run_validate, engine):
    """Unknown accelerator, a target in words, a duplicate id and a row that is not a
    mapping: one line each with file:line and what to do, exit 2, the good rows predicted."""
    path = str(DATA / "bad_rows.yaml")
    shown = display_path(path)
    code, out, err = run_validate("validate", path)
    assert code == 2
    assert err.splitlines() == [
        f"error: {shown}:11: run 'unknown_accelerator': accelerator 'Acme Zeta-9' is not one "
        "dlformula knows; give hardware.node (`dlformula hardware` lists them)",
        f"error: {shown}:20: run 'text_target': target.step_time_s = 'about a second' is not "
        "a number; write a number there",
        f"error: {shown}:21: duplicate run id 'good_first' (first on line 2); make ids unique",
        f"error: {shown}:25: each run must be a mapping with an 'id' (- id: ...)",
    ]
    report = v.validate(engine, path)
    assert [r["id"] for r in report["rows"]] == ["good_first", "good_last"]
    assert all("predicted" in r for r in report["rows"])
    assert [(e["line"], e["path"]) for e in report["errors"]] == [
        (11, shown), (20, shown), (21, shown), (25, shown)]
    assert "good_first" in out and "good_last" in out
    code, out, _ = run_validate("validate", path, "--format", "json")
    assert code == 2 and [e["line"] for e in json.loads(out)["errors"]] == [11, 20, 21, 25]


def test_a_run_without_its_model_shape_is_bad_input(run_validate, tmp_path):
    p = tmp_path / "runs.yaml"
    p.write_text("- id: shapeless\n  model: {layers: 2, hidden: 64}\n"
                 "  hardware: {gpu: H100, count: 8}\n  target: {step_time_s: 1}\n")
    code, out, err = run_validate("validate", str(p))
    assert code == 2
    assert err == (f"error: {display_path(str(p))}:1: run 'shapeless': gives no model.heads, "
                   "model.vocab, model.seq_len; add them (the model shape and sequence length "
                   "are needed to predict it)\n")


def test_a_config_that_cannot_run_is_bad_input(run_validate, tmp_path):
    """A stated layout or value the formulas refuse is the run's to fix, not a skip."""
    p = tmp_path / "runs.yaml"
    p.write_text("- id: ok\n  model: {layers: 4, hidden: 64, heads: 2, vocab: 100, seq_len: 128}\n"
                 "  hardware: {gpu: H100, count: 8}\n  parallel: {tp: 1, dp: 8}\n"
                 "  batch: {micro_batch: 1, global_batch: 8}\n  target: {step_time_s: 1}\n"
                 "- id: odd_batch\n"
                 "  model: {layers: 4, hidden: 64, heads: 2, vocab: 100, seq_len: 128}\n"
                 "  hardware: {gpu: H100, count: 8}\n  parallel: {tp: 1, dp: 8, zero: 1}\n"
                 "  batch: {micro_batch: 3, global_batch: 8}\n  target: {step_time_s: 1}\n")
    shown = display_path(str(p))
    code, out, err = run_validate("validate", str(p))
    assert code == 2 and "ok " in out and "odd_batch" not in out
    assert err == (f"error: {shown}:7: run 'odd_batch': the config it states cannot run: "
                   "training.global_batch = 8 is not divisible by dp x micro_batch = 8 x 3; "
                   "change the batch, dp or micro_batch; fix the run (`dlformula validate "
                   f"{shown} --show odd_batch` prints its config)\n")
