"""`dlformula validate`: the run -> config mapping, predictions, errors and the summary."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from dlformula import validate as v
from dlformula.errors import UsageError, display_path
from dlformula.validation import mapping
from dlformula.validation.report import _hbm_specs
from dlformula.validation.runsfile import Row

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
                          "layer_22b_no_recompute", "tpu_v4_run"]
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
    reason = by_id(report)["tpu_v4_run"]["skipped"]
    assert reason == ("no hardware node for GPU 'TPU v4'; add hardware.node to the row "
                      "(dlformula hardware lists them)")


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


def test_summary_matches_the_rows(report):
    errs = [abs(r["rel_error"]["step_time_s"]) for r in report["rows"]
            if "step_time_s" in r.get("rel_error", {})]
    s = report["summary"]["step_time_s"]
    assert s["max_abs"] == max(errs)
    assert s["median_abs"] == pytest.approx(sum(errs) / 2)


# -- the mapping --------------------------------------------------------------------------------

def config_of(report, rid):
    return dict(item.split("=", 1) for item in by_id(report)[rid]["config"])


def test_mapping_of_a_megatron_row(report):
    c = config_of(report, "megatron_gpt_22b_a100")
    assert c["hardware.node"] == "a100-sxm4-80gb"
    assert (c["parallelism.tp"], c["parallelism.pp"], c["parallelism.dp"]) == ("8", "2", "1")
    assert c["model.glu"] == "false" and c["model.norm"] == "layernorm"
    assert c["model.position_embedding"] == "learned"
    assert c["training.recompute"] == "selective"
    assert c["training.precision"] == "fp16" and c["training.grad_bytes"] == "2"
    # published before FlashAttention: unfused attention, dropout, no DP overlap
    assert c["training.flash_attention"] == "false"
    assert c["training.dropout"] == "true"
    assert c["parallelism.overlap_grad_reduce"] == "false"


def test_mapping_defaults_are_recorded(report):
    r = by_id(report)["titan_llama_8b_h100_96gb"]
    c = config_of(report, "titan_llama_8b_h100_96gb")
    assert "training.recompute" not in c  # 'unknown' leaves the model's default
    assert "recompute unknown: the model's default" in r["assumptions"]
    assert c["model.glu"] == "true" and c["model.kv_heads"] == "8"
    assert c["parallelism.zero"] == "3"
    assert c["hardware.node"] == "h100-sxm"
    assert c["hardware.hbm_capacity"] == "96 GiB"
    assert c["hardware.hbm_bandwidth"] == "2.4 TB/s"
    assert c["hardware.tdp"] == "500 W"
    assert c["training.flash_attention"] == "true"
    layer = by_id(report)["layer_22b_no_recompute"]
    assert "global batch not given: one micro-batch per replica (4)" in layer["assumptions"]


class _Replace(dict):
    """A section `_row` takes as it is instead of merging it into the default one."""


def _row(**sections):
    base = {"id": "x", "model": {"layers": 126, "hidden": 1024, "heads": 8, "ffn_hidden": 4096,
                                 "vocab": 1000, "seq_len": 1024},
            "hardware": {"gpu": "H100-SXM5-80GB", "count": 64},
            "parallel": {"tp": 1, "pp": 8, "dp": 8}, "batch": {"global_batch_sequences": 256,
                                                             "micro_batch": 32},
            "precision": "bf16", "target": {"step_time_s": 1.0}}
    for k, val in sections.items():
        merge = isinstance(base.get(k), dict) and not isinstance(val, _Replace)
        base[k] = {**base[k], **val} if merge else dict(val) if isinstance(val, dict) else val
    import yaml

    from dlformula.yamlfile import load_yaml

    return Row(load_yaml(yaml.safe_dump([base]), "t.yaml", UsageError).value[0], "t.yaml", [])


def _map(engine, row):
    known = {d.config for d in engine.model.inputs.values() if d.config}
    ids = engine.catalog.node_ids()
    return v.map_row(row, known, ids, _hbm_specs(engine.catalog, ids))


def test_uneven_stages_and_local_batch(engine):
    m = _map(engine, _row())
    c = dict(item.split("=", 1) for item in m.sets)
    # 126 layers over 8 stages: 16 on each middle stage, 15 on the first and the last
    assert (c["parallelism.first_stage_layers"], c["parallelism.last_stage_layers"]) == ("15",
                                                                                         "15")
    # micro_batch 32 = the whole local batch: split into pp micro-batches
    assert c["training.micro_batch"] == "4"
    assert any("whole local batch" in a for a in m.assumptions)


def test_interleaved_uneven_stages_split_per_gpu(engine):
    """126 blocks over 8 x 2 interleaved stages (torchtitan's 405B run): counted per GPU, all
    its chunks together, as without interleaving; the engine accepts the layout."""
    m = _map(engine, _row(parallel={"pp_schedule": "interleaved_1f1b"}))
    c = dict(item.split("=", 1) for item in m.sets)
    assert c["parallelism.vpp"] == "2"
    assert (c["parallelism.first_stage_layers"], c["parallelism.last_stage_layers"]) == ("15",
                                                                                         "15")
    r = engine.evaluate(None, m.sets)
    assert (r["layers_first_stage"], r["layers_middle_stage"], r["layers_last_stage"]) == (
        15, 16, 15)


def test_a_split_leaving_a_chunk_without_blocks_is_refused(engine):
    from dlformula.errors import DlfError

    m = _map(engine, _row(parallel={"vpp": 17}))  # 15 blocks cannot fill 16 of 17 chunks
    with pytest.raises(DlfError, match="126 does not split over pp x vpp = 8 x 17"):
        engine.evaluate(None, m.sets)
    # 15 blocks in 16 chunks: the extra one holds the embedding or the loss (Megatron-LM's
    # account-for-embedding/loss-in-pipeline-split)
    engine.evaluate(None, _map(engine, _row(parallel={"vpp": 16})).sets)


def test_unknown_precision_is_skipped(engine):
    with pytest.raises(v.Skip, match="precision 'int4' is not one of"):
        _map(engine, _row(precision="int4", parallel={"pp": 1, "dp": 64}))


@pytest.mark.parametrize("text, precision", [
    ("bf16 (amp)", "bf16"), ("amp_bf16", "bf16"), ("bf16-mixed", "bf16"), ("BF16", "bf16"),
    ("fp8 (torchao float8)", "fp8"), ("amp_fp8", "fp8"), ("MXFP8", "fp8"),
    ("FP8 hybrid, bf16 master weights", "fp8"), ("fp16", "fp16"), ("fp32", "tf32")])
def test_precision_spellings(engine, text, precision):
    c = dict(item.split("=", 1) for item in _map(engine, _row(precision=text)).sets)
    assert c["training.precision"] == precision


def test_four_bit_training_is_skipped(engine):
    with pytest.raises(v.Skip, match="4-bit training is not modelled"):
        _map(engine, _row(precision="nvfp4"))


@pytest.mark.parametrize("text, recompute", [
    ("full", "full"), ("full (uniform, 1 layer)", "full"), (True, "full"), ("block", "full"),
    ("selective", "selective"), ("selective (attention core)", "selective"), ("op", "op"),
    ("none", "none"), (False, "none"), ("no", "none"), ("unknown", None)])
def test_recompute_spellings(engine, text, recompute):
    m = _map(engine, _row(parallel={"recompute": text}))
    c = dict(item.split("=", 1) for item in m.sets)
    assert c.get("training.recompute") == recompute
    if recompute is None:
        assert f"recompute {text}: the model's default" in m.assumptions


@pytest.mark.parametrize("batch, gbs, micro", [
    ({"global_batch_size": 512, "micro_batch_size": 2}, "512", "2"),
    ({"gbs": 128, "mbs": 1}, "128", "1"),
    ({"global_batch_tokens": 262144}, "256", "1"),  # 1024-token sequences
])
def test_batch_spellings(engine, batch, gbs, micro):
    row = _row(parallel={"pp": 1, "dp": 64}, batch=_Replace(batch))
    c = dict(item.split("=", 1) for item in _map(engine, row).sets)
    assert (c["training.global_batch"], c["training.micro_batch"]) == (gbs, micro)


def test_moe_rows_map_to_the_plugin_keys(engine):
    if "moe.experts" not in {d.config for d in engine.model.inputs.values()}:
        pytest.skip("the moe plugin is not loaded")
    r = v.validate(engine, str(DATA / "moe.yaml"))["rows"][0]
    c = dict(item.split("=", 1) for item in r["config"])
    assert (c["moe.experts"], c["moe.top_k"], c["parallelism.ep"]) == ("8", "2", "8")


def _moe_row(**sections):
    base = {"model": {"layers": 32, "hidden": 4096, "heads": 32, "kv_heads": 8,
                      "ffn_hidden": 14336, "vocab": 32000, "seq_len": 4096, "experts": 8,
                      "top_k": 2},
            "parallel": {"tp": 2, "pp": 1, "dp": 32, "ep": 8},
            "batch": {"global_batch_sequences": 256, "micro_batch": 1}}
    for k, val in sections.items():
        base[k] = {**base.get(k, {}), **val} if isinstance(val, dict) else val
    return _row(**{k: _Replace(v) if isinstance(v, dict) else v for k, v in base.items()})


def _sets(engine, row) -> dict[str, str]:
    return dict(item.split("=", 1) for item in _map(engine, row).sets)


def test_moe_dispatcher_and_overlap_as_the_run_states_them(engine):
    if "moe.experts" not in {d.config for d in engine.model.inputs.values()}:
        pytest.skip("the moe plugin is not loaded")
    plain = _sets(engine, _moe_row())
    assert "moe.dispatcher" not in plain and "parallelism.ep_comm_overlap" not in plain
    c = _sets(engine, _moe_row(notes="Dispatcher DeepEP; EP spans 4 nodes.",
                               parallel={"pp_schedule": "1F1B with a2a overlap"}))
    assert c["moe.dispatcher"] == "deepep" and c["parallelism.ep_comm_overlap"] == "true"
    c = _sets(engine, _moe_row(notes="NCCL all-to-all dispatcher (not DeepEP)"))
    assert "moe.dispatcher" not in c


def test_expert_tp_falls_back_to_one_when_tp_times_ep_does_not_fit(engine):
    if "moe.experts" not in {d.config for d in engine.model.inputs.values()}:
        pytest.skip("the moe plugin is not loaded")
    # tp 2 x ep 32 = 64 > the 2 x 16 ranks of a stage: the published run used etp 1
    m = _map(engine, _moe_row(model={"experts": 128}, parallel={"dp": 16, "pp": 2, "ep": 32}))
    c = dict(item.split("=", 1) for item in m.sets)
    assert c["parallelism.etp"] == "1"
    assert any("etp = 1" in a for a in m.assumptions)
    assert "parallelism.etp" not in _sets(engine, _moe_row())  # tp 2 x ep 8 fits: default


@pytest.mark.parametrize("source, grad_bytes", [
    ("NVIDIA NeMo docs, performance_summary.md (NeMo 24.07)", "2"),
    ("NVIDIA-NeMo/Megatron-Bridge docs/performance-summary.md", "2"),
    ("NVIDIA/dgxc-benchmarking llama3.1/README.md", "2"),
    ("NVIDIA NeMo AutoModel docs/performance-summary.md", None),
    ("pytorch/torchtitan benchmarks", None)])
def test_nvidia_performance_recipes_reduce_gradients_in_bf16(engine, source, grad_bytes):
    assert _sets(engine, _row(source=source)).get("training.grad_bytes") == grad_bytes


def test_moe_rows_without_the_plugin_are_skipped():
    from dlformula.core import Engine
    from dlformula.resources import builtin_folders

    core_only = Engine(folders=builtin_folders())
    r = v.validate(core_only, str(DATA / "moe.yaml"))["rows"][0]
    assert r == {"id": "mixtral_like_moe", "skipped": "MoE needs the moe plugin"}


@pytest.mark.parametrize("gpu, node", [
    ("A100-SXM4-80GB", "a100-sxm4-80gb"), ("A100-40GB", "a100-sxm4-40gb"),
    ("H100-SXM5-80GB (DGX H100)", "h100-sxm"), ("H100 PCIe", "h100-pcie"),
    ("NVIDIA H200", "h200"), ("GB200 NVL72", "gb200-nvl72"), ("B200", "b200"),
    ("MI300X", "mi300x"), ("TPU v4", None)])
def test_gpu_names(engine, gpu, node):
    assert mapping._node_for(gpu, engine.catalog.node_ids()) == node


# -- the command --------------------------------------------------------------------------------

def test_cli_table(run_validate):
    code, out, err = run_validate("validate", RUNS)
    assert code == 0, err
    assert "megatron_gpt_22b_a100" in out
    assert "skipped (1):" in out and "tpu_v4_run: no hardware node for GPU 'TPU v4'" in out
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
        f"error: {path}:3: run 'wrong_types': model.layers = 'many' is not an integer",
        f"error: {path}:14: run 'wrong_types': parallel.sp = 'maybe' is not true or false",
        f"error: {path}:19: duplicate run id 'wrong_types' (first on line 1); make ids unique",
    ]


def test_not_a_list(tmp_path, engine):
    p = tmp_path / "runs.yaml"
    p.write_text("model: {layers: 2}\n")
    with pytest.raises(UsageError, match="a runs file is a YAML list of runs"):
        v.validate(engine, str(p))


# -- the public set -----------------------------------------------------------------------------

def test_public_runs_are_all_accounted_for(engine):
    import yaml

    report = v.validate(engine, str(PUBLIC))
    assert len(report["rows"]) == len(yaml.safe_load(PUBLIC.read_text()))
    for r in report["rows"]:
        assert "skipped" in r or r["predicted"]
        for value in r.get("predicted", {}).values():
            assert math.isfinite(value) and value > 0


@pytest.mark.parametrize("path", sorted(p for p in SHIPPED.glob("*.yaml") if p != PUBLIC),
                         ids=lambda p: p.name)
def test_held_out_runs_files_are_all_accounted_for(engine, path):
    """The held-out runs files shipped in runs/ read cleanly, and every run is predicted or
    skipped with a reason (docs/validation.md reports them)."""
    import yaml

    report = v.validate(engine, str(path))
    assert len(report["rows"]) == len(yaml.safe_load(path.read_text()))
    predicted = [r for r in report["rows"] if "predicted" in r]
    assert len(predicted) >= len(report["rows"]) - 2
    for r in predicted:
        assert all(math.isfinite(x) and x > 0 for x in r["predicted"].values())
