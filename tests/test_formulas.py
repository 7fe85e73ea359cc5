"""Independent hand calculations against the formula set."""

from __future__ import annotations

import pytest

from conftest import DATA, EXAMPLES

GPT3 = str(EXAMPLES / "gpt3-175b.yaml")


def test_gpt3_params_narayanan_eq2(gpt3):
    L, h, V, s = 96, 12288, 50257, 2048
    # Narayanan et al. 2021 eq. 2 (12lh^2 + 13lh + (V+s)h) plus the final LayerNorm (2h).
    assert gpt3["params_total"] == 12 * L * h**2 + 13 * L * h + (V + s) * h + 2 * h


@pytest.mark.parametrize("preset,published,tol", [
    ("llama3.1-405b", 405e9, 0.01), ("llama3.1-70b", 70.6e9, 0.01), ("llama3.1-8b", 8.03e9, 0.01),
    ("llama2-70b", 70e9, 0.02), ("nemotron4-340b", 340e9, 0.01), ("gpt3-175b", 175e9, 0.01),
])
def test_published_param_counts(engine, preset, published, tol):
    r = engine.evaluate(GPT3, [f"model.preset={preset}", "parallelism.tp=1", "parallelism.pp=1",
                               "parallelism.dp=1", "hardware.gpus=1", "training.global_batch=1"])
    assert abs(r["params_total"] / published - 1) < tol


def test_hf_config_llama31_8b(engine):
    r = engine.evaluate(GPT3, ["parallelism.tp=8", "parallelism.pp=1", "parallelism.dp=128",
                               "training.global_batch=1024"],
                        hf_config=str(DATA / "hf" / "llama3.1-8b.json"))
    assert r["params_total"] == 8_030_261_248  # the published safetensors total


def test_hf_config_gpt2(engine):
    r = engine.evaluate(GPT3, ["parallelism.tp=4", "parallelism.pp=1", "parallelism.dp=256",
                               "training.global_batch=1024", "training.seq_len=1024"],
                        hf_config=str(DATA / "hf" / "gpt2-like.json"))
    assert r["params_total"] == 124_439_808  # GPT-2 small


def test_sliding_window_attention_counts_the_keys_inside_the_window(engine):
    """A query at position p of a windowed layer attends to min(p + 1, W) keys: summed over a
    sequence of s tokens, W s - W^2 / 2 (+ W / 2) against s^2 / 2 (+ s / 2) for a causal layer,
    so the attention FLOPs of the windowed layers shrink by (2W - W^2/s) / s. Every second
    layer full (gpt-oss), every layer windowed (Mistral 7B), and a window wider than the
    sequence (no change)."""
    s, w = 8192, 1024
    base = engine.evaluate(GPT3, [f"training.seq_len={s}"])
    keys_full = sum(p + 1 for p in range(s))
    keys_window = sum(min(p + 1, w) for p in range(s))
    half = engine.evaluate(GPT3, [f"training.seq_len={s}", f"model.sliding_window={w}",
                                  "model.full_attention_every=2"])
    assert half["windowed_layer_share"] == 0.5
    assert half["window_attention_span"] / s == pytest.approx(keys_window / keys_full, rel=2e-3)
    assert half["attention_span"] == pytest.approx((s + 2 * w - w * w / s) / 2)
    score = base["forward_flops_per_token"] - half["forward_flops_per_token"]
    attention = base["forward_flops_per_token"] - engine.evaluate(
        GPT3, [f"training.seq_len={s}", "model.sliding_window=1", "model.full_attention_every=0"]
    )["forward_flops_per_token"]  # all layers at a 1-token window: span s -> 2 - 1/s
    # FLOPs are linear in the span: half the layers go from s to 2W - W^2/s.
    assert score == pytest.approx(attention * (s - (2 * w - w * w / s)) / 2 / (s - (2 - 1 / s)))
    every = engine.evaluate(GPT3, [f"training.seq_len={s}", f"model.sliding_window={w}"])
    assert every["windowed_layer_share"] == 1
    assert every["attention_span"] == pytest.approx(2 * w - w * w / s)
    wide = engine.evaluate(GPT3, [f"training.seq_len={s}", f"model.sliding_window={2 * s}"])
    assert wide["attention_span"] == s
    # 96 layers, every 5th full: 19 full layers, 77 windowed.
    fifth = engine.evaluate(GPT3, [f"model.sliding_window={w}", "model.full_attention_every=5"])
    assert fifth["windowed_layer_share"] == pytest.approx(77 / 96)


@pytest.mark.parametrize("extra,window,every", [
    ({"sliding_window": 128, "layer_types": ["sliding_attention", "full_attention"] * 18},
     128, 2),  # gpt-oss-120b
    ({"sliding_window": 4096}, 4096, 0),  # Mistral 7B v0.1: every layer
    ({"sliding_window": 1024, "sliding_window_pattern": 6}, 1024, 6),  # Gemma 3
    ({"sliding_window": 32768, "use_sliding_window": False}, None, None),  # Qwen2 as shipped
    ({"sliding_window": None}, None, None),
])
def test_hf_config_reads_the_sliding_window_and_its_layer_pattern(tmp_path, extra, window,
                                                                  every):
    import json

    from dlformula.hfconfig import read_hf_config

    data = json.loads((DATA / "hf" / "llama3.1-8b.json").read_text())
    data["num_hidden_layers"] = 36
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**data, **extra}))
    got = read_hf_config(str(path))
    assert got.get("model.sliding_window") == window
    assert got.get("model.full_attention_every") == every


# Korthikanti et al. 2022, Table 2, bytes per layer with a = heads, t = tp.
def korthikanti(s, b, h, a, t, case):
    sbh = s * b * h
    return {
        "tp": sbh * (10 + 24 / t + 5 * a * s / (h * t)),
        "tp_sp": sbh * (34 / t + 5 * a * s / (h * t)),
        "tp_selective": sbh * (10 + 24 / t),
        "tp_sp_selective": sbh * 34 / t,
        "full": 2 * sbh,
    }[case]


@pytest.mark.parametrize("case,sp,recompute", [
    ("tp", False, "none"), ("tp_sp", True, "none"), ("tp_selective", False, "selective"),
    ("tp_sp_selective", True, "selective"), ("full", False, "full"),
])
def test_korthikanti_activations(engine, case, sp, recompute):
    # The 22B model of Korthikanti Table 3: GPT layout, dropout on, no fused attention.
    sets = ["model.preset=gpt3-175b", "model.layers=48", "model.hidden=6144", "model.heads=64",
            "model.kv_heads=64", "model.ffn_hidden=24576", "parallelism.tp=8", "parallelism.pp=1",
            "parallelism.dp=128", "training.global_batch=512", "training.micro_batch=4",
            "training.dropout=true", "training.flash_attention=false",
            f"parallelism.sp={str(sp).lower()}", f"training.recompute={recompute}"]
    r = engine.evaluate(GPT3, sets)
    assert r["act_per_layer"] == pytest.approx(korthikanti(2048, 4, 6144, 64, 8, case), rel=1e-12)


def test_korthikanti_22b_no_recompute_total(engine):
    """README of the validation set: 22B with TP 8, no SP, no recompute holds 59.25 GiB."""
    sets = ["model.layers=48", "model.hidden=6144", "model.heads=64", "model.kv_heads=64",
            "model.ffn_hidden=24576", "parallelism.tp=8", "parallelism.pp=1",
            "parallelism.dp=128", "training.global_batch=512", "training.micro_batch=4",
            "training.dropout=true", "training.flash_attention=false", "parallelism.sp=false",
            "training.recompute=none"]
    r = engine.evaluate(GPT3, sets)
    assert r["act_per_layer"] * r["layers_per_stage"] / 2**30 == pytest.approx(59.25, abs=0.01)


@pytest.mark.parametrize("pp,vpp,gb", [(8, 1, 1536), (8, 2, 1536), (4, 3, 768), (1, 1, 1536)])
def test_bubble_fraction(engine, pp, vpp, gb):
    dp = 1024 // (8 * pp)
    r = engine.evaluate(GPT3, [f"parallelism.pp={pp}", f"parallelism.vpp={vpp}",
                               f"parallelism.dp={dp}", f"training.global_batch={gb}"])
    m = gb / dp
    # Equal stages but the last, which also runs the LM head: the fill and drain are the other
    # stages' (p-1) micro-batch times; the LM head is already in the steady state's pace.
    other = r["layers_per_stage"] * r["layer_microbatch_time"]
    assert r["pipeline_bubble_time"] == pytest.approx((pp - 1) / vpp * other)
    assert r["pipeline_bubble_fraction"] == pytest.approx(
        (pp - 1) / (vpp * m) * other / r["stage_microbatch_compute_time"])
    if pp > 1:  # the last stage is the slowest: its LM head
        assert r["stage_microbatch_compute_time"] == pytest.approx(other + r["logits_time"])


@pytest.mark.parametrize("zero,bytes_per_param", [
    (0, lambda n: 2 + 4 + 4 + 8), (1, lambda n: 2 + 4 + 12 / n), (2, lambda n: 2 + 16 / n),
    (3, lambda n: 18 / n)])
def test_zero_stages(engine, zero, bytes_per_param):
    r = engine.evaluate(GPT3, [f"parallelism.zero={zero}", "parallelism.pp=1",
                               "parallelism.dp=128"])
    n = r["dp"] * r["cp"]
    assert r["states_memory"] == pytest.approx(r["params_per_gpu"] * bytes_per_param(n))


def test_vpp_memory_factor(engine):
    r = engine.evaluate(GPT3, ["parallelism.vpp=2"])
    assert r["microbatches"] > 2 * r["pp"]
    assert r["vpp_memory_factor"] == pytest.approx(1 + 7 / 16)


def test_interleaving_holds_no_more_than_every_microbatch(engine):
    """With as many micro-batches as stages, the interleaved warm-up runs every forward pass
    first, as 1F1B's does: the first stage holds the same activations either way."""
    # gpt3-175b.yaml: dp 16, pp 8; 128 sequences of micro-batch 1 per replica -> 8 micro-batches
    sets = ["training.global_batch=128", "training.micro_batch=1"]
    plain = engine.evaluate(GPT3, sets)
    interleaved = engine.evaluate(GPT3, [*sets, "parallelism.vpp=2"])
    assert plain["microbatches"] == plain["pp"] == 8
    assert interleaved["vpp_memory_factor"] == 1
    assert interleaved["act_memory"] == plain["act_memory"]
    # 16 micro-batches: the warm-up's 8 + 7/2 = 11.5 micro-batches' worth fits under the cap
    sixteen = engine.evaluate(GPT3, ["training.global_batch=256", "training.micro_batch=1",
                                     "parallelism.vpp=2"])
    assert sixteen["vpp_memory_factor"] == pytest.approx(1 + 7 / 16)


def test_flops_per_step_korthikanti_eq7(gpt3):
    B, L, s, h, V = 1536, 96, 2048, 12288, 50257
    eq7 = 72 * B * L * s * h**2 * (1 + s / (6 * h) + V / (12 * h * L))
    assert gpt3["flops_per_step"] == pytest.approx(eq7, rel=1e-12)


def test_time_and_cost_are_consistent(gpt3):
    assert gpt3["training_days"] == pytest.approx(gpt3["training_time"] / 86400)
    assert gpt3["gpu_hours"] == pytest.approx(1024 * gpt3["training_time"] / 3600)
    assert gpt3["cost_usd"] == pytest.approx(gpt3["gpu_hours"] * gpt3["price_per_gpu_hour"])
    assert gpt3["mfu"] == pytest.approx(
        gpt3["flops_per_step"] / (gpt3["step_time"] * 1024 * 312e12))
    assert 0 < gpt3["mfu"] < gpt3["hfu"] < 1


def test_mla_attention_params_deepseek_v3(engine):
    """DeepSeek-V3 attention, counted by hand from its config.json (arXiv:2412.19437)."""
    h, heads, q_r, kv_r, nope, rope, v = 7168, 128, 1536, 512, 128, 64, 128
    by_hand = (h * q_r + q_r + q_r * heads * (nope + rope)  # W_DQ, q norm, W_UQ
               + h * (kv_r + rope) + kv_r  # W_DKV with the rotary key, kv norm
               + kv_r * heads * (nope + v)  # W_UK and W_UV
               + heads * v * h)  # W_O
    sets = ["model.hidden=7168", "model.heads=128", "model.kv_heads=128", "model.layers=64",
            "model.linear_bias=false",
            "mla.q_lora_rank=1536", "mla.kv_lora_rank=512", "mla.qk_nope_head_dim=128",
            "mla.qk_rope_head_dim=64", "mla.v_head_dim=128"]
    r = engine.evaluate(GPT3, sets)
    assert r["attention_params_per_layer"] == by_hand
    # scores use the 192-wide query/key heads, the output the 128-wide values
    assert r["q_width"] == 128 * 192 and r["value_width"] == 128 * 128


@pytest.mark.parametrize("schedule", ["1f1b", "zb-h1", "dualpipe"])
def test_schedule_bubbles(engine, schedule):
    r = engine.evaluate(GPT3, [f"parallelism.schedule={schedule}"])
    p, T = r["pp"], r["stage_microbatch_compute_time"]
    F, W = r["stage_microbatch_forward_time"], r["stage_microbatch_weight_grad_time"]
    want = {"1f1b": r["stage_time_sum"] - T,  # (p-1)(F+B) for the stages but the slowest
            "zb-h1": (p - 1) * (T - 2 * W),  # Qi et al. 2023: (p-1)(F+B-2W)
            "dualpipe": (p / 2 - 1) * (T + (T - F) - 3 * W)}[schedule]  # (p/2-1)(F&B+B-3W)
    assert r["pipeline_bubble_time"] == pytest.approx(want)
    assert r["inflight_microbatches"] == (p + 1 if schedule == "dualpipe" else p)


def test_uneven_stages(engine):
    even = engine.evaluate(GPT3, [])
    r = engine.evaluate(GPT3, ["parallelism.first_stage_layers=11",
                               "parallelism.last_stage_layers=13"])
    assert (r["layers_first_stage"], r["layers_middle_stage"], r["layers_last_stage"]) == (
        11, 12, 13)
    # the last stage (13 blocks + LM head) sets the pace; the first holds fewer activations
    assert r["stage_microbatch_compute_time"] == pytest.approx(
        13 * r["layer_microbatch_time"] + r["logits_time"])
    assert r["act_memory"] < even["act_memory"]


@pytest.mark.parametrize("layers,pp,split", [
    (126, 8, (15, 16, 15)),  # Llama-3.1 405B as torchtitan splits it
    (126, 16, (7, 8, 7)),
    (61, 16, (2, 4, 3)),     # DeepSeek-V3's 61 blocks
    (97, 2, (48, 0, 49)),
    (96, 8, (12, 12, 12)),   # even: unchanged
])
def test_pipeline_stages_split_unevenly_on_their_own(engine, layers, pp, split):
    r = engine.evaluate(GPT3, [f"model.layers={layers}", f"parallelism.pp={pp}",
                               f"parallelism.dp={1024 // (8 * pp)}"])
    assert (r["layers_first_stage"], r["layers_middle_stage"], r["layers_last_stage"]) == split
    assert split[0] + split[2] + split[1] * max(pp - 2, 0) == layers


def test_a_split_with_empty_end_stages_is_refused(run):
    code, _, err = run("eval", GPT3, "--set", "model.layers=10", "--set", "parallelism.pp=8")
    assert code == 2 and "model.layers = 10 does not split over pp x vpp = 8 x 1" in err


def test_gemm_detail_shapes_and_loads(gpt3):
    h, tp = 12288, 8
    assert (gpt3["gemm_mlp_up_weight_rows"], gpt3["gemm_mlp_up_weight_cols"]) == (h, 4 * h)
    assert gpt3["gemm_mlp_up_weight_cols_per_gpu"] == 4 * h / tp  # column-parallel
    assert gpt3["gemm_mlp_down_weight_rows_per_gpu"] == 4 * h / tp  # row-parallel
    assert gpt3["gemm_attn_out_weight_cols_per_gpu"] == h
    assert gpt3["gemm_qkv_weight_load_time"] == pytest.approx(
        2 * h * 3 * h / tp / gpt3["hbm_bandwidth"])
    assert gpt3["gemm_qkv_time"] >= gpt3["gemm_qkv_compute_time"]


def test_context_parallel_volumes(engine):
    ring = engine.evaluate(GPT3, ["parallelism.cp=2", "parallelism.dp=8"])
    a2a = engine.evaluate(GPT3, ["parallelism.cp=2", "parallelism.dp=8",
                                 "parallelism.cp_comm=a2a"])
    tokens = 2048 / 2  # micro-batch 1, sequence split in two
    kv = 2 * 2 * tokens * 12288 / 8  # K and V of the shard, bf16, per TP rank
    per_layer_ring = 3 * 1 * kv  # cp-1 = 1 hop forward, 2 backward
    per_layer_a2a = 2 * (1 / 2) * 2 * tokens * 4 * 12288 / 8  # Q, K, V, O each way
    steps = ring["microbatches"] * ring["layers_per_stage"]
    assert ring["cp_comm_volume"] == pytest.approx(steps * per_layer_ring)
    assert a2a["cp_comm_volume"] == pytest.approx(steps * per_layer_a2a)


def test_fp8_keeps_a_bf16_and_an_fp8_weight(engine):
    r = engine.evaluate(GPT3, ["hardware.node=h100-sxm", "training.precision=fp8"])
    assert r["weight_bytes"] == 3 and r["peak_flops"] == r["peak_flops_fp8"]


def test_achieved_rate_given(engine):
    r = engine.evaluate(GPT3, ["training.achieved_flops_per_gpu=156e12"])
    assert r["steady_training_time"] == pytest.approx(r["total_training_flops"] / (1024 * 156e12))
    assert r["training_time"] == pytest.approx(r["steady_training_time"] / r["goodput_share"])


def test_sublayer_breakdown_adds_up(gpt3):
    v = gpt3
    assert v["sl_qkv_flops_fwd"] == 2 * 2048 * 12288 * 3 * 12288 / 8
    assert v["sl_total_comm_fwd"] + v["sl_total_comm_bwd"] == pytest.approx(
        v["tp_comm_per_layer"])  # 4 all-gathers/reduce-scatters each way with SP
    for sub in ["norm1", "qkv", "logits", "softmax", "attend", "out_proj", "norm2", "fc1",
                "act", "fc2"]:
        t = v[f"sl_{sub}_time_fwd"]
        rate = v["achievable_flops"] if sub in ("qkv", "logits", "attend", "out_proj", "fc1",
                                                 "fc2") else v["peak_flops_fp32"]
        assert t == pytest.approx(max(v[f"sl_{sub}_flops_fwd"] / rate,
                                      v[f"sl_{sub}_bytes_fwd"] / v["hbm_bandwidth"]))
    assert v["sl_fc1_compute_bound"] == 1 and v["sl_norm1_compute_bound"] == 0
    assert v["tp_link_tier"] == 1


def test_unfused_attention_moves_the_score_matrix(engine):
    r = engine.evaluate(GPT3, ["training.flash_attention=false"])
    scores = 1 * 96 / 8 * 2048 * 2048  # b * a/t * s * s
    assert r["sl_softmax_bytes_fwd"] == 2 * 2 * scores  # read and write, 2 bytes each


def test_zero3_with_pipeline_keeps_stage_weights_gathered(engine):
    r = engine.evaluate(GPT3, ["parallelism.zero=3"])  # pp = 8
    p, n = r["params_per_gpu"], r["dp"] * r["cp"]
    assert r["weight_memory"] == pytest.approx(2 * p)
    assert r["grad_memory"] == pytest.approx(4 * p / n + 2 * p)
    assert r["zero3_working_memory"] == pytest.approx(2 * r["params_per_layer"] / 8 * (2 + 4))


def test_network_collectives_use_the_nic_efficiency(engine):
    """Inside a node a data-parallel ring runs at NVLink's collective efficiency; across nodes
    at the NIC's (scaleout_efficiency, 0.94 of 25 GB/s on the A100 node)."""
    r = engine.evaluate(GPT3)  # tp 8 fills a node: dp rings cross the network
    assert r["scaleout_link_bandwidth"] == pytest.approx(0.94 * r["scaleout_bandwidth"])
    assert r["dp_bandwidth"] == r["scaleout_link_bandwidth"]
    assert r["tp_bandwidth"] == r["collective_efficiency"] * r["scaleup_bandwidth"]
    same = engine.evaluate(GPT3, ["hardware.scaleout_efficiency=0"])  # 0: collective_efficiency
    assert same["dp_bandwidth"] == pytest.approx(r["collective_efficiency"]
                                                 * r["scaleout_bandwidth"])


@pytest.mark.parametrize("vpp, window", [(1, 1), (2, (1 + 8) / 2), (3, (1 + 8 * 2) / 3)])
def test_interleaving_spreads_gradient_reduction_over_the_chunks(engine, vpp, window):
    """Megatron-LM reduces each model chunk's gradients as its last backward ends: with v
    chunks and p stages, chunk j's are final p x j chunk passes before the end of the step."""
    r = engine.evaluate(GPT3, [f"parallelism.vpp={vpp}", "model.layers=96"])
    assert r["chunk_sync_window"] == pytest.approx(window)
    assert r["dp_overlap_window"] == pytest.approx(
        window * (r["stage_microbatch_backward_time"] + r["stage_microbatch_recompute_time"]))
    assert r["dp_gather_overlap_window"] == pytest.approx(
        window * r["stage_microbatch_forward_time"])


def test_the_gradient_reduction_also_hides_behind_recomputed_blocks(engine):
    """With activation recompute each block's forward is redone inside the backward pass, while
    buckets become final: the gradient reduction's window is backward plus recompute."""
    none = engine.evaluate(GPT3, ["training.recompute=none"])
    full = engine.evaluate(GPT3, ["training.recompute=full"])
    assert none["stage_microbatch_recompute_time"] == 0
    assert none["dp_overlap_window"] == pytest.approx(
        none["chunk_sync_window"] * none["stage_microbatch_backward_time"])
    layers = max(full["layers_first_stage"], full["layers_middle_stage"], full["layers_last_stage"])
    assert full["stage_microbatch_recompute_time"] == pytest.approx(
        layers * full["layer_forward_time"])
    assert full["dp_overlap_window"] == pytest.approx(full["chunk_sync_window"] * (
        full["stage_microbatch_backward_time"] + full["stage_microbatch_recompute_time"]))
    assert full["dp_overlap_window"] > none["dp_overlap_window"]


@pytest.mark.parametrize("precision, scaling, gather, per_weight", [
    ("bf16", "delayed", True, 2), ("fp8", "delayed", False, 2), ("fp8", "current", True, 1),
    ("fp8", "block", True, 1 + 1 / 32), ("nvfp4", "delayed", True, 2)])
def test_fp8_param_gather_halves_the_weight_all_gather(engine, precision, scaling, gather,
                                                        per_weight):
    """Megatron-LM --fp8-param-gather keeps the weights in FP8 between optimizer steps, so the
    distributed optimizer gathers 1 byte a weight (MXFP8 adds a scale byte per 32), not 2; it
    does nothing outside FP8 training."""
    r = engine.evaluate(GPT3, ["hardware.node=b200", f"training.precision={precision}",
                               f"training.fp8_scaling={scaling}",
                               f"training.fp8_param_gather={str(gather).lower()}",
                               "parallelism.zero=1"])
    assert r["weight_comm_bytes"] == pytest.approx(per_weight)
    one_bucket = (r["dp_shard_group"] - 1) / r["dp_shard_group"] * r["params_per_gpu"] \
        * per_weight / r["dp_buckets"] / r["dp_shard_bandwidth"]
    assert r["dp_param_bucket_time"] == pytest.approx(one_bucket + r["dp_shard_ring_latency"])


def test_a_bucket_smaller_than_a_tensor_leaves_one_bucket_per_tensor(engine):
    """Megatron closes a gradient bucket once the whole tensors in it reach bucket_size, so a
    tiny bucket_size gives one bucket per parameter tensor, not params / bucket_size buckets."""
    r = engine.evaluate(GPT3, ["parallelism.bucket_size=200", "parallelism.vpp=1"])
    assert r["dp_buckets"] == r["layers_per_stage"] * r["param_tensors_per_layer"]
    default = engine.evaluate(GPT3, ["parallelism.vpp=1"])
    assert default["dp_buckets"] < r["dp_buckets"]
    assert r["step_time"] < 2 * default["step_time"]


def test_tied_embeddings_all_reduce_between_first_and_last_stage(engine):
    """Megatron all-reduces the tied word embedding's gradient between the first and the last
    pipeline stage after the backward pass: two ranks, the tensor-parallel shard once each way,
    nothing hidden. None without pipeline parallelism or without a shared embedding."""
    r = engine.evaluate(GPT3, ["model.tied_embeddings=true"])
    assert r["pp"] > 1
    expected = (r["vocab"] * r["hidden"] / r["tp"] * r["grad_bytes"] / r["pp_bandwidth"]
                + 2 * r["pp_latency"] + r["collective_base_latency"])
    assert r["embedding_grad_sync_time"] == pytest.approx(expected)
    assert r["step_time"] == pytest.approx(
        r["compute_time"] + r["pipeline_bubble_time"] + r["pp_comm_exposed"]
        + r["dp_comm_exposed"] + r["embedding_grad_sync_time"] + r["optimizer_time"])
    untied = engine.evaluate(GPT3, ["model.tied_embeddings=false"])
    assert untied["embedding_grad_sync_time"] == 0
    mtp = engine.evaluate(GPT3, ["model.tied_embeddings=false", "model.mtp_layers=1"])
    assert mtp["embedding_grad_sync_time"] > 0
    one_stage = engine.evaluate(GPT3, ["model.tied_embeddings=true", "parallelism.pp=1",
                                       "parallelism.vpp=1", "hardware.gpus=128"])
    assert one_stage["embedding_grad_sync_time"] == 0
