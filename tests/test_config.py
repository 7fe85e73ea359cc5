"""Config files: the contract, precedence, and one exact line per problem."""

from __future__ import annotations

import pytest

from conftest import DATA, EXAMPLES, write

GPT3 = str(EXAMPLES / "gpt3-175b.yaml")


def test_contract_keys_and_precedence(engine):
    cfg = engine.config(GPT3, ["model.layers=48", "parallelism.pp=4", "parallelism.dp=32"])
    assert cfg.values["layers"] == 48  # --set beats the preset
    assert str(cfg.origins["layers"]) == "--set"
    assert cfg.origins["hidden"].kind == "preset"
    assert cfg.origins["hbm_capacity"].kind == "node"
    assert cfg.values["hbm_capacity"] == 80 * 2**30
    assert cfg.values["tokens"] == 300e9  # YAML 1.1 would read 300e9 as text
    assert cfg.labels["recompute"] == "selective" and cfg.values["recompute"] == 1


def test_explicit_model_field_overrides_preset(engine, tmp_path):
    path = write(tmp_path, "c.yaml", open(GPT3).read().replace(
        "{preset: gpt3-175b}", "{preset: gpt3-175b, layers: 48}"))
    cfg = engine.config(path)
    assert cfg.values["layers"] == 48 and cfg.origins["layers"].line == 2


def test_hardware_override_with_units(engine):
    cfg = engine.config(GPT3, ["hardware.hbm_capacity=40 GiB", "hardware.price_per_gpu_hour=1.5"])
    assert cfg.values["hbm_capacity"] == 40 * 2**30
    assert cfg.values["price_per_gpu_hour"] == 1.5


def test_bad_types(run):
    code, out, err = run("eval", str(DATA / "bad_config_types.yaml"))
    p = str(DATA / "bad_config_types.yaml")
    import os

    p = os.path.relpath(p)
    assert code == 2 and out == ""
    assert err.splitlines() == [
        f"error: {p}:3: parallelism.tp = 'eight': must be an integer (Tensor-parallel degree "
        "(Megatron column/row split of every GEMM))",
        f"error: {p}:4: training.micro_batch = 0: must be integer >= 1 (Sequences per "
        "micro-batch on one pipeline)",
        f"error: {p}:4: training.recompute = 'sometimes': must be one of none, selective, full, "
        "op, auto, save_qkv_proj, save_dots, save_weight_dots (Activation recomputation: none, "
        "selective (attention core only), full (every layer), op (torchtitan's per-op policy: "
        "every other matmul recomputed), auto (just enough layers recomputed in full for the peak "
        "to fit in memory; the others recompute the attention core only if an unfused kernel "
        "stores its scores), save_qkv_proj (MaxText's JAX policy: the QKV projections kept, and "
        "the backward recomputes only what it needs, which leaves out the MLP's output "
        "projection), save_dots (MaxText's minimal_with_context, once minimal_flash: every weight "
        "matmul's output and the attention context kept, only the element-wise work recomputed) "
        "or save_weight_dots (JAX's checkpoint_dots_with_no_batch_dims, MaxText's minimal, Pax's "
        "SAVE_DOT_WITH_NO_BATCH_DIM: every weight matmul's output kept, the attention core and "
        "the element-wise work recomputed))",
    ]


def test_unknown_keys(run):
    import os

    p = os.path.relpath(DATA / "bad_config_keys.yaml")
    code, _, err = run("eval", p)
    assert code == 2
    assert err.splitlines() == [
        f"error: {p}:3: unknown key 'parallelism.zer0' (did you mean 'parallelism.zero'?); "
        "`dlformula list` shows every input and its config key",
        f"error: {p}:5: unknown section 'trainig' (did you mean 'training'?); sections: cost, "
        "hardware, mla, model, moe, parallelism, training",
    ]


def test_layouts_that_cannot_run(run):
    import os

    p = os.path.relpath(DATA / "bad_config_layout.yaml")
    code, _, err = run("eval", p)
    assert code == 2
    assert err.splitlines() == [
        f"error: {p}:3: tp x pp x dp x cp = 1792 but hardware.gpus = 1000; make the product "
        "equal the GPU count",
        f"error: {p}:3: model.layers = 96 does not split over pp x vpp = 7 x 15 (an uneven "
        "split needs a block in every model chunk: vpp blocks on each stage, vpp - 1 on the "
        "first and last, whose extra chunk may hold only the embedding or the loss); choose "
        "another pp or vpp",
        f"error: {p}:4: training.global_batch = 1500 is not divisible by dp x micro_batch = "
        "16 x 1; change the batch, dp or micro_batch",
        f"error: {p}:4: the interleaved schedule needs micro-batches (93.75 microbatch) to be a "
        "multiple of pp = 7; change global_batch, micro_batch or dp",
    ]


@pytest.mark.parametrize("sets,message", [
    (["parallelism.tp=16", "parallelism.pp=4", "model.kv_heads=6", "model.heads=96"],
     "model.kv_heads = 6 and parallelism.tp = 16: one must divide the other"),
    (["parallelism.tp=5", "parallelism.dp=25", "hardware.gpus=1000"],
     "model.heads = 96 is not divisible by parallelism.tp = 5"),
    (["parallelism.vpp=2", "parallelism.pp=1", "parallelism.dp=128"],
     "parallelism.vpp = 2 needs pipeline parallelism"),
    (["training.precision=fp8"], "the hardware node has no fp8 tensor cores"),
    (["training.precision=nvfp4", "hardware.node=h100-sxm"],
     "the hardware node has no FP4 tensor cores (hardware.peak_flops_fp4 is 0)"),
    (["parallelism.cp=3", "parallelism.dp=5", "hardware.gpus=960", "training.global_batch=1500"],
     "training.seq_len = 2048 is not divisible by parallelism.cp = 3"),
])
def test_constraints(run, sets, message):
    args = ["eval", GPT3]
    for s in sets:
        args += ["--set", s]
    code, _, err = run(*args)
    assert code == 2
    assert message in err
    assert "Traceback" not in err


@pytest.mark.parametrize("args,message", [
    (["--set", "parallelism.tp"], "error: --set 'parallelism.tp': write SECTION.KEY=VALUE, "
                                  "e.g. --set parallelism.tp=4"),
    (["--set", "hardware.node=h100"], "error: --set: unknown hardware node 'h100' (did you mean "
                                     "'h200'?); `dlformula hardware` lists them"),
    (["--set", "model.preset=llama3-405b"], "error: --set: unknown model preset 'llama3-405b' "
                                            "(did you mean 'llama3.1-405b'?); `dlformula "
                                            "presets` lists them"),
    (["--set", "training.tokens=lots"], "error: --set: training.tokens = 'lots': must be a "
                                        "number (Tokens the whole run trains on)"),
])
def test_bad_set(run, args, message):
    code, _, err = run("eval", GPT3, *args)
    assert code == 2
    assert err.strip() == message


def test_missing_everything(run, tmp_path):
    path = write(tmp_path, "c.yaml", "training: {seq_len: 2048}\n")
    code, _, err = run("eval", path)
    assert code == 2
    assert "set hardware.node" in err and "model.preset" in err
    assert len(err.splitlines()) <= 3


@pytest.mark.parametrize("text,message", [
    ("model: [1, 2]\n", ":1: section 'model' must be a mapping of keys"),
    ("- a\n- b\n", ":1: a config is a mapping of sections"),
    ("model: {preset: gpt3-175b\n", "YAML syntax error"),
    ("", ":1: the config is empty"),
    ("model: {preset: gpt3-175b, preset: x}\n", "duplicate key 'preset'"),
])
def test_malformed_config(run, tmp_path, text, message):
    path = write(tmp_path, "c.yaml", text)
    code, _, err = run("eval", path)
    assert code == 2, err
    assert message in err and err.count("\n") == 1


def test_hf_config_key_is_relative_to_the_config(engine, tmp_path):
    import shutil

    shutil.copy(DATA / "hf" / "llama3.1-8b.json", tmp_path / "config.json")
    path = write(tmp_path, "c.yaml", open(GPT3).read().replace(
        "{preset: gpt3-175b}", "{hf_config: config.json}"))
    cfg = engine.config(path, ["parallelism.pp=4", "parallelism.dp=32"])
    assert cfg.values["layers"] == 32 and cfg.values["kv_heads"] == 8
    assert cfg.origins["layers"].kind == "hf_config"


REQUIRED = ["params_total", "params_active", "states_memory", "act_memory", "memory_per_gpu",
            "flops_per_step", "step_time", "mfu", "hfu", "tokens_per_second", "training_days",
            "gpu_hours", "cost_usd", "energy_kwh", "pipeline_bubble_fraction", "tp_comm_time",
            "pp_comm_time", "dp_comm_time", "cp_comm_time"]


def test_names_other_tools_call_exist(gpt3):
    missing = [n for n in REQUIRED if n not in gpt3.model.quantities]
    assert missing == []
    assert all(gpt3[n] == gpt3[n] for n in REQUIRED)  # no NaN
