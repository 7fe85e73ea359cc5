"""How a run becomes a config: spellings, nested blocks, switches, ignored settings, framework
conventions, recipes and the best feasible value of a knob a run leaves out, accelerator names,
and the layout `validate` predicts being the one `eval` computes."""

from __future__ import annotations

from pathlib import Path

import pytest

from dlformula import validate as v
from dlformula.errors import UsageError
from dlformula.validation import mapping
from dlformula.validation.conventions import conventions, first_match
from dlformula.validation.report import context
from dlformula.validation.runsfile import Row

DATA = Path(__file__).resolve().parent / "data" / "validation"
RUNS = str(DATA / "runs.yaml")


@pytest.fixture(scope="module")
def report(engine):
    return v.validate(engine, RUNS)


def by_id(report):
    return {r["id"]: r for r in report["rows"]}


def has_moe(engine):
    return "moe.experts" in {d.config for d in engine.model.inputs.values()}


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
    # 'unknown': selective, plus as much full recompute as the tensors need to fit
    assert c["training.recompute"] == "auto" and c["training.allocator_overhead"] == "0"
    assert any(a.startswith("recompute unknown: auto") for a in r["assumptions"])
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
                                                             "micro_batch": 4},
            "precision": "bf16", "target": {"step_time_s": 1.0}}
    for k, val in sections.items():
        merge = isinstance(base.get(k), dict) and not isinstance(val, _Replace)
        base[k] = {**base[k], **val} if merge else dict(val) if isinstance(val, dict) else val
    return _load(base)


def _load(row: dict, errors: list | None = None) -> Row:
    """ROW (a runs file's row as a dict) read as the loader reads a file of it; malformed
    fields go to ERRORS."""
    import yaml

    from dlformula.yamlfile import load_yaml

    return Row(load_yaml(yaml.safe_dump([row], sort_keys=False), "t.yaml", UsageError).value[0],
               "t.yaml", [] if errors is None else errors)


def _map(engine, row):
    return mapping.map_row(row, context(engine))


def test_a_recipe_block_quoting_the_launch_does_not_contradict_the_run_s_own_value(engine):
    """A recipe (framework) block quotes the launch flags as written; where the run's own section
    gives the same key, the run's value is read and the quote only noted, in either order. Two
    values in the run's own sections still make the row malformed, naming the line."""
    quote = "--checkpoint-activations --checkpoint-num-layers 1"
    for order in ("section first", "recipe first"):
        row = {"id": "x", "model": {"layers": 32, "hidden": 4096, "heads": 32, "ffn_hidden": 11008,
                                    "vocab": 32000, "seq_len": 4096},
               "hardware": {"gpu": "A100-SXM4-40GB", "count": 64},
               "parallel": {"tp": 2, "pp": 1, "dp": 32, "recompute": "full"},
               "batch": {"global_batch_sequences": 256, "micro_batch": 8},
               "precision": "bf16", "target": {"step_time_s": 1.0}}
        if order == "recipe first":
            row = {"recipe": {"activation_checkpointing": quote}, **row}
        else:
            row["recipe"] = {"activation_checkpointing": quote}
        errors: list = []
        r = _load(row, errors)
        assert errors == [], order
        m = _map(engine, r)
        c = dict(item.split("=", 1) for item in m.sets)
        assert c["training.recompute"] == "full", order
        noted = [n for n in m.assumptions if "recipe.activation_checkpointing" in n]
        assert noted and "not read" in noted[0], order
    clash = {"id": "x", "model": {"layers": 32, "num_layers": 40}}
    errors = []
    _load(clash, errors)
    assert len(errors) == 1 and "give two values for model.layers" in str(errors[0])
    assert errors[0].line is not None


def test_uneven_stages_are_the_formulas_own_and_local_batch(engine):
    """The mapping leaves the uneven split to formulas/parallelism.yaml (no first/last stage
    keys), so validate predicts the layout eval and search compute."""
    m = _map(engine, _row())
    c = dict(item.split("=", 1) for item in m.sets)
    assert "parallelism.first_stage_layers" not in c and "parallelism.last_stage_layers" not in c
    r = engine.evaluate(None, m.sets)
    # 126 layers over 8 stages: 16 on each middle stage, 15 on the first and the last
    assert (r["layers_first_stage"], r["layers_middle_stage"], r["layers_last_stage"]) == (
        15, 16, 15)
    # Outside torchtitan a micro-batch equal to the local batch (256 / dp 8) is one micro-batch,
    # as written (a tutorial measuring the bubble of m = 1).
    m = _map(engine, _row(batch={"micro_batch": 32}))
    c = dict(item.split("=", 1) for item in m.sets)
    assert c["training.micro_batch"] == "32"
    assert not any("whole local batch" in a for a in m.assumptions)
    # torchtitan's "local batch size 32", copied as the micro-batch, is split into pp
    # micro-batches, as torchtitan does by default.
    m = _map(engine, _row(batch={"micro_batch": 32},
                          source="pytorch/torchtitan docs/performance.md"))
    c = dict(item.split("=", 1) for item in m.sets)
    assert c["training.micro_batch"] == "4"
    assert any("whole local batch" in a for a in m.assumptions)


@pytest.mark.parametrize("layers, pp", [(95, 4), (126, 8), (61, 16), (94, 32), (17, 8), (30, 4)])
def test_validate_predicts_the_layout_eval_computes(engine, tmp_path, layers, pp):
    """Issue 17: the uneven split lived in the mapping too, and disagreed (95 over 4: eval
    23/24, the mapping 24/23; 17 over 8: eval refuses, the mapping split it). One home now:
    validate's config evaluates to eval's split, or is refused as eval refuses it."""
    from dlformula.errors import DlfError

    row = _row(model={"layers": layers}, parallel={"pp": pp, "dp": 64 // pp, "vpp": 1},
               batch=_Replace({"global_batch_sequences": 256, "micro_batch": 1}))
    m = _map(engine, row)
    config = tmp_path / "c.yaml"
    config.write_text(
        f"model: {{layers: {layers}, hidden: 1024, heads: 8, kv_heads: 8, ffn_hidden: 4096, "
        f"vocab: 1000}}\nhardware: {{node: h100-sxm, gpus: 64}}\n"
        f"parallelism: {{tp: 1, pp: {pp}, dp: {64 // pp}}}\n"
        "training: {seq_len: 1024, global_batch: 256, micro_batch: 1, tokens: 1e9}\n")
    keys = ("layers_first_stage", "layers_middle_stage", "layers_last_stage")
    try:
        want = engine.evaluate(str(config))
    except DlfError as exc:
        with pytest.raises(DlfError) as got:
            engine.evaluate(None, m.sets)
        assert str(got.value).split(": ", 1)[-1] == str(exc).split(": ", 1)[-1]
        return
    got = engine.evaluate(None, m.sets)
    assert [got[k] for k in keys] == [want[k] for k in keys]
    if layers % pp:
        first, middle, last = (int(want[k]) for k in keys)
        assert (f"{layers} layers over {pp} stages: {first} on the first, {last} on the last, "
                f"{middle} on each other stage (formulas/parallelism.yaml)"
                ) in by_id(v.validate(engine, _write_runs(tmp_path, row)))["x"]["assumptions"]


def _write_runs(tmp_path, row) -> str:
    import yaml

    p = tmp_path / "runs.yaml"
    p.write_text(yaml.safe_dump([row.row.plain()], sort_keys=False))
    return str(p)


def test_interleaved_uneven_stages_split_per_gpu(engine):
    """126 blocks over 8 x 2 interleaved stages (torchtitan's 405B run): counted per GPU, all
    its chunks together, as without interleaving; the engine accepts the layout."""
    m = _map(engine, _row(source="pytorch/torchtitan benchmarks",
                          parallel={"pp_schedule": "interleaved_1f1b"}))
    c = dict(item.split("=", 1) for item in m.sets)
    assert c["parallelism.vpp"] == "2"
    assert any("torchtitan/distributed/pipeline_parallel.py" in a for a in m.assumptions)
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
    with pytest.raises(v.Skip, match="precision 'int4': it is not one of"):
        _map(engine, _row(precision="int4", parallel={"pp": 1, "dp": 64}))


@pytest.mark.parametrize("text, precision", [
    ("bf16 (amp)", "bf16"), ("amp_bf16", "bf16"), ("bf16-mixed", "bf16"), ("BF16", "bf16"),
    ("fp8 (torchao float8)", "fp8"), ("amp_fp8", "fp8"), ("MXFP8", "fp8"),
    ("FP8 hybrid, bf16 master weights", "fp8"), ("fp16", "fp16"), ("fp32", "tf32")])
def test_precision_spellings(engine, text, precision):
    c = dict(item.split("=", 1) for item in _map(engine, _row(precision=text)).sets)
    assert c["training.precision"] == precision


@pytest.mark.parametrize("text", [
    "nvfp4", "NVFP4",
    "nvfp4 (Transformer Engine NVFP4 GEMMs: FP4=True, FP8=False, FP4_RECIPE=nvfp4)"])
def test_nvfp4_is_its_own_precision(engine, text):
    c = dict(item.split("=", 1) for item in _map(engine, _row(precision=text)).sets)
    assert c["training.precision"] == "nvfp4"


def test_other_four_bit_formats_are_skipped(engine):
    with pytest.raises(v.Skip, match="4-bit formats other than NVFP4"):
        _map(engine, _row(precision="mxfp4"))


@pytest.mark.parametrize("text, recompute", [
    ("full", "full"), ("full (uniform, 1 layer)", "full"), (True, "full"), ("block", "full"),
    ("selective", "selective"), ("selective (attention core)", "selective"), ("op", "op"),
    ("none", "none"), (False, "none"), ("no", "none"), ("unknown", "auto"),
    ("custom remat policy save_qkv_proj (everything else recomputed)", "save_qkv_proj"),
    ("save_out_proj", "full"),
    ("none class (MaxText remat_policy minimal_flash: every weight-matmul output saved)",
     "save_dots"),
    ("minimal_with_context", "save_dots"),
    ("save_weight_dots class (Pax CHECKPOINT_POLICY SAVE_DOT_WITH_NO_BATCH_DIM)",
     "save_weight_dots"),
    ("MaxText remat_policy minimal", "save_weight_dots"),
    ("selective (IBM block-level scheme: activation checkpointing of every 1/p-th transformer "
     "block)", "auto"),
    # Megatron-Core's module list: only the listed modules are recomputed
    ("selective (recompute_modules: mlp)", "none"),
    ("selective (recompute_modules: moe_act mlp)", "none"),
    ("selective (recompute_modules: mla_up_proj)", "none"),
    ("selective (recompute_modules: core_attn)", "selective"),
    ("selective (recompute_modules: moe_act core_attn)", "selective"),
    ("selective (recompute_modules: moe)", "selective")])
def test_recompute_spellings(engine, text, recompute):
    m = _map(engine, _row(parallel={"recompute": text}))
    c = dict(item.split("=", 1) for item in m.sets)
    assert c.get("training.recompute") == recompute
    if recompute == "auto":
        assert any(a.startswith(f"recompute {text}: auto") for a in m.assumptions)


@pytest.mark.parametrize("batch, gbs, micro", [
    ({"global_batch_size": 512, "micro_batch_size": 2}, "512", "2"),
    ({"gbs": 128, "mbs": 1}, "128", "1"),
    ({"global_batch_tokens": 262144, "micro_batch": 2}, "256", "2"),  # 1024-token sequences
    ({"global_batch_size": "1,024", "micro_batch_size": "2 (per GPU)"}, "1024", "2"),
])
def test_batch_spellings(engine, batch, gbs, micro):
    row = _row(parallel={"pp": 1, "dp": 64}, batch=_Replace(batch))
    c = dict(item.split("=", 1) for item in _map(engine, row).sets)
    assert (c["training.global_batch"], c["training.micro_batch"]) == (gbs, micro)


@pytest.mark.parametrize("sections, length", [
    ({"batch": {"mean_document_length": 2048}}, "2048"),
    ({"training": {"document_length": 3000}}, "3000"),
    ({"batch": {"doc_masking": "document mask; average document length of 8K tokens"}}, "8192"),
    ({"notes": "Mean document length 1,536 tokens under a document mask."}, "1536"),
])
def test_a_document_length_in_any_spelling_prices_the_mask(engine, sections, length):
    m = _map(engine, _row(**sections))
    assert dict(i.split("=", 1) for i in m.sets)["training.document_length"] == length


def test_a_document_mask_without_a_length_is_noted_not_guessed(engine):
    row = _row(batch={"doc_masking": "attention mask between different documents"})
    m = _map(engine, row)
    assert "training.document_length" not in dict(i.split("=", 1) for i in m.sets)
    assert any(a.startswith("document mask stated without a document length")
               for a in m.assumptions)
    plain = _map(engine, _row())
    assert not any("document" in a for a in plain.assumptions)
    odd = _map(engine, _row(notes="document mask, mean document length 1.2.3 tokens"))
    assert "training.document_length" not in dict(i.split("=", 1) for i in odd.sets)
    assert any(a.startswith("document mask stated without") for a in odd.assumptions)


@pytest.mark.parametrize("field, value, comm", [
    ("cp_comm_type", "a2a", "a2a"),                      # Megatron-LM --cp-comm-type
    ("cp_comm_type", "all_gather", "allgather"),
    ("cp_comm_type", "a2a+p2p", "p2p"),                  # hierarchical: a ring across groups
    ("context_parallel_rotate_method", "alltoall", "a2a"),  # torchtitan
    ("cp_method", "all-gather of K and V before attention (exposed)", "allgather"),
])
def test_context_parallel_exchange_in_the_spellings_runs_use(engine, field, value, comm):
    row = _row(parallel={"pp": 1, "dp": 32, "cp": 2, field: value}, model={"seq_len": 8192})
    m = _map(engine, row)
    assert dict(i.split("=", 1) for i in m.sets)["parallelism.cp_comm"] == comm


@pytest.mark.parametrize("field", ["swiglu", "gated_linear_unit", "glu"])
@pytest.mark.parametrize("flag", [True, False])
def test_the_gated_mlp_under_megatron_names(engine, field, flag):
    m = _map(engine, _row(model={field: flag}))
    assert dict(i.split("=", 1) for i in m.sets)["model.glu"] == str(flag).lower()
    assert not any("ignored" in a and field in a for a in m.assumptions)


def test_deepspeed_torchtitan_and_maxtext_spellings(engine):
    """A DeepSpeed config's batch and ZeRO block, torchtitan's shard degree, checkpointing
    block and compile switch, and MaxText's model and FSDP names are read, not dropped."""
    ds = _sets(engine, _row(parallel=_Replace({"tensor_model_parallel_size": 1,
                                               "zero_optimization": {"stage": 3}}),
                            hardware=_Replace({"gpu": "A100-SXM4-80GB", "count": 64}),
                            batch=_Replace({"train_micro_batch_size_per_gpu": 4,
                                            "gradient_accumulation_steps": 2})))
    assert (ds["parallelism.zero"], ds["training.micro_batch"], ds["training.global_batch"]) \
        == ("3", "4", str(4 * 2 * 64))
    tt = _sets(engine, _row(parallel=_Replace({"data_parallel_shard_degree": -1,
                                               "activation_checkpoint": {"mode": "full"}}),
                            training={"compile": True}, source="pytorch/torchtitan benchmarks",
                            batch=_Replace({"local_batch_size": 2})))
    assert (tt["parallelism.zero"], tt["training.recompute"], tt["training.fused_elementwise"]) \
        == ("3", "full", "true")
    one = _sets(engine, _row(parallel=_Replace({"data_parallel_shard_degree": 1})))
    assert one["parallelism.zero"] == "1"  # a shard degree of 1 is not FSDP
    mt = _sets(engine, _row(model=_Replace({"base_num_decoder_layers": 32, "base_emb_dim": 4096,
                                            "base_num_query_heads": 32, "base_num_kv_heads": 8,
                                            "base_mlp_dim": 14336, "vocab_size": 128256,
                                            "max_target_length": 8192}),
                            parallel=_Replace({"ici_fsdp_parallelism": 8, "remat_policy": "full"}),
                            batch=_Replace({"per_device_batch_size": 2})))
    assert (mt["model.layers"], mt["model.hidden"], mt["model.kv_heads"], mt["training.seq_len"],
            mt["parallelism.zero"], mt["training.recompute"]) == ("32", "4096", "8", "8192",
                                                                    "3", "full")


def test_a_run_published_before_selective_recompute_that_omits_recompute_recomputes_all(engine):
    """Before Korthikanti et al. 2022 the frameworks checkpointed every layer or none: a run of
    that era that leaves recompute out gets full, a later one the smallest share that fits."""
    old = _sets(engine, _row(source="Narayanan et al. 2021, arXiv:2104.04473, Table 1"))
    assert old["training.recompute"] == "full"
    stated = _sets(engine, _row(source="Narayanan et al. 2021, arXiv:2104.04473, Table 1",
                                parallel={"recompute": "none"}))
    assert stated["training.recompute"] == "none"  # the run's own value wins
    new = _sets(engine, _row(source="Megatron-Bridge performance summary (2026)"))
    assert new["training.recompute"] == "auto"


def test_fp8_linear_inputs_are_kept_in_fp8_except_under_torchao(engine):
    """Transformer Engine keeps an FP8 Linear's input in FP8 (the default); torchtitan's
    torchao Float8Linear keeps it in 16 bits, which the convention sets."""
    te = _sets(engine, _row(precision="fp8", source="NVIDIA NeMo performance summary"))
    assert "training.fp8_saved_inputs" not in te
    tt = _sets(engine, _row(precision="fp8", source="pytorch/torchtitan benchmarks"))
    assert tt["training.fp8_saved_inputs"] == "false"
    # torchao's tensorwise recipe: the tensor's own amax, the weight cast at every call
    assert (tt["training.fp8_scaling"], tt["training.fp8_weight_cache"]) == ("current", "false")
    assert "training.fp8_scaling" not in te
    mx = _sets(engine, _row(precision="mxfp8", source="Megatron-Bridge performance summary"))
    assert mx["training.fp8_scaling"] == "block" and "training.fp8_weight_cache" not in mx
    # torchao's MXFP8 is block-scaled too: the tensorwise Float8Linear rule does not claim it
    ao = _sets(engine, _row(precision="mxfp8", source="pytorch/ao torchao/prototype/moe_training"))
    assert ao["training.fp8_scaling"] == "block"
    assert (ao["training.fp8_weight_cache"], ao["training.fp8_saved_inputs"]) == ("false", "false")


def test_megatron_moe_layer_pattern_and_shared_width(engine):
    """'([0]*1+[1]*26)' is one leading dense layer and MoE after it; Megatron-LM's shared-expert
    width is n_shared x the expert width; a pattern too long for any model is not expanded."""
    if not has_moe(engine):
        pytest.skip("the moe plugin is not loaded")
    row = _moe_row(model={"layers": 27, "moe_layer_freq": "([0]*1+[1]*26)",
                          "moe_ffn_hidden_size": 1408,
                          "moe_shared_expert_intermediate_size": 2816})
    m = _map(engine, row)
    got = dict(i.split("=", 1) for i in m.sets)
    assert (got["moe.first_dense_layers"], got["moe.moe_every"], got["moe.shared_experts"]) == (
        "1", "1", "2")
    assert not any("shared_expert" in a and "ignored" in a for a in m.assumptions)
    huge = _moe_row(model={"layers": 27, "moe_layer_freq": "[1]*99999999999"})
    assert huge.get("moe.moe_every").value == "[1]*99999999999"  # left as written, not expanded


@pytest.mark.parametrize("fields, precision", [
    ({"bf16": True}, "bf16"), ({"fp16": True, "bf16": False}, "fp16"),
    ({"fp8_format": "hybrid", "bf16": True}, "fp8"), ({"fp8": False, "bf16": True}, "bf16"),
])
def test_precision_written_as_switches(engine, fields, precision):
    row = _row(precision=None, training=fields)
    got = dict(i.split("=", 1) for i in _map(engine, row).sets)
    assert got["training.precision"] == precision


def test_the_gpu_count_from_nodes_times_gpus_per_node(engine):
    row = _row(hardware=_Replace({"gpu": "H100", "nodes": 8, "gpus_per_node": 8}),
               parallel=_Replace({"tp": 2, "pp": 1}))
    m = _map(engine, row)
    got = dict(i.split("=", 1) for i in m.sets)
    assert (got["hardware.gpus"], got["parallelism.dp"]) == ("64", "32")
    assert not any("nodes ignored" in a for a in m.assumptions)


def test_a_sentence_naming_two_choices_is_not_guessed(engine):
    row = _row(parallel={"pp": 1, "dp": 32, "cp": 2, "cp_comm_type": "ring or all-gather"},
               model={"seq_len": 8192})
    m = _map(engine, row)
    assert "parallelism.cp_comm" not in dict(i.split("=", 1) for i in m.sets)
    assert any("cp_comm_type" in a and "ignored" in a and "the model's default" in a
               for a in m.assumptions)


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
    c = _sets(engine, _moe_row(moe={"dispatcher": "allgather"}))
    assert c["moe.dispatcher"] == "allgather"


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
    ("pytorch/torchtitan benchmarks", None)])
def test_nvidia_performance_recipes_reduce_gradients_in_bf16(engine, source, grad_bytes):
    assert _sets(engine, _row(source=source)).get("training.grad_bytes") == grad_bytes


@pytest.mark.parametrize("source, shape, stated, overlap", [
    ("NVIDIA/dgxc-benchmarking llama3.1/README.md (NeMo 25.04.01 container)",
     {"layers": 126, "hidden": 16384}, None, "1"),
    ("NVIDIA NeMo Framework user guide, Performance Summary, NeMo 25.02 container",
     {"layers": 80, "hidden": 8192}, None, "1"),
    ("NVIDIA/dgxc-benchmarking llama3.1/README.md (NeMo 25.04.01 container)",
     {"layers": 126, "hidden": 16384}, False, "0"),
    ("NVIDIA/dgxc-benchmarking llama3.1/README.md (NeMo 25.04.01 container)",
     {"layers": 32, "hidden": 4096}, None, None),
    ("NVIDIA/dgxc-benchmarking llama3.1/README_70b.md (NeMo 24.09 container, NeMo launcher)",
     {"layers": 80, "hidden": 8192}, None, "1"),
    ("NVIDIA/dgxc-benchmarking llama3.1/README_8b.md (NeMo 24.09 container, NeMo launcher)",
     {"layers": 32, "hidden": 4096}, None, None)])
def test_nemo_performance_recipes_overlap_tensor_parallel_traffic(engine, source, shape,
                                                                     stated, overlap):
    parallel = {"tp": 8, "pp": 8, "dp": 1}
    if stated is not None:
        parallel["tp_comm_overlap"] = stated
    row = _row(source=source, model={**shape, "heads": 64}, parallel=parallel)
    assert _sets(engine, row).get("parallelism.tp_comm_overlap") == overlap


@pytest.mark.parametrize("notes, kernel", [
    ("attention through flash-attention v1.0.5's FlashSelfAttention", "fa1"),
    ("pip install flash-attn==1.0.4", "fa1"),
    ("FlashAttention-1 kernels", "fa1"),
    ("pip install flash-attn==2.0.8", None),
    ("flash attention 1.3x faster than the baseline", None),
    ("FlashAttention-2", None)])
def test_runs_naming_the_first_flashattention_take_its_kernel(engine, notes, kernel):
    assert _sets(engine, _row(source="a lab's training report", notes=notes)).get(
        "training.attention_kernel") == kernel


def test_torchtitan_moe_keeps_its_counts_on_the_gpu_only_without_expert_parallelism(engine):
    # Its local dispatcher (ep 1) never copies the counts to the host; its all-to-all
    # dispatcher does, as Megatron-Core's dispatchers do at any ep.
    moe = {"experts": 128, "top_k": 8, "expert_ffn_hidden": 768}
    titan = "pytorch/torchtitan benchmarks"
    local = _row(source=titan, model=moe, parallel=_Replace({"tp": 8, "dp": 1, "ep": 1}))
    assert _sets(engine, local)["moe.counts_to_host"] == "false"
    spread = _row(source=titan, model=moe, parallel=_Replace({"tp": 1, "dp": 8, "ep": 8}))
    assert "moe.counts_to_host" not in _sets(engine, spread)
    megatron = _row(source="NVIDIA/Megatron-LM", model=moe,
                    parallel=_Replace({"tp": 8, "dp": 1, "ep": 1}))
    assert "moe.counts_to_host" not in _sets(engine, megatron)


def test_a_megatron_bridge_row_that_reduces_in_fp32_keeps_its_own_setting(engine):
    # The performance recipes reduce in bf16; a Megatron-Bridge row whose text says
    # grad_reduce_in_fp32 True (its precision tutorial's bf16_mixed) reduces in fp32.
    source = "NVIDIA-NeMo/Megatron-Bridge docs/performance-summary.md"
    assert _sets(engine, _row(source=source))["training.grad_bytes"] == "2"
    said = _row(source=source,
                notes="bf16_mixed: bf16 params and compute, grad_reduce_in_fp32 True")
    assert "training.grad_bytes" not in _sets(engine, said)


@pytest.mark.parametrize("source", ["NVIDIA NeMo AutoModel docs/performance-summary.md",
                                    "NVIDIA-NeMo/Automodel docs/performance-summary.md"])
def test_nemo_automodel_is_fsdp2_not_the_nvidia_recipes(engine, source):
    # Dense models take the FSDP2 manager's bf16 reduction; its MoE parallelizer reduces in
    # fp32 (the model's default). Neither is the Megatron recipes' setting, whatever the spelling.
    dense = _map(engine, _row(source=source))
    assert dict(item.split("=", 1) for item in dense.sets)["training.grad_bytes"] == "2"
    assert any("NeMo AutoModel FSDP2" in a for a in dense.assumptions)
    assert not any("NVIDIA performance recipe" in a for a in dense.assumptions)
    if "moe.experts" in {d.config for d in engine.model.inputs.values()}:
        assert "training.grad_bytes" not in _sets(engine, _moe_row(source=source))
    # Its attention kernel is the one the row names: FlexAttention is not Transformer Engine's.
    flex = _sets(engine, _row(source=source, notes="kernels 'TE + DeepEP + FlexAttn'"))
    assert flex.get("training.attention_kernel") is None
    te = _sets(engine, _row(source=source, notes="kernels 'TE + DeepEP'"))
    assert te.get("training.attention_kernel") == "fa3"
    # Its benchmark gate routes a token to neighbouring experts.
    if "moe.routing" in {d.config for d in engine.model.inputs.values()}:
        gate = _sets(engine, _moe_row(source=source, notes="Mock data, 'fake balanced gate'"))
        assert gate.get("moe.routing") == "consecutive"
        assert "moe.routing" not in _sets(engine, _moe_row(source=source))


def test_a_megatron_lm_baseline_runs_the_commit_it_names(engine):
    # MegaScale's baseline: Megatron-LM at 285068c8 (January 2023) overlapped no DP or
    # pipeline communication; a run naming no such commit keeps the overlaps
    keys = ("parallelism.overlap_grad_reduce", "parallelism.overlap_param_gather",
            "parallelism.overlap_p2p_comm")
    old = _sets(engine, _row(source="Jiang et al. 2024, MegaScale, arXiv:2402.15627",
                             notes="Megatron-LM baseline at commit 285068c8"))
    assert [old.get(k) for k in keys] == ["false"] * 3
    current = _sets(engine, _row(source="Jiang et al. 2024, MegaScale, arXiv:2402.15627"))
    assert not any(k in current for k in keys)


def test_a_recipe_named_in_the_notes_is_the_stack_unless_the_run_is_a_paper_s_own(engine):
    # MLPerf rows name the NeMo implementation they ran in their notes; a paper's run that
    # cites a benchmark repository for one number (Nemotron-4 15B's FFN width) did not run it
    mlperf = _row(source="MLCommons MLPerf Training 5.0 results",
                  notes="Step time is the logged train_step_time (NeMo callback)")
    paper = _row(source="Parmar et al. 2024, Nemotron-4 15B Technical Report, arXiv:2402.16819",
                 notes="FFN 24576 is not in the paper: NVIDIA dgxc-benchmarking gives it")
    assert _sets(engine, mlperf).get("training.grad_bytes") == "2"
    assert _sets(engine, paper).get("training.grad_bytes") is None


def test_moe_rows_without_the_plugin_are_skipped():
    from dlformula.core import Engine
    from dlformula.resources import builtin_folders

    core_only = Engine(folders=builtin_folders())
    r = v.validate(core_only, str(DATA / "moe.yaml"))["rows"][0]
    assert r == {"id": "mixtral_like_moe", "skipped": "MoE needs the moe plugin"}


@pytest.mark.parametrize("gpu, node", [
    ("A100-SXM4-80GB", "a100-sxm4-80gb"), ("A100-40GB", "a100-sxm4-40gb"),
    ("H100-SXM5-80GB (DGX H100)", "h100-sxm"), ("H100 PCIe", "h100-pcie"),
    ("H100 SXM5 (NVLink 4, NVSwitch)", "h100-sxm"), ("H100 NVL", "h100-pcie"),
    ("NVIDIA H200", "h200"), ("GB200 NVL72", "gb200-nvl72"), ("B200", "b200"),
    ("MI300X", "mi300x"), ("TPU v4", "tpu-v4"), ("Cloud TPU v4-3072", "tpu-v4"),
    ("GB300 (DGX GB300 NVL72)", "gb300-nvl72"), ("NVIDIA B300 SXM", "b300"),
    ("DGX B300", "b300"), ("TPU v5p", "tpu-v5p"), ("Trn2", "trainium2"),
    ("V100-SXM2-32GB", "v100-sxm2"), ("Acme Zeta-9", None)])
def test_accelerator_names(gpu, node):
    """Names as sources print them -> node ids (GB300 before B300, GB200 before B200)."""
    found = first_match(conventions().accelerators, gpu)
    assert (found.value if found else None) == node


def test_an_accelerator_without_a_node_is_skipped_with_that_reason(engine):
    ids = engine.catalog.node_ids()
    for name, node in (("TPU v4", "tpu-v4"), ("GB300 NVL72", "gb300-nvl72"), ("B300", "b300")):
        row = _row(hardware={"gpu": name, "count": 64})
        if node in ids:
            assert dict(i.split("=", 1) for i in _map(engine, row).sets)["hardware.node"] == node
        else:
            with pytest.raises(mapping.Skip, match=f"no hardware node for '{name}' "
                                                   f"\\(it would be {node};"):
                _map(engine, row)


# -- what people write ------------------------------------------------------------------------

def _moe(engine, **sections):
    if not has_moe(engine):
        pytest.skip("the moe plugin is not loaded")
    base = {"model": {"layers": 32, "hidden": 4096, "heads": 32, "kv_heads": 8,
                      "ffn_hidden": 14336, "vocab": 32000, "seq_len": 4096},
            "parallel": {"tp": 2, "pp": 1, "dp": 32, "ep": 8},
            "batch": {"global_batch_sequences": 256, "micro_batch": 1}}
    for k, val in sections.items():
        base[k] = {**base.get(k, {}), **val} if isinstance(val, dict) else val
    return _sets(engine, _row(**{k: _Replace(x) if isinstance(x, dict) else x
                                 for k, x in base.items()}))


MOE_KEYS = ("moe.experts", "moe.top_k", "moe.expert_ffn_hidden", "moe.shared_experts",
            "moe.first_dense_layers", "moe.moe_every")


@pytest.mark.parametrize("where, block", [
    ("model.moe", {"experts": 64, "topk": 6, "expert_ffn": 1408, "shared_experts": 2,
                   "dense_layers": 1, "moe_every_n_layers": 2}),
    ("moe", {"num_experts": 64, "num_experts_per_tok": 6, "moe_intermediate_size": 1408,
             "n_shared_experts": 2, "first_k_dense_replace": 1, "moe_layer_freq": 2}),
    ("model", {"n_routed_experts": 64, "top_k": 6, "moe_ffn_hidden": 1408,
               "num_shared_experts": 2, "first_dense_layers": 1, "moe-every": 2}),
])
def test_moe_fields_in_any_block_and_spelling(engine, where, block):
    """The held-back file's 13 MoE runs were skipped: their fields sat in a nested model.moe
    block, spelled topk / expert_ffn / dense_layers / moe_every_n_layers."""
    if where == "model.moe":
        c = _moe(engine, model={"moe": block})
    elif where == "moe":
        c = _moe(engine, moe=block)
    else:
        c = _moe(engine, model=block)
    assert [c[k] for k in MOE_KEYS] == ["64", "6", "1408", "2", "1", "2"]
    assert c["parallelism.ep"] == "8"


def test_two_spellings_of_one_key_must_agree(engine, tmp_path):
    import yaml

    row = {"id": "twice", "model": {"layers": 32, "hidden": 4096, "heads": 32, "vocab": 32000,
                                    "seq_len": 4096, "top_k": 2, "moe": {"topk": 4,
                                                                         "experts": 8}},
           "hardware": {"gpu": "H100", "count": 8}, "target": {"step_time_s": 1}}
    p = tmp_path / "runs.yaml"
    p.write_text(yaml.safe_dump([row], sort_keys=False))
    report = v.validate(engine, str(p))
    assert report["rows"] == []
    [error] = report["errors"]
    assert error["message"] == ("run 'twice': model.moe.topk = 4 and model.top_k = 2 give two "
                                "values for moe.top_k; keep one")


def test_layout_synonyms_and_blocks(engine):
    row = _row(parallel=_Replace({}), parallelism={"tensor_model_parallel_size": 2,
                                                   "pipeline-model-parallel-size": 8,
                                                   "context_parallel_degree": 1,
                                                   "sequence_parallel": "yes"},
               hardware={"num_gpus": 64, "gpu": "H100 SXM"})
    c = _sets(engine, row)
    assert (c["parallelism.tp"], c["parallelism.pp"], c["parallelism.dp"]) == ("2", "8", "4")
    assert c["parallelism.sp"] == "true" and c["hardware.gpus"] == "64"


def test_tp_comm_overlap_true_is_the_documented_overlap(engine):
    """20 runs of the held-back file were refused because `tp_comm_overlap: true` reached an
    input that takes a share: on means the framework's overlap, all TP traffic split with the
    GEMMs (the hidden part costs the overlap slowdown; conventions.yaml switches)."""
    share = 1
    m = _map(engine, _row(parallel={"tp": 8, "dp": 1, "tp_comm_overlap": True}))
    assert m.values["parallelism.tp_comm_overlap"] == share
    assert any(a.startswith(f"parallel.tp_comm_overlap on: parallelism.tp_comm_overlap = "
                            f"{share:g}") for a in m.assumptions)
    for written, value in ((False, 0), ("off", 0), (0.7, 0.7)):
        got = _map(engine, _row(parallel={"tp": 8, "dp": 1, "tp_comm_overlap": written}))
        assert got.values["parallelism.tp_comm_overlap"] == value
    engine.evaluate(None, m.sets)
    # torchtitan's async TP is the same switch
    async_tp = _map(engine, _row(parallel={"tp": 8, "dp": 1, "async_tp": True}))
    assert async_tp.values["parallelism.tp_comm_overlap"] == share


def test_data_parallel_overlap_switches_are_read_where_launchers_write_them(engine):
    """FlagPerf's rows write Megatron-LM's --overlap-grad-reduce / --overlap-param-gather (off
    unless passed) under `recipe`; read only under `parallel`, they were priced as on."""
    for section in ("parallel", "recipe", "training"):
        m = _map(engine, _row(**{section: {"overlap_grad_reduce": False,
                                           "overlap_param_gather": False}}))
        assert m.values["parallelism.overlap_grad_reduce"] is False, section
        assert m.values["parallelism.overlap_param_gather"] is False, section
    # Not written: the formulas' default (Megatron's recipes overlap).
    assert "parallelism.overlap_grad_reduce" not in _map(engine, _row()).sets


def test_a_switch_described_in_words_is_read_not_dropped(engine):
    """MLPerf rows write the switch as the launch script sets it. Dropped as "not a number",
    the run was priced with all TP traffic exposed (+4 points on 10,752 H100): text that
    says on is on, text that says off is off (conventions.yaml on_text / off_text)."""
    for written, value in (("userbuffers (TP_COMM_OVERLAP=True, MC_TP_OVERLAP_AG/RS=True)", 1),
                           ("true, bulk/ring-exchange/pipeline methods", 1),
                           ("TP_COMM_OVERLAP=False", 0), ("disabled (userbuffers off)", 0)):
        m = _map(engine, _row(parallel={"tp": 8, "dp": 1, "tp_comm_overlap": written}))
        assert m.values["parallelism.tp_comm_overlap"] == value, written
    unclear = _map(engine, _row(parallel={"tp": 8, "dp": 1, "tp_comm_overlap": "see notes"}))
    assert "parallelism.tp_comm_overlap" not in unclear.sets
    assert any("ignored" in a and "tp_comm_overlap" in a for a in unclear.assumptions)


def test_a_value_an_input_cannot_take_is_dropped_with_a_note(engine):
    m = _map(engine, _row(parallel={"cp_comm": "ring", "bucket_size": "huge"}))
    assert m.values["parallelism.cp_comm"] == "p2p"  # ring attention: Megatron's p2p
    assert "parallelism.bucket_size" not in m.values
    assert any(a.startswith("parallel.bucket_size = 'huge' ignored: parallelism.bucket_size "
                            "must be") for a in m.assumptions)


def test_settings_a_framework_ignores_are_dropped_with_a_note(engine):
    """vpp 12 with pp 1 (two held-back runs were refused for it), ep on a dense model."""
    m = _map(engine, _row(parallel={"pp": 1, "dp": 64, "vpp": 12, "ep": 8},
                          batch=_Replace({"global_batch_sequences": 256, "micro_batch": 4})))
    assert m.values["parallelism.vpp"] == 1 and "parallelism.ep" not in m.values
    assert "parallel.vpp = 12 ignored: interleaving needs pipeline parallelism (pp = 1)" \
        in m.assumptions
    assert "ep = 8 ignored: a dense model has no experts to spread" in m.assumptions
    engine.evaluate(None, m.sets)


LLAMA3_70B = {"layers": 80, "hidden": 8192, "heads": 64, "kv_heads": 8, "ffn_hidden": 28672,
              "vocab": 128256, "seq_len": 8192}


def test_interleaved_without_its_factor_takes_the_published_recipe(engine):
    """'interleaved (V not reported)' is interleaved: a NeMo run of Llama 3 70B at pp 4 takes
    the NeMo recipe's vpp 5, cited."""
    m = _map(engine, _row(source="NVIDIA NeMo performance summary", model=LLAMA3_70B,
                          parallel={"tp": 4, "pp": 4, "dp": 4, "cp": 1,
                                    "vpp": "interleaved (V not reported)"},
                          hardware={"count": 64},
                          batch=_Replace({"global_batch_sequences": 128, "micro_batch": 1})))
    assert m.values["parallelism.vpp"] == 5
    [note] = [a for a in m.assumptions if "parallelism.vpp = 5" in a]
    assert "published recipe" in note and "recipes/llama3_70b.py" in note


def test_a_knob_without_a_recipe_takes_the_best_feasible_value(engine):
    """No recipe: the value `dlformula search` ranks first for the stated layout."""
    from dlformula.search import search

    row = _row(source="a lab's own run", parallel={"vpp": "interleaved; factor not given"},
               batch=_Replace({"global_batch_sequences": 256}))
    m = _map(engine, row)
    fixed = {k: val for k, val in m.values.items()
             if k not in ("parallelism.vpp", "training.micro_batch")}
    sets = [f"{k}={mapping._fmt(val)}" for k, val in fixed.items()]
    layouts = search(None, gpus=64, sets=sets, engine=engine,
                     fix=[f"{k}={mapping._fmt(val)}" for k, val in fixed.items()
                          if k.startswith(("parallelism.", "training."))]
                     + ["parallelism.ep=1", "parallelism.schedule=1f1b"])
    best = layouts.best()
    assert (m.values["parallelism.vpp"], m.values["training.micro_batch"]) == (
        best["vpp"], best["micro_batch"])
    assert m.values["parallelism.vpp"] > 1  # interleaved, as the run says
    [note] = [a for a in m.assumptions if "best feasible value" in a]
    assert note.startswith("interleaved ('interleaved; factor not given') without the factor; "
                           "micro-batch not given: parallelism.vpp = ")


def test_not_interleaved_text_is_not_interleaved(engine):
    m = _map(engine, _row(parallel={"vpp": "none (not interleaved)"}))
    assert m.values["parallelism.vpp"] == 1
    assert not any("best feasible" in a for a in m.assumptions)


def test_the_mapping_never_reads_measured_derived_or_target_figures(engine):
    plain = _map(engine, _row())
    measured = _map(engine, _row(measured={"tflops_per_gpu": 400, "step_time_s": 9},
                                 derived={"mfu": 0.5}, target={"step_time_s": 123.0}))
    assert plain == measured


# -- the conventions file ---------------------------------------------------------------------

def test_every_convention_cites_its_source():
    conv = conventions()
    rows = [*conv.accelerators, *conv.precisions, *conv.recompute, *conv.schedules]
    assert rows and all(r.source.strip() for r in rows)
    assert all(r.source.strip() and r.note.strip() for r in conv.frameworks)
    assert all(r.source.strip() for r in conv.recipes)
    assert all(s.source.strip() for s in conv.switches.values())
    assert all(text.strip() for text in conv.sources.values())


def test_a_malformed_conventions_file_names_its_lines():
    from dlformula.errors import DlfError
    from dlformula.validation.conventions import parse

    text = ("keys:\n  - key: model.layers\n    names: [layers]\n"
            "accelerators:\n  - {match: '(h100', node: h100-sxm, source: x}\n"
            "frameworks:\n  - {name: y, when: {colour: red}, set: {}, note: n, source: s}\n")
    with pytest.raises(DlfError) as exc:
        parse(text, "conv.yaml")
    assert [line.split(": ", 1)[0] for line in exc.value.lines()] == [
        "conv.yaml:2", "conv.yaml:2", "conv.yaml:5", "conv.yaml:7"]
    lines = exc.value.lines()
    assert lines[0].endswith("this row needs 'source'")
    assert lines[1].endswith("this row needs 'in'")
    assert "'(h100' is not a regular expression" in lines[2]
    assert "unknown field 'colour' in 'when'" in lines[3]
    assert exc.value.exit_code == 1  # shipped data: our mistake, not the user's


def test_a_convention_pattern_that_rescans_the_text_from_every_position_is_refused():
    """A `when` regex opening with a lookahead or a wildcard is tried at every position of a
    run's texts, each try scanning to the end: quadratic (one took 0.35 s a run). It must be
    anchored with \\A; the same pattern anchored is accepted."""
    from dlformula.errors import DlfError
    from dlformula.validation.conventions import parse

    row = ("frameworks:\n  - {{name: y, when: {{texts: '{}'}}, set: {{}}, note: n, "
           "source: s}}\n")
    for bad in (r"(?=[\s\S]*a)[\s\S]*b", r"(?i).*flash", r"[\s\S]*b"):
        with pytest.raises(DlfError) as exc:
            parse(row.format(bad), "conv.yaml")
        assert exc.value.lines()[0].startswith("conv.yaml:2: ")
        assert "anchor it with \\A" in exc.value.lines()[0]
    parse(row.format(r"\A(?=[\s\S]*a)[\s\S]*b"), "conv.yaml")
    parse(row.format(r"megatron-bridge[\s\S]*26\.08"), "conv.yaml")


def test_skip_negated_ignores_mentions_after_no_not_or_without():
    import re

    from dlformula.errors import DlfError
    from dlformula.validation.conventions import holds, mentions, parse

    compiled = re.compile(r"(torch\.)?compile", re.IGNORECASE)
    for said in ("FSDP2, no torch.compile", "run without compile", "Not compiled"):
        assert compiled.search(said) and not mentions(compiled, said, True), said
    # One mention that is not negated is enough; the flag off reads every mention.
    assert mentions(compiled, "not compiled at first, then torch.compile", True)
    assert mentions(compiled, "no torch.compile", False)
    texts = {k: "" for k in ("id", "source", "notes", "arch", "schedule", "precision")}
    when = {"texts": re.compile("deepep", re.IGNORECASE), "skip_negated": True}
    assert holds(when, {**texts, "texts": "DeepEP dispatch"}, {})
    assert not holds(when, {**texts, "texts": "all-to-all, without DeepEP"}, {})
    with pytest.raises(DlfError) as exc:
        parse("frameworks:\n  - {name: y, when: {texts: a, skip_negated: yes please}, set: {},"
              " note: n, source: s}\n", "conv.yaml")
    assert "conv.yaml:2: 'skip_negated' must be true or false" in exc.value.lines()[0]


def test_a_file_written_by_someone_else(engine):
    """The held-back file's problems in one file: a nested model.moe block in its own
    spellings, tp_comm_overlap: true, vpp 12 with pp 1, 'interleaved (V not reported)',
    Megatron-LM key names, numbers as text, a TPU v4 run. Every run is predicted but the TPU
    v4 one, skipped only if its node is not installed."""
    report = v.validate(engine, str(DATA / "as_written.yaml"))
    assert report["errors"] == []
    rows = by_id(report)
    skipped = {rid for rid, r in rows.items() if "skipped" in r}
    assert skipped <= {"tpu_v4_palm_like"}
    if "tpu-v4" not in engine.catalog.node_ids():
        assert skipped == {"tpu_v4_palm_like"}
    dense = dict(i.split("=", 1) for i in rows["dense_tp_overlap"]["config"])
    assert (dense["parallelism.tp"], dense["parallelism.pp"], dense["parallelism.vpp"]) == (
        "4", "4", "5")  # NeMo's Llama 3 70B recipe
    assert float(dense["parallelism.tp_comm_overlap"]) == 1
    assert "ep = 1 ignored: a dense model has no experts to spread" in \
        rows["dense_tp_overlap"]["assumptions"]
    flat = dict(i.split("=", 1) for i in rows["vpp_without_pp"]["config"])
    assert (flat["parallelism.vpp"], flat["hardware.gpus"], flat["parallelism.zero"]) == (
        "1", "1024", "1")
    assert rows["vpp_without_pp"]["target"] == {"step_time_s": 3.5}
    if has_moe(engine):
        moe = dict(i.split("=", 1) for i in rows["moe_nested_block"]["config"])
        assert (moe["moe.experts"], moe["moe.top_k"], moe["moe.expert_ffn_hidden"]) == (
            "8", "2", "14336")
        assert moe["parallelism.vpp"] == "8"  # NeMo's Mixtral 8x7B recipe


def test_a_gpu_count_that_disagrees_with_dp_wins(engine):
    m = _map(engine, _row(parallel={"tp": 2, "pp": 8, "dp": 8}, hardware={"count": 256},
                          batch=_Replace({"global_batch_sequences": 256, "micro_batch": 1})))
    assert (m.values["parallelism.dp"], m.values["hardware.gpus"]) == (16, 256)
    assert "dp = 8 given, but hardware.count / (tp x pp x cp) = 16: the GPU count wins" in \
        m.assumptions


def test_non_gated_gelu_is_not_read_as_gated(engine):
    """'GeLU non-gated 4h MLP' names 'gated' too; reading it as SwiGLU priced GPT-3's MLP 1.5x
    (fp8-h100.yaml, blind: BF16 +37-39%)."""
    for arch, glu in (("GPT-3 (LayerNorm, GeLU non-gated 4h MLP)", "false"),
                      ("non-GLU MLP", "false"), ("Llama (SwiGLU)", "true"),
                      ("gated MLP", "true"), ("GeLU", "false")):
        got = _sets(engine, _row(model={"arch": arch, "ffn_hidden": 4096}))
        assert got["model.glu"] == glu, arch


def test_megatron_layer_frequency_pattern_is_a_period(engine):
    """Megatron-LM's --moe-layer-freq as a pattern ('[0, 1] * 24') and moe_every = 2 agree."""
    if not has_moe(engine):
        pytest.skip("the moe plugin is not loaded")
    row = _moe_row(model={"layers": 48, "moe_every": 2,
                          "moe": {"moe_layer_freq": "[0, 1] * 24"}})
    assert not row.errors
    assert _sets(engine, row)["moe.moe_every"] == "2"
    odd = _moe_row(model={"layers": 48, "moe": {"moe_layer_freq": "[1, 0, 1, 1]"}})
    assert odd.get("moe.moe_every").value == "[1, 0, 1, 1]"  # not periodic: left as written


def test_framework_block_and_no_deepep_are_read_as_written(engine):
    """A `framework:` block (Megatron argument names) is read like the parallel block, and
    'no DeepEP' in the notes does not switch DeepEP on."""
    if not has_moe(engine):
        pytest.skip("the moe plugin is not loaded")
    row = _moe_row(framework={"moe_token_dispatcher_type": "alltoall", "mtp_num_layers": 1,
                              "tp_comm_overlap": True},
                   notes="moe_token_dispatcher_type alltoall (no DeepEP)")
    got = _sets(engine, row)
    assert got.get("moe.dispatcher", "alltoall") == "alltoall"
    assert got["model.mtp_layers"] == "1"
    assert float(got["parallelism.tp_comm_overlap"]) == 1
    deepep = _sets(engine, _moe_row(notes="dispatch through DeepEP"))
    assert deepep["moe.dispatcher"] == "deepep"


@pytest.mark.parametrize("pp, vpp, first, last", [(16, None, 4, 1), (8, 2, 8, 5), (4, 4, 16, 13),
                                                   (2, 8, 32, 29)])
def test_megatron_bridge_deepseek_v3_runs_its_mtp_module_and_pipeline_layout(
        engine, pp, vpp, first, last):
    """Megatron-Bridge's DeepSeek-V3 recipe keeps one MTP module, and its layouts give each
    pipeline rank 64/pp blocks, the last 3 fewer (it holds the MTP module and the loss)."""
    if not has_moe(engine):
        pytest.skip("the moe plugin is not loaded")
    shape = {"layers": 61, "hidden": 7168, "heads": 128, "ffn_hidden": 18432, "vocab": 129280,
             "experts": 256, "top_k": 8, "expert_ffn_hidden": 2048, "first_dense_layers": 3}
    parallel = {"tp": 1, "pp": pp, "dp": 256 // pp, "ep": 8, **({"vpp": vpp} if vpp else {})}
    source = "NVIDIA-NeMo/Megatron-Bridge docs/performance-summary.md, 26.04 NeMo Container"
    row = _moe_row(model=shape, parallel=parallel, source=source, precision="mxfp8",
                   hardware=_Replace({"gpu": "B200", "count": 256}),
                   batch={"global_batch_sequences": 4096})
    got = _sets(engine, row)
    assert got["model.mtp_layers"] == "1"
    assert (got["parallelism.first_stage_layers"], got["parallelism.last_stage_layers"]) == (
        str(first), str(last))
    # A run that states no MTP keeps it off (and is not told otherwise); the recipe's layout
    # is the same without the module.
    m = _map(engine, _moe_row(model={**shape, "mtp_layers": 0}, parallel=parallel,
                              source=source, precision="mxfp8",
                              batch={"global_batch_sequences": 4096},
                              hardware=_Replace({"gpu": "B200", "count": 256})))
    stated = dict(item.split("=", 1) for item in m.sets)
    assert stated["model.mtp_layers"] == "0"
    assert not any("multi-token" in a for a in m.assumptions)
    assert stated["parallelism.first_stage_layers"] == str(first)
    other = _sets(engine, _moe_row(model=shape, parallel=parallel, precision="mxfp8",
                                   hardware=_Replace({"gpu": "B200", "count": 256}),
                                   batch={"global_batch_sequences": 4096}))
    assert "model.mtp_layers" not in other  # another stack: no recipe applies


def test_wall_clock_targets_are_compared_at_the_steady_state_share(engine, tmp_path):
    """A run timed over its whole wall-clock life (interruptions included) is compared with
    the steady-state step by the goodput share the formulas give for its GPU count."""
    import yaml

    base = {"id": "wall", "model": {"layers": 24, "hidden": 2048, "heads": 16,
                                    "ffn_hidden": 8192, "vocab": 50000, "seq_len": 2048},
            "hardware": {"gpu": "H100-SXM5-80GB", "count": 4096},
            "parallel": {"tp": 1, "pp": 1, "dp": 4096},
            "batch": {"global_batch_sequences": 4096, "micro_batch": 1},
            "precision": "bf16", "target": {"step_time_s": 2.0, "basis_kind": "wall_clock"}}
    steady = {**base, "id": "steady", "target": {"step_time_s": 2.0}}
    texted = {**base, "id": "texted",
              "target": {"step_time_s": 2.0, "basis": "total training time over steps"}}
    path = tmp_path / "runs.yaml"
    path.write_text(yaml.safe_dump([base, steady, texted]))
    rows = by_id(v.validate(engine, str(path)))
    share = engine.evaluate(None, rows["wall"]["config"])["goodput_share"]
    assert 0.9 < share < 1
    assert rows["wall"]["target"]["step_time_s"] == pytest.approx(2.0 * share)
    assert rows["texted"]["target"]["step_time_s"] == pytest.approx(2.0 * share)
    assert rows["steady"]["target"]["step_time_s"] == 2.0
    assert rows["wall"]["predicted"] == rows["steady"]["predicted"]
    assert any("wall-clock average" in a for a in rows["wall"]["assumptions"])


def test_interleaved_with_v_not_reported_is_interleaved(engine):
    """Llama 3's row: "interleaved (V not reported)" beside a schedule text; the 'not' belongs
    to 'reported', so the run is interleaved and its factor is a knob left out."""
    row = _row(model={"layers": 128}, parallel={
        "pp": 8, "dp": 8, "vpp": "interleaved (V not reported)",
        "pp_schedule": "interleaved 1F1B; first and last stage carry one layer fewer"})
    m = _map(engine, row)
    assert any(a.startswith("interleaved ('interleaved (V not reported)') without the factor")
               for a in m.assumptions)
    plain = _map(engine, _row(parallel={"pp": 8, "dp": 8, "vpp": "not interleaved"}))
    assert dict(i.split("=", 1) for i in plain.sets)["parallelism.vpp"] == "1"


def test_a_knob_no_value_of_which_fits_takes_the_fastest(engine):
    """A run ran, so it fit: when the model's memory estimate fits no value of a knob the run
    leaves out, the fastest value is taken and the note says so."""
    row = _row(model={"layers": 64, "hidden": 16384, "heads": 128, "ffn_hidden": 53248,
                      "seq_len": 8192},
               parallel={"tp": 8, "pp": 8, "dp": 1, "recompute": "none"},
               batch=_Replace({"global_batch_sequences": 64}))
    m = _map(engine, row)
    assert any("no value fits the model's memory estimate, so the fastest" in a
               for a in m.assumptions)


def test_torchtitan_without_compile_runs_eager(engine):
    """torchtitan's benchmark rows with and without torch.compile differ by 14%: a torchtitan
    run that does not say compile, or says it runs without it, maps to unfused element-wise
    kernels."""
    def titan(**kw):
        return _map(engine, _row(source="pytorch/torchtitan benchmarks (Table 1)",
                                 parallel={"tp": 1, "pp": 1, "dp": 64, "zero": 3}, **kw))

    eager = titan()
    assert eager.values["training.fused_elementwise"] is False
    assert any("torchtitan without torch.compile" in a for a in eager.assumptions)
    megatron = _map(engine, _row())
    assert megatron.values.get("training.fused_elementwise", True) is True
    for said in ("FSDP2, no torch.compile", "run without compile", "compile = false",
                 "torchtitan eager: not compiled"):
        assert titan(notes=said).values["training.fused_elementwise"] is False, said
    for said in ("noac_compile_bs4 (activation checkpointing off)", "fsdp_compile_float8",
                 "compile = true", "FSDP + torch.compile"):
        assert titan(notes=said).values.get("training.fused_elementwise", True) is True, said


def test_megatron_local_transformer_runs_eager_elementwise(engine):
    """Megatron-LM's local (legacy) transformer computes RMSNorm, SwiGLU and RoPE op by op: a
    run stating transformer_impl local maps to unfused element-wise kernels; Transformer Engine's
    does not."""
    local = _map(engine, _row(notes="Megatron-LM legacy path, transformer_impl local"))
    assert local.values["training.fused_elementwise"] is False
    assert any("local (legacy) transformer" in a for a in local.assumptions)
    te = _map(engine, _row(notes="Megatron-LM, transformer_impl transformer_engine"))
    assert te.values.get("training.fused_elementwise", True) is True


def test_hugging_face_transformers_modeling_runs_eager_elementwise(engine):
    """Hugging Face transformers' Llama code runs RMSNorm in float32 op by op and RoPE and
    SwiGLU as separate operators: a run through it maps to unfused element-wise kernels, unless
    the stack patches in fused kernels (Liger, XTuner) or compiles the model."""
    hf = _map(engine, _row(notes="HF Trainer, Hugging Face transformers v4.39 run_clm.py"))
    assert hf.values["training.fused_elementwise"] is False
    assert any("transformers' modeling code run eager" in a for a in hf.assumptions)
    said = _map(engine, _row(notes="Hugging Face transformers Llama code, no Liger, not compiled"))
    assert said.values["training.fused_elementwise"] is False
    for fused in ("Hugging Face transformers with Liger kernels",
                  "Hugging Face transformers under torch.compile",
                  "XTuner on Hugging Face transformers",
                  "Hugging Face transformers traced by PyTorch/XLA (XLA fuses the graph)"):
        m = _map(engine, _row(notes=fused))
        assert m.values.get("training.fused_elementwise", True) is True, fused
    te = _map(engine, _row(notes="Megatron-Core, transformer_impl transformer_engine"))
    assert te.values.get("training.fused_elementwise", True) is True


def test_gpt_oss_120b_in_megatron_bridge_applies_rope_unfused(engine):
    """gpt-oss-120b reaches Megatron-Bridge through its Hugging Face bridge, which sets YaRN,
    and Megatron-Bridge fuses RoPE only for plain RoPE: such a run maps to training.fused_rope
    false; torchtitan's gpt-oss and other models keep the default."""
    mb = _map(engine, _row(source="NVIDIA-NeMo/Megatron-Bridge docs/performance-summary.md",
                           notes="Model: GPT OSS 120B, row DGX-GB200 BF16"))
    assert mb.values["training.fused_rope"] is False
    assert any("YaRN position embedding" in a for a in mb.assumptions)
    tt = _map(engine, _row(source="LambdaLabsML/torchtitan gpt-oss-120b write-up",
                           parallel={"tp": 1, "pp": 1, "dp": 64, "zero": 3}))
    assert "training.fused_rope" not in tt.values
    assert "training.fused_rope" not in _map(engine, _row()).values


def test_deepspeed_pipelines_do_not_interleave_and_sp_postdates_2022(engine):
    """DeepSpeed's pipeline engine has no interleaved schedule: a DeepSpeed run that leaves
    the interleaving out runs 1F1B (not the best feasible vpp search would find); sequence
    parallelism did not exist before Korthikanti et al. 2022 (arXiv:2205.05198)."""
    row = _row(source="Smith et al. 2022, arXiv:2201.11990 (DeepSpeed and Megatron)",
               parallel={"tp": 8, "pp": 8, "dp": 1})
    m = _map(engine, row)
    assert m.values["parallelism.vpp"] == 1
    assert m.values["parallelism.sp"] is False
    assert any("DeepSpeed's pipeline engine runs 1F1B" in a for a in m.assumptions)
    stated = _map(engine, _row(source="DeepSpeed run", parallel={"tp": 1, "pp": 8, "dp": 8,
                                                                "vpp": 2}))
    assert stated.values["parallelism.vpp"] == 2  # a run's own value wins
    recent = _map(engine, _row(source="arXiv:2407.21783", parallel={"tp": 8, "pp": 8, "dp": 1}))
    assert recent.values.get("parallelism.sp", True) is True


def test_a_recipe_of_one_release_applies_to_that_release_only(engine):
    """Megatron-Bridge's 26.08 MXFP8 MoE recipes on GB200/GB300 overlap the all-to-alls and
    (Qwen3) recompute nothing; its 26.02 recipes did not overlap them. The release in a run's
    source picks the recipe; a run's own statement still wins."""
    if "moe.experts" not in {d.config for d in engine.model.inputs.values()}:
        pytest.skip("the moe plugin is not loaded")
    qwen = {"model": {"experts": 128, "top_k": 8}, "hardware": {"gpu": "GB300", "count": 64},
            "precision": "mxfp8"}
    new = _sets(engine, _moe_row(source="NVIDIA-NeMo/Megatron-Bridge docs/performance-summary.md"
                                 ", section '26.08 NeMo Container'", **qwen))
    assert new["parallelism.ep_comm_overlap"] == "true" and new["moe.dispatcher"] == "deepep"
    assert new["training.recompute"] == "none"
    old = _sets(engine, _moe_row(source="NVIDIA-NeMo/Megatron-Bridge docs/performance-summary.md"
                                 ", section '26.02 NeMo Container'", **qwen))
    assert "parallelism.ep_comm_overlap" not in old
    stated = _sets(engine, _moe_row(source="Megatron-Bridge performance summary 26.08",
                                    parallel={"ep_comm_overlap": False}, **qwen))
    assert stated["parallelism.ep_comm_overlap"] == "false"


def test_full_iteration_cuda_graph_recipes_make_the_moe_layers_sync_free(engine):
    """Megatron-Bridge's MXFP8 MoE recipes on GB200/GB300 run a full-iteration CUDA graph with
    the sync-free grouped MLP from 26.06 on (cuda_graph_impl='full_iteration'); no MoE recipe
    of 25.11-26.04.01 does, and neither do their BF16 recipes."""
    if "moe.experts" not in {d.config for d in engine.model.inputs.values()}:
        pytest.skip("the moe plugin is not loaded")
    qwen = {"model": {"experts": 128, "top_k": 8}, "hardware": {"gpu": "GB200", "count": 64}}
    for release in ("26.06", "26.06.01", "26.08"):
        new = _sets(engine, _moe_row(source=BRIDGE.format(release), precision="mxfp8", **qwen))
        assert new["moe.sync_free"] == "true", release
    for release in ("25.11", "26.02", "26.04", "26.04.01"):
        old = _sets(engine, _moe_row(source=BRIDGE.format(release), precision="mxfp8", **qwen))
        assert "moe.sync_free" not in old, release
    bf16 = _sets(engine, _moe_row(source=BRIDGE.format("26.08"), precision="bf16", **qwen))
    assert "moe.sync_free" not in bf16


BRIDGE = "NVIDIA-NeMo/Megatron-Bridge docs/performance-summary.md, section '{} NeMo Container'"
QWEN3_235B = {"layers": 94, "hidden": 4096, "heads": 64, "kv_heads": 4, "head_dim": 128,
              "ffn_hidden": 1536, "vocab": 151936, "experts": 128, "top_k": 8,
              "expert_ffn_hidden": 1536}


def test_megatron_bridge_recipes_apply_release_by_release(engine):
    """Each Megatron-Bridge release's recipes, read at the commit of its performance summary:
    26.06 overlaps the MXFP8 MoE all-to-alls on GB200/GB300, 26.04 does not; Qwen3 recomputes
    nothing in every release; a VP printed n/a is no interleaving where the release's preset
    says so, and only there. A run's own statement still wins."""
    if "moe.experts" not in {d.config for d in engine.model.inputs.values()}:
        pytest.skip("the moe plugin is not loaded")
    gb300 = {"model": QWEN3_235B, "hardware": {"gpu": "GB300", "count": 256},
             "parallel": {"tp": 1, "pp": 4, "dp": 64, "ep": 32, "vpp": 12},
             "precision": "mxfp8"}
    new = _sets(engine, _moe_row(source=BRIDGE.format("26.06"), **gb300))
    assert new["parallelism.ep_comm_overlap"] == "true" and new["moe.dispatcher"] == "deepep"
    assert new["training.recompute"] == "none"
    old = _sets(engine, _moe_row(source=BRIDGE.format("26.04"), **gb300))
    assert "parallelism.ep_comm_overlap" not in old and old["training.recompute"] == "none"
    stated = _sets(engine, _moe_row(source=BRIDGE.format("26.06"), **{
        **gb300, "parallel": {**gb300["parallel"], "ep_comm_overlap": False,
                              "recompute": "full"}}))
    assert stated["parallelism.ep_comm_overlap"] == "false"
    assert stated["training.recompute"] == "full"

    b300 = {"model": QWEN3_235B, "hardware": {"gpu": "B300", "count": 256},
            "parallel": {"tp": 1, "pp": 8, "dp": 32, "ep": 8}, "precision": "mxfp8"}
    m = _map(engine, _moe_row(source=BRIDGE.format("26.04.01"), **b300))
    assert m.values["parallelism.vpp"] == 1
    assert any("published recipe" in a and "QWEN3_235B_A22B_PRETRAIN_CONFIG_B300" in a
               for a in m.assumptions)
    # 26.02.01's GB300 preset interleaves (vpp 12) while its table prints n/a: no recipe.
    m = _map(engine, _moe_row(source=BRIDGE.format("26.02.01"), **{
        **gb300, "parallel": {"tp": 1, "pp": 4, "dp": 64, "ep": 32}}))
    assert not any("the published recipe's value" in a for a in m.assumptions)
    assert any("best feasible value" in a for a in m.assumptions)


def test_megatron_bridge_llama_recipes_overlap_tp_and_recompute_nothing(engine):
    """Megatron-Bridge's Llama 3 70B recipe (every release read, 25.11-26.06) runs TP
    communication behind the GEMMs and recomputes nothing; another framework's Llama does not
    inherit it, and a run that states either keeps its own value."""
    h100 = {"model": LLAMA3_70B, "hardware": {"count": 64},
            "parallel": {"tp": 4, "pp": 8, "dp": 2, "vpp": 5},
            "batch": _Replace({"global_batch_sequences": 256, "micro_batch": 1}),
            "precision": "fp8"}
    bridge = _map(engine, _row(source=BRIDGE.format("26.04"), **h100)).values
    assert bridge["parallelism.tp_comm_overlap"] == 1 and bridge["training.recompute"] == "none"
    other = _map(engine, _row(source="a lab's Megatron-LM run", **h100)).values
    assert "parallelism.tp_comm_overlap" not in other and other["training.recompute"] == "auto"
    stated = _map(engine, _row(source=BRIDGE.format("26.04"), **{
        **h100, "parallel": {**h100["parallel"], "tp_comm_overlap": False,
                             "recompute": "selective"}})).values
    assert stated["parallelism.tp_comm_overlap"] == 0
    assert stated["training.recompute"] == "selective"


def test_a_window_is_read_from_the_run_or_from_the_model_it_names(engine):
    """A run's own sliding-window keys are read under their Megatron-LM and Hugging Face
    names; a gpt-oss run that leaves them out gets the model's published pattern (128-token
    window on every other layer)."""
    stated = _sets(engine, _row(model={"window_size": 512, "window_attn_skip_freq": 4}))
    assert stated["model.sliding_window"] == "512" and stated["model.full_attention_every"] == "4"
    oss = _map(engine, _row(model={"arch": "gpt-oss, alternating banded attention"}))
    c = dict(item.split("=", 1) for item in oss.sets)
    assert c["model.sliding_window"] == "128" and c["model.full_attention_every"] == "2"
    assert any("gpt-oss" in a for a in oss.assumptions)
    assert "model.sliding_window" not in _sets(engine, _row())


@pytest.mark.parametrize("fsdp, shard", [
    ("HSDP (HYBRID_SHARD: shard within a node, replicate across nodes)", 8),
    ("hybrid_shard", 8), ("FULL_SHARD", None), ("FSDP", None)])
def test_hybrid_sharding_shards_inside_a_node(engine, fsdp, shard):
    row = _row(parallel=_Replace({"tp": 1, "pp": 1, "dp": 128, "fsdp": fsdp}),
               hardware={"gpu": "A100 80GB SXM", "count": 128, "gpus_per_node": 8},
               batch={"global_batch_sequences": 256, "micro_batch": 2})
    c = dict(item.split("=", 1) for item in _map(engine, row).sets)
    assert c["parallelism.zero"] == "3"
    assert c.get("parallelism.dp_shard") == (str(shard) if shard else None)


@pytest.mark.parametrize("pp, fsdp, reshard", [
    (2, "FSDP2 fully_shard over the data-parallel ranks, reshard_after_forward=True", "true"),
    (2, "FSDP2 fully_shard, reshard_after_forward: false", None),
    (2, "FULL_SHARD", None),
    (1, "FSDP2 fully_shard, reshard_after_forward=True", None)])
def test_fsdp_resharding_after_forward_is_read_under_pipelining(engine, pp, fsdp, reshard):
    row = _row(parallel=_Replace({"tp": 1, "pp": pp, "dp": 64 // pp, "fsdp": fsdp}),
               hardware={"gpu": "H100-SXM5-80GB", "count": 64, "gpus_per_node": 8},
               batch={"global_batch_sequences": 256, "micro_batch": 1})
    assert _sets(engine, row).get("parallelism.fsdp_pp_reshard") == reshard


def test_a_shard_group_written_out_is_the_hybrid_shard_group(engine):
    row = _row(parallel=_Replace({"tp": 1, "pp": 1, "dp": 2048, "fsdp":
                                  "hybrid: FSDP shard group 128 GPUs (ici_fsdp 8 x dcn_fsdp 16), "
                                  "16 replica(s) (dcn_DP 16)"}),
               hardware={"gpu": "H100-SXM5-80GB", "count": 2048, "gpus_per_node": 8},
               batch={"global_batch_sequences": 2048, "micro_batch": 1})
    assert _sets(engine, row)["parallelism.dp_shard"] == "128"


def test_a_shard_group_holds_the_context_parallel_ranks_too(engine):
    """OLMo-core and Megatron-LM flatten context parallelism into the sharding group: a group
    of 64 GPUs at tp 1 and cp 8 is 64 ranks of parallelism.dp_shard (which counts dp x cp)."""
    row = _row(parallel=_Replace({"tp": 1, "pp": 1, "cp": 8, "dp": 128, "fsdp":
                                  "HSDP: a shard group of 64 GPUs, 16 replicas"}),
               hardware={"gpu": "H100-SXM5-80GB", "count": 1024, "gpus_per_node": 8},
               batch={"global_batch_sequences": 128, "micro_batch": 1})
    assert _sets(engine, row)["parallelism.dp_shard"] == "64"
    node = _row(parallel=_Replace({"tp": 2, "pp": 1, "cp": 2, "dp": 64, "fsdp": "HSDP"}),
                hardware={"gpu": "H100-SXM5-80GB", "count": 256, "gpus_per_node": 8},
                batch={"global_batch_sequences": 128, "micro_batch": 1})
    assert _sets(engine, node)["parallelism.dp_shard"] == "4"  # a node's 8 GPUs / tp 2


def test_a_run_s_own_value_is_what_a_convention_sees(engine):
    """A row that says its attention is unfused is not taken for Transformer Engine's fused
    kernel because the mapper's own default is the fused one."""
    fused = _row(notes="Megatron-LM")
    unfused = _row(notes="Megatron-LM", training={"flash_attention": False})
    assert _sets(engine, fused).get("training.attention_kernel") == "fa3"
    assert "training.attention_kernel" not in _sets(engine, unfused)


def test_pytorch_sdpa_rows_keep_flashattention_2_class_attention(engine):
    """The Transformer Engine rule reads 'Megatron' anywhere in a row; a row that names PyTorch
    SDPA runs PyTorch's kernel whatever else its notes mention."""
    te = _row(notes="Megatron-style recipe")
    sdpa = _row(notes="PyTorch SDPA flash attention; not Megatron's selective recompute")
    assert _sets(engine, te).get("training.attention_kernel") == "fa3"
    assert "training.attention_kernel" not in _sets(engine, sdpa)


def test_transformer_engine_attention_is_for_nvidia_nodes_only(engine):
    """cuDNN's fused attention runs on NVIDIA GPUs: a TPU, Trainium or AMD row whose notes name
    Megatron (MaxText's notes compare its sharding with Megatron's) keeps its node's attention,
    through the convention's `vendor` condition (the maker its node's hardware file names)."""
    gpu = _row(notes="sharded as Megatron's sequence parallelism")
    tpu = _row(notes="sharded as Megatron's sequence parallelism",
               hardware={"gpu": "TPU v5p", "node": "tpu-v5p", "count": 64})
    amd = _row(notes="Megatron-LM", hardware={"gpu": "AMD Instinct MI300X", "node": "mi300x",
                                              "count": 64})
    assert _sets(engine, gpu).get("training.attention_kernel") == "fa3"
    assert _sets(engine, tpu)["hardware.node"] == "tpu-v5p"
    assert "training.attention_kernel" not in _sets(engine, tpu)
    assert _sets(engine, amd)["hardware.node"] == "mi300x"
    assert "training.attention_kernel" not in _sets(engine, amd)


def test_the_vendor_condition_reads_the_node_file_s_maker_not_a_list_of_ids(engine):
    """A node added later (a plugin's, a calibrated copy) needs no edit of the conventions: the
    vendor comes from its hardware file. Here the H100 node is given another maker."""
    row = _row(notes="Megatron-LM")
    ctx = context(engine)
    assert ctx.node_vendor["h100-sxm"] == "NVIDIA" and ctx.node_vendor["mi300x"] == "AMD"
    assert "training.attention_kernel=fa3" in mapping.map_row(row, ctx).sets
    other = ctx._replace(node_vendor={**ctx.node_vendor, "h100-sxm": "Some Other Maker"})
    sets = mapping.map_row(row, other).sets
    assert "hardware.node=h100-sxm" in sets
    assert not any(s.startswith("training.attention_kernel=") for s in sets)


def test_not_config_is_the_config_condition_negated():
    from dlformula.validation.conventions import holds

    texts = {k: "" for k in ("id", "source", "notes", "arch", "schedule", "precision", "texts",
                             "recipe", "vendor")}
    when = {"not_config": {"hardware.node": ["tpu-v5p", "mi300x"]}}
    assert holds(when, texts, {"hardware.node": "h100-sxm"})
    assert holds(when, texts, {})  # a run that gives no node has none of them
    assert not holds(when, texts, {"hardware.node": "tpu-v5p"})
    assert not holds(when, texts, {"hardware.node": "mi300x"})


def test_ibm_fms_fsdp_reduces_gradients_in_bf16(engine):
    row = _row(source="'Maximizing training throughput using PyTorch FSDP' (IBM and Meta); "
                      "github:foundation-model-stack/fms-fsdp README.md")
    assert _sets(engine, row)["training.grad_bytes"] == "2"
    assert "training.grad_bytes" not in _sets(engine, _row(source="a paper"))


def test_hybrid_sharding_takes_the_node_s_gpus_when_the_run_omits_them(engine):
    row = _row(parallel=_Replace({"tp": 1, "pp": 1, "dp": 64, "fsdp": "HSDP"}),
               hardware={"gpu": "GB200 NVL72", "count": 64},
               batch={"global_batch_sequences": 64, "micro_batch": 1})
    assert _sets(engine, row)["parallelism.dp_shard"] == "4"  # a GB200 compute tray


def test_learned_routing_on_real_data_carries_the_measured_imbalance(engine):
    """Production and fine-tuning runs route real tokens with a learned router: the mapping
    gives them FEPLB's measured busiest-rank share; a force-balanced benchmark keeps 1."""
    moe = {"experts": 8, "top_k": 2, "expert_ffn_hidden": 14336}
    real = _row(source="Jin et al. 2025, MegaScale-MoE: Large-Scale Communication-Efficient",
                model=moe)
    bench = _row(source="NVIDIA-NeMo/Megatron-Bridge docs/performance-summary.md", model=moe)
    assert _sets(engine, real)["moe.load_imbalance"] == "1.23"
    assert "moe.load_imbalance" not in _sets(engine, bench)
    stated = _row(source="DeepSeek-V3 Technical Report", model=moe, moe={"load_imbalance": 1.1})
    assert _sets(engine, stated)["moe.load_imbalance"] == "1.1"
    # A benchmark source's row that says it routed naturally (its id) takes the same figure.
    natural = _row(id="qwen3_30b_16gpu_h100_naturalrouting",
                   source="NVIDIA-NeMo/Megatron-Bridge model verification card", model=moe)
    assert _sets(engine, natural)["moe.load_imbalance"] == "1.23"
    assert "moe.load_imbalance" not in _sets(engine, _row(id="qwen3_30b_16gpu_h100_forced",
                                                         model=moe))
    # So does a row whose recipe turns Megatron's forced balancing off; on, or a notes line
    # that only names the flag, leaves the default.
    for said, want in ((False, "1.23"), ("False ('Run with real dataset')", "1.23"),
                       (True, None)):
        row = _row(model=moe, framework={"moe_router_force_load_balancing": said})
        assert _sets(engine, row).get("moe.load_imbalance") == want, said
    named = _row(model=moe, notes="moe_router_force_load_balancing: false in another run")
    assert "moe.load_imbalance" not in _sets(engine, named)
    # A row that says in its own words that its router is learned on real tokens takes it too;
    # a row that forces the balance, or only says the routing was not printed, does not.
    for notes, want in (("Routing: auxiliary loss 0, not force-balanced", "1.23"),
                        ("learned routing on real data (oscar-en-10k)", "1.23"),
                        ("a learned top-1 router on real data", "1.23"),
                        ("mock data, 'fake balanced gate' (forced-balanced routing)", None),
                        ("Routing (forced balance or learned) not printed", None)):
        row = _row(model=moe, notes=notes)
        assert _sets(engine, row).get("moe.load_imbalance") == want, notes
    # The row's own routing: line is read with its texts.
    routed = _row(model=moe, routing="learned router on real C4 tokens, not force-balanced")
    assert _sets(engine, routed)["moe.load_imbalance"] == "1.23"
    forced = _row(model=moe, routing="force-balanced, dropless (training.benchmark = True)")
    assert "moe.load_imbalance" not in _sets(engine, forced)


def test_deepspeed_moe_and_megatron_s_padding_flag_pad_experts_to_capacity(engine):
    """DeepSpeed-MoE's layer (and Tutel's kernels inside it) computes and sends capacity-padded
    buffers; Megatron pads only with its flag; a padding-free system does neither."""
    moe = {"experts": 8, "top_k": 2, "expert_ffn_hidden": 14336, "capacity_factor": 1.25}
    for system, want in (("DeepSpeed-MoE (TopKGate, MOELayer)", "true"),
                         ("Tutel kernels inside DeepSpeed-MoE (--use-tutel)", "true"),
                         ("X-MoE (padding-free token buffers, inside a DeepSpeed fork)", None)):
        row = _row(model=moe, framework={"moe_system": system})
        assert _sets(engine, row).get("moe.pad_to_capacity") == want, system
    flag = _row(model=moe, framework={"moe_pad_expert_input_to_capacity": True})
    assert _sets(engine, flag)["moe.pad_to_capacity"] == "true"
    assert "moe.pad_to_capacity" not in _sets(engine, _row(model=moe))


def test_deepspeed_moe_s_native_layer_and_maxtext_s_dense_path_dispatch_by_one_hot_einsums(engine):
    """DeepSpeed-MoE's native MOELayer dispatches a micro-batch's tokens by one-hot einsums,
    Tutel's dispatcher inside it does not; MaxText with sparse_matmul false runs its
    dense_matmul path (one group a sequence, padded to capacity); sparse_matmul true does not."""
    moe = {"experts": 8, "top_k": 2, "expert_ffn_hidden": 14336, "capacity_factor": 1.25}
    for system, want in (("DeepSpeed-MoE (TopKGate, MOELayer)", "microbatch"),
                         ("Tutel kernels inside DeepSpeed-MoE (--use-tutel)", None),
                         ("DeepSpeed-MoE with Tutel's fast dispatcher (use_tutel)", None),
                         ("X-MoE (padding-free token buffers, inside a DeepSpeed fork)", None)):
        row = _row(model=moe, framework={"moe_system": system})
        assert _sets(engine, row).get("moe.onehot_dispatch") == want, system
    maxtext = _row(model=moe, framework={"framework": "MaxText on JAX/XLA", "sparse_matmul": False})
    sets = _sets(engine, maxtext)
    assert sets["moe.onehot_dispatch"] == "sequence" and sets["moe.pad_to_capacity"] == "true"
    sparse = _row(model=moe, framework={"framework": "MaxText on JAX/XLA", "sparse_matmul": True})
    assert "moe.onehot_dispatch" not in _sets(engine, sparse)


def test_cuda_graphs_and_xla_programs_launch_the_step_whole(engine):
    """A run that states CUDA graphs, or runs JAX / PyTorch/XLA, launches its step as a graph; a
    negated or switched-off mention does not; a PyTorch stack whose source only names MaxText (a
    branch name) stays eager, and is not read as JAX's dead-code-eliminated recompute either."""
    for notes, want in (("CUDA graphs enabled (enable_cuda_graph)", "graph"),
                        ("cuda_graph_impl: transformer_engine", "graph"),
                        ("no CUDA graphs", None), ("cuda_graph: false", None), ("", None)):
        assert _sets(engine, _row(notes=notes)).get("training.kernel_launch") == want, notes
    jax = _sets(engine, _row(source="AI-Hypercomputer/maxtext README", notes="MaxText on JAX"))
    assert jax["training.kernel_launch"] == "graph" and jax["training.remat_dce"] == "true"
    torch_branch = _row(source="github:OpenEuroLLM/oellm-autoexp, branch automodel_maxtext_tests",
                        framework={"framework": "Megatron-LM (Megatron-Core, Transformer Engine)"})
    sets = _sets(engine, torch_branch)
    assert "training.kernel_launch" not in sets and "training.remat_dce" not in sets


def test_fp8_param_gather_as_runs_state_it(engine):
    """A recipe's fp8_param_gather reaches training.fp8_param_gather; Megatron-Bridge's dense
    FP8 recipes gather FP8 weights by default, its blockwise (fp8-sc) recipe and MoE models
    do not take that default."""
    stated = _row(precision="fp8", framework={"fp8_param_gather": True})
    assert _sets(engine, stated)["training.fp8_param_gather"] == "true"
    bridge = "NVIDIA-NeMo/Megatron-Bridge docs/performance-summary.md"
    assert _sets(engine, _row(source=bridge, precision="fp8-cs"))[
        "training.fp8_param_gather"] == "true"
    assert "training.fp8_param_gather" not in _sets(engine, _row(source=bridge, precision="fp8-sc"))
    assert "training.fp8_param_gather" not in _sets(engine, _row(source=bridge, precision="bf16"))
    off = _row(source=bridge, precision="fp8-cs", framework={"fp8_param_gather": False})
    assert _sets(engine, off)["training.fp8_param_gather"] == "false"


def test_mlperf_8b_rows_reduce_in_bf16_whoever_submitted(engine):
    """Every submitter's copy of MLPerf v5.1's Llama 3.1 8B implementation builds its DDP config
    with grad_reduce_in_fp32=False, whether or not the row's text names NeMo; a row that does not
    state its gradient bucket takes NVIDIA's config's, one that does keeps its own."""
    lenovo = _row(source="MLCommons MLPerf Training 5.1 results, github:mlcommons/"
                         "training_results_v5.1 @ 441d65f4: Lenovo/results/SR680a/llama31_8b")
    assert _sets(engine, lenovo)["training.grad_bytes"] == "2"
    other = _row(source="MLCommons MLPerf Training 5.1 results, github:mlcommons/"
                        "training_results_v5.1 @ 441d65f4: Lenovo/results/SR680a/flux1")
    assert "training.grad_bytes" not in _sets(engine, other)
    assert _sets(engine, lenovo)["parallelism.bucket_size"] == "768000000"  # NVIDIA's config
    stated = _row(source="github:mlcommons/training_results_v5.1 @ 441d65f4: Verda/llama31_8b",
                  parallel={"bucket_size": 134217728})
    assert _sets(engine, stated)["parallelism.bucket_size"] == "134217728"


@pytest.mark.parametrize("written, grad_bytes", [(False, "2"), (True, "4"), ("False", "2"),
                                                 ("grad_reduce_in_fp32 = True", "4")])
def test_grad_reduce_in_fp32_sets_the_gradient_bytes(engine, written, grad_bytes):
    """Megatron's grad_reduce_in_fp32 in a run's recipe is its gradient precision, and wins over
    the NVIDIA-recipe convention's bf16."""
    row = _row(source="NVIDIA-NeMo/Megatron-Bridge docs/performance-summary.md",
               framework={"grad_reduce_in_fp32": written})
    assert _sets(engine, row)["training.grad_bytes"] == grad_bytes


def test_nemo1_overlap_spellings(engine):
    """NeMo 1 writes the distributed optimizer's overlaps as overlap_grad_sync and
    overlap_param_sync."""
    row = _row(framework={"overlap_grad_sync": False, "overlap_param_sync": True})
    sets = _sets(engine, row)
    assert sets["parallelism.overlap_grad_reduce"] == "false"
    assert sets["parallelism.overlap_param_gather"] == "true"


def test_mlperf_gpt3_of_2023_ran_flashattention_2(engine):
    """MLPerf v3.0 / v3.1's GPT-3 image ran attention through flash-attn 2; the NeMo rule gives
    later MLPerf rows cuDNN's fused attention."""
    v31 = _row(source="github:mlcommons/training_results_v3.1 @ d06288b2: NVIDIA NeMo, "
                      "results/eos_n64_ngc23.09_nemo/gpt3", model={"arch": "GPT-3 175B"})
    v40 = _row(source="github:mlcommons/training_results_v4.0 @ x: NVIDIA NeMo, "
                      "results/eos_n64_ngc24.04_nemo/gpt3", model={"arch": "GPT-3 175B"})
    assert _sets(engine, v31)["training.attention_kernel"] == "fa2"
    assert _sets(engine, v40)["training.attention_kernel"] == "fa3"


@pytest.mark.parametrize("source, notes, training, kernel", [
    # Megatron-Bridge's performance scripts set cross_entropy_fusion_impl 'te' for every run.
    ("NVIDIA-NeMo/Megatron-Bridge docs/performance-summary.md", "", {}, "te"),
    # A Megatron-Bridge row that also names its NeMo container runs the bridge's scripts.
    ("NVIDIA-NeMo/Megatron-Bridge docs/performance-summary.md", "NeMo 25.11 container", {}, "te"),
    # NeMo 2's GPTConfig fuses the loss; NeMo 1 (24.09 and before) ran the unfused default.
    ("NVIDIA/dgxc-benchmarking llama3.1/README.md (NeMo 25.04.01 container)", "", {}, "fused"),
    ("NVIDIA/dgxc-benchmarking llama3.1/README_70b.md (NeMo 24.09 container)", "", {}, None),
    ("github:InternLM/InternEvo doc/en/train_performance.md", "", {}, "flash"),
    ("a lab's report", "Megatron-LM with --cross-entropy-loss-fusion", {}, "fused"),
    # A run's own recipe value: a sentence naming the implementation takes it.
    ("a lab's report", "", {"cross_entropy_loss_fusion": "true (--cross-entropy-fusion-impl te)"},
     "te"),
    ("a lab's report", "", {"cross_entropy_loss_fusion": True}, "fused"),
    ("a lab's report", "", {"cross_entropy_fusion_impl": "native"}, "fused"),
    ("a lab's report", "", {}, None)])
def test_the_loss_kernel_is_the_framework_s(engine, source, notes, training, kernel):
    row = _row(source=source, notes=notes, training=training)
    assert _sets(engine, row).get("training.loss_kernel") == kernel


@pytest.mark.parametrize(("hardware", "bandwidth"), [
    ({"gpu": "H100-SXM5-80GB (Google Cloud A3, a3-highgpu-8g)"}, "12.5 GB/s"),
    ({"gpu": "H100 80GB", "interconnect": "GPUDirect-TCPX between A3 VMs"}, "12.5 GB/s"),
    ({"gpu": "H100-SXM5-80GB (Google Cloud a3-megagpu-8g)"}, "25 GB/s"),
    ({"gpu": "H100 80GB HBM3", "interconnect": "connected via TCPXO (200 Gbps/GPU)"}, "25 GB/s"),
    ({"gpu": "H100-SXM5-80GB", "interconnect": "8x400Gb/s InfiniBand NDR per node"}, None),
])
def test_a_cloud_vms_network_found_in_its_name_or_interconnect(engine, hardware, bandwidth):
    """Google Cloud's A3 High / A3 Mega are H100 SXM boards on a slower network than the
    node's InfiniBand: the variant is read from the GPU name or the interconnect text, and a
    run on InfiniBand keeps the node's own figure."""
    got = _sets(engine, _row(hardware={"count": 64, **hardware}))
    assert got["hardware.node"] == "h100-sxm"
    assert got.get("hardware.scaleout_bandwidth") == bandwidth


@pytest.mark.parametrize(("interconnect", "bandwidth"), [
    ("4x ConnectX-8 800 Gb/s Ethernet per 4-GPU node", "100 GB/s"),
    ("NVLink Gen5 1800 GB/s inside the rack; 4x ConnectX-7 InfiniBand NDR 400 Gb/s", None),
])
def test_a_gb200_rack_with_connectx_8_nics_has_their_bandwidth(engine, interconnect, bandwidth):
    """Azure's GB200 NVL72 racks carry ConnectX-8 NICs (800 Gb/s a GPU) where the reference
    design, and the node, have ConnectX-7 NDR at 400 Gb/s; '1800 GB/s' of NVLink is no NIC."""
    got = _sets(engine, _row(hardware={"gpu": "GB200", "count": 512, "gpus_per_node": 4,
                                       "interconnect": interconnect}))
    assert got["hardware.node"] == "gb200-nvl72"
    assert got.get("hardware.scaleout_bandwidth") == bandwidth


def test_a_runs_own_network_figure_wins_over_the_variant(engine):
    row = _row(hardware={"gpu": "H100 (a3-megagpu-8g)", "count": 64,
                         "scaleout_bandwidth": "20 GB/s"})
    assert _sets(engine, row)["hardware.scaleout_bandwidth"] == "20 GB/s"


def test_a_convention_whose_keys_the_run_states_is_not_an_assumption(engine):
    """Megatron-Bridge's DeepSeek-V3 recipe dispatches with HybridEP; a run of that shape that
    states the all-to-all dispatcher keeps it, and the recipe's note is not listed."""
    if "moe.experts" not in {d.config for d in engine.model.inputs.values()}:
        pytest.skip("the moe plugin is not loaded")
    shape = {"experts": 256, "top_k": 8, "expert_ffn_hidden": 2048}
    source = "NVIDIA-NeMo/Megatron-Bridge docs/performance-summary.md"
    recipe = _map(engine, _moe_row(model=shape, source=source))
    assert ("moe.dispatcher=deepep" in recipe.sets
            and any("HybridEP" in a for a in recipe.assumptions))
    stated = _map(engine, _moe_row(model={**shape, "dispatcher": "alltoall"}, source=source))
    assert "moe.dispatcher=alltoall" in stated.sets
    assert not any("HybridEP" in a for a in stated.assumptions)


def test_the_aws_qwen3_bench_interleaves_only_with_its_overlap(engine):
    """AWS's Megatron-Bridge Qwen3 bench sets a virtual pipeline only for the all-to-all overlap;
    without it the Qwen3 recipe's none, not the best feasible interleaving."""
    if "moe.experts" not in {d.config for d in engine.model.inputs.values()}:
        pytest.skip("the moe plugin is not loaded")
    source = "awslabs/awsome-distributed-ai 3.test_cases/megatron/megatron-bridge RESULTS.md"
    shape = {"layers": 48, "experts": 128, "top_k": 8, "expert_ffn_hidden": 768}
    row = _moe_row(model=shape, source=source,
                   parallel={"tp": 2, "pp": 4, "dp": 8, "ep": 8, "ep_comm_overlap": False},
                   batch={"global_batch_sequences": 256, "micro_batch": 1})
    m = _map(engine, row)
    assert "parallelism.vpp=1" in m.sets
    assert any("awsome-distributed-ai" in a and "published recipe" in a for a in m.assumptions)


def test_megatron_local_layers_with_flash_attn_run_the_flash_attn_package(engine):
    """--use-flash-attn with Megatron-LM's own layers is the flash-attn package (FlashAttention-2
    class); with Transformer Engine's layers Transformer Engine picks the kernel (cuDNN)."""
    base = {"source": "NVIDIA/Megatron-LM pretrain_gpt.py", "training": {"flash_attention": True}}
    local = _sets(engine, _row(**base, notes="Megatron-LM local transformer implementation "
                                             "(no --transformer-impl flag) with --use-flash-attn"))
    te = _sets(engine, _row(**base, notes="--transformer-impl transformer_engine --use-flash-attn"))
    assert local["training.attention_kernel"] == "fa2"
    assert te["training.attention_kernel"] == "fa3"


DSV3_SHAPE = {"layers": 61, "hidden": 7168, "heads": 128, "kv_heads": 128, "ffn_hidden": 18432,
              "vocab": 129280, "seq_len": 4096, "experts": 256, "top_k": 8,
              "expert_ffn_hidden": 2048, "shared_experts": 1, "first_dense_layers": 3,
              "mla": {"q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128,
                      "qk_rope_head_dim": 64, "v_head_dim": 128}}


def test_the_recompute_modules_a_run_lists_are_priced_on_their_own(engine):
    """Megatron-Core's recompute_modules: the MLA up-projections and the experts' activation
    function are inputs of their own; the dense MLP's and the layernorms' are not priced."""
    if "moe.experts" not in {d.config for d in engine.model.inputs.values()}:
        pytest.skip("the moe plugin is not loaded")
    both = _map(engine, _moe_row(model=DSV3_SHAPE, parallel={
        "tp": 1, "pp": 8, "dp": 8, "ep": 8,
        "recompute": "selective (recompute_modules: mla_up_proj moe_act)"})).values
    assert both["training.recompute"] == "none"
    assert both["training.recompute_mla_up_proj"] is True
    assert both["training.recompute_moe_act"] is True
    mlp = _map(engine, _moe_row(model=DSV3_SHAPE, parallel={
        "tp": 1, "pp": 8, "dp": 8, "ep": 8,
        "recompute": "selective (recompute_modules: mlp)"})).values
    assert "training.recompute_mla_up_proj" not in mlp
    assert "training.recompute_moe_act" not in mlp
    # 'moe' is the whole MoE layer (not moe_act), read after the words recompute_modules only
    layer = _map(engine, _moe_row(model=DSV3_SHAPE, parallel={
        "tp": 1, "pp": 8, "dp": 8, "ep": 8,
        "recompute": "selective (the moe layers: recompute_modules: moe, layernorm)"})).values
    assert layer["training.recompute"] == "selective"
    assert layer["training.recompute_moe"] is True
    assert "training.recompute_moe_act" not in layer
    act = _map(engine, _moe_row(model=DSV3_SHAPE, parallel={
        "tp": 1, "pp": 8, "dp": 8, "ep": 8,
        "recompute": "selective for the moe layers (recompute_modules: moe_act)"})).values
    assert "training.recompute_moe" not in act and act["training.recompute_moe_act"] is True


@pytest.mark.parametrize(("release", "node", "precision", "modules"), [
    ("26.04", "GB300", "mxfp8", {"training.recompute_mla_up_proj"}),
    ("25.11", "GB300", "mxfp8", {"training.recompute_moe_act"}),
    ("26.06", "GB300", "mxfp8", set()),
    ("26.04", "GB300", "bf16", {"training.recompute_moe_act"}),
    ("26.04", "GB200", "mxfp8", set()),
    ("26.06", "GB200", "mxfp8", {"training.recompute_mla_up_proj"}),
    ("26.06", "GB200", "fp8", set()),
    ("26.04", "GB200", "bf16", {"training.recompute_mla_up_proj"}),
    ("26.02", "B200", "mxfp8", {"training.recompute_mla_up_proj"}),
])
def test_megatron_bridge_deepseek_v3_presets_recompute_their_modules(engine, release, node,
                                                                      precision, modules):
    """Each release's DeepSeek-V3 preset for the GPU and precision (V2, the scripts' default)
    lists its recompute_modules; the ones the formulas price are set, nothing else."""
    if "moe.experts" not in {d.config for d in engine.model.inputs.values()}:
        pytest.skip("the moe plugin is not loaded")
    gpus = {"GB300": 256, "GB200": 256, "B200": 256}[node]
    got = _map(engine, _moe_row(source=BRIDGE.format(release), model=DSV3_SHAPE,
                                hardware={"gpu": node, "count": gpus},
                                parallel={"tp": 1, "pp": 4, "dp": 64, "ep": 64},
                                precision=precision)).values
    flags = {k for k in ("training.recompute_mla_up_proj", "training.recompute_moe_act")
             if got.get(k)}
    assert flags == modules


def test_megatron_bridge_fsdp_llama_presets_offload_activations(engine):
    """The Llama 3 70B Megatron-FSDP presets hold 40 (GB200, FP8) or 20 (GB300, FP8) layers'
    activations in host memory; the same layout without FSDP, or another framework, none."""
    fsdp = {"model": LLAMA3_70B, "parallel": {"tp": 1, "pp": 1, "dp": 64, "zero": 3},
            "batch": _Replace({"global_batch_sequences": 256, "micro_batch": 2}),
            "precision": "fp8"}
    for gpu, n in (("GB200", 40), ("GB300", 20)):
        got = _map(engine, _row(source=BRIDGE.format("26.04"), hardware={
            "gpu": gpu, "count": 64}, **fsdp)).values
        assert got["training.offload_layers"] == n and got["training.recompute"] == "none"
    other = _map(engine, _row(source="a lab's Megatron-LM run", hardware={
        "gpu": "GB200", "count": 64}, **fsdp)).values
    assert "training.offload_layers" not in other


@pytest.mark.parametrize(("source", "dce"), [
    ("AI-Hypercomputer/gpu-recipes training/a4/llama3-1-70b/maxtext-pretraining-gke", True),
    ("NVIDIA/JAX-Toolbox rosetta/rosetta/projects/pax/README.md", True),
    ("NVIDIA-NeMo/Megatron-Bridge docs/performance-summary.md", False),
])
def test_a_jax_stack_recomputes_only_what_the_backward_reads(engine, source, dce):
    got = _map(engine, _row(source=source, parallel={"tp": 1, "pp": 8, "dp": 8,
                                                     "recompute": "full"})).values
    assert got.get("training.remat_dce", False) is dce


@pytest.mark.parametrize(("source", "hybrid"), [
    ("github:InternLM/InternEvo doc/en/train_performance.md; "
     "internlm/solver/optimizer/hybrid_zero_optim.py", True),
    ("NVIDIA Megatron-LM README scaling table", False),
])
def test_internevo_s_optimizer_all_reduces_and_broadcasts(engine, source, hybrid):
    got = _map(engine, _row(source=source, parallel={"tp": 1, "pp": 1, "dp": 64, "zero": 1})).values
    assert got.get("parallelism.grad_allreduce", False) is hybrid
    assert got.get("parallelism.param_broadcast", False) is hybrid


GPT_OSS_120B = {"layers": 36, "hidden": 2880, "heads": 64, "kv_heads": 8, "head_dim": 64,
                "ffn_hidden": 2880, "vocab": 201088, "seq_len": 4096, "experts": 128, "top_k": 4,
                "expert_ffn_hidden": 2880}


@pytest.mark.parametrize(("release", "gpu", "precision", "moe_act"), [
    ("26.04", "H100", "bf16", True), ("26.04", "GB300", "bf16", False),
    ("26.06", "GB200", "mxfp8", False), ("26.06", "GB200", "bf16", True),
    ("26.06", "B200", "mxfp8", True),
])
def test_megatron_bridge_gpt_oss_presets_recompute_the_expert_activation(engine, release, gpu,
                                                                         precision, moe_act):
    """The gpt-oss-120b presets on GB200, B200 and H100 list ['layernorm', 'moe_act'] (the
    MoE activation priced, the layernorm not); GB300's none; 26.06's GB200 MXFP8 none."""
    if "moe.experts" not in {d.config for d in engine.model.inputs.values()}:
        pytest.skip("the moe plugin is not loaded")
    got = _map(engine, _moe_row(source=BRIDGE.format(release), model=GPT_OSS_120B,
                                hardware={"gpu": gpu, "count": 64},
                                parallel={"tp": 1, "pp": 1, "dp": 64, "ep": 64},
                                precision=precision)).values
    assert bool(got.get("training.recompute_moe_act")) is moe_act


@pytest.mark.parametrize(("arch", "oss"), [
    ("gpt-oss MoE (RMSNorm, clamped SwiGLU with biases)", True), ("Qwen3 MoE", False)])
def test_gpt_oss_experts_clamp_their_glu_and_carry_biases(engine, arch, oss):
    if "moe.experts" not in {d.config for d in engine.model.inputs.values()}:
        pytest.skip("the moe plugin is not loaded")
    got = _map(engine, _moe_row(source=BRIDGE.format("26.04"), model={**GPT_OSS_120B, "arch": arch},
                                hardware={"gpu": "B200", "count": 64},
                                parallel={"tp": 1, "pp": 1, "dp": 64, "ep": 8})).values
    assert bool(got.get("moe.glu_clamp")) is oss and bool(got.get("moe.expert_bias")) is oss


@pytest.mark.parametrize(("source", "row_id", "torch"), [
    ("LambdaLabsML/torchtitan gb300/TUNING_RESULTS.md", "r", True),
    ("pytorch/torchtitan docs/deepep.md", "r", True),
    ("pytorch/ao torchao/prototype/moe_training/README.md, run with torchao", "r", True),
    ("PrimeIntellect-ai/prime-rl docs/performance.md (prime-rl SFT trainer vs torchtitan)",
     "primerl_qwen3_torchtitan_fullac", True),
    ("PrimeIntellect-ai/prime-rl docs/performance.md (prime-rl SFT trainer vs torchtitan)",
     "primerl_qwen3_megamoe_fullac", False),
    (BRIDGE.format("26.04"), "r", False),
])
def test_torchtitan_experts_run_pytorch_grouped_gemm(engine, source, row_id, torch):
    if "moe.experts" not in {d.config for d in engine.model.inputs.values()}:
        pytest.skip("the moe plugin is not loaded")
    got = _map(engine, _moe_row(id=row_id, source=source)).values
    assert (got.get("moe.grouped_gemm_kernel") == "torch") is torch


@pytest.mark.parametrize(("gpu", "tdp"), [("NVIDIA B300 SXM6 AC (1,100 W TGP)", "1100 W"),
                                          ("H100 SXM5 (700W)", "700 W"),
                                          ("H100 96GB HBM2e at 500 W", "500 W")])
def test_a_power_limit_in_the_gpu_name_is_read_whole(engine, gpu, tdp):
    """A thousands separator is part of the number: '1,100 W' is 1,100 W, not 100 W (it was
    read as the latter, pricing a B300 at a tenth of its board power)."""
    m = _map(engine, _row(hardware={"gpu": gpu, "count": 64}))
    c = dict(item.split("=", 1) for item in m.sets)
    assert c["hardware.tdp"] == tdp
