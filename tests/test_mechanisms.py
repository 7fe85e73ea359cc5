"""The cost model's mechanisms on cases small enough to work out by hand.

Each test names the published mechanism it pins (NCCL's latency model, Megatron-LM's bucketing
and overlap, Transformer Engine's FP8 casts, document masking, all-gather context parallelism,
goodput) and recomputes the figure from the inputs, so a formula edit that changes the
mechanism fails here with the arithmetic beside it.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from dlformula.core import Engine

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
GPT3 = str(EXAMPLES / "gpt3-175b.yaml")
US = 1e-6

# GPT-3 175B in FP8 on 10,752 H100s, the strong-scaling layout of issue 12.
AT_SCALE = {"hardware.node": "h100-sxm", "hardware.gpus": 10752, "parallelism.tp": 4,
            "parallelism.pp": 8, "parallelism.dp": 336, "training.global_batch": 2688,
            "training.micro_batch": 1, "training.precision": "fp8"}
# GPT-3 175B on 64 GPUs of one Blackwell NVL72 domain (the node and precision vary by test).
BLACKWELL_64 = {"hardware.gpus": 64, "parallelism.tp": 4, "parallelism.pp": 8, "parallelism.dp": 2}


@pytest.fixture(scope="module")
def engine() -> Engine:
    return Engine()


def test_data_parallel_ring_latency_follows_nccl_cost_model(engine):
    r = engine.evaluate(GPT3, AT_SCALE)
    # tp = 4 on 8-GPU nodes: 2 ranks of each DP group per node, 336 ranks over 168 nodes.
    assert r["dp_ranks_per_domain"] == 2 and r["dp_group_domains"] == 168
    # NCCL: base + (n - nodes) NVLink steps + (nodes - 1) network steps (Simple protocol).
    expected = 8.4 * US + (336 - 168) * 3.4 * US + (168 - 1) * 14 * US
    assert r["dp_ring_latency"] == pytest.approx(expected)
    # An all-reduce takes NCCL's tree when it is cheaper: 2 ((ppn - 1) intra + log2i(nodes) inter).
    tree = 8.4 * US + 2 * ((2 - 1) * 3.4 * US + math.floor(math.log2(168)) * 14 * US)
    assert r["dp_allreduce_latency"] == pytest.approx(tree)


def test_a_data_parallel_collective_uses_the_nics_of_every_rank_it_holds_on_a_node(engine):
    # tp 1, cp 8 on 8-GPU nodes: one data-parallel rank per node, but the gradient and ZeRO
    # collectives run over dp x cp, which holds all 8 GPUs of a node, so all 8 NICs carry them.
    sets = {**AT_SCALE, "parallelism.tp": 1, "parallelism.pp": 1, "parallelism.cp": 8,
            "parallelism.dp": 1344, "training.seq_len": 16384, "training.global_batch": 1344}
    r = engine.evaluate(GPT3, sets)
    assert r["dp_group"] == 8 * 1344 and r["dp_ranks_per_domain"] == 8
    assert r["dp_bandwidth"] == pytest.approx(min(r["scaleup_link_bandwidth"],
                                                  8 * r["scaleout_link_bandwidth"]))
    tp8 = engine.evaluate(GPT3, {**sets, "parallelism.tp": 8, "parallelism.cp": 1})
    assert tp8["dp_bandwidth"] == pytest.approx(tp8["scaleout_link_bandwidth"])  # one rank a node


def test_a_tensor_parallel_group_across_nodes_uses_the_nics_of_its_ranks_on_a_node(engine):
    # tp 16 on 8-GPU H100 nodes: each group holds 8 ranks on each of two nodes, and NCCL spreads
    # the collective over those 8 ranks' NICs (vTrain's TP 16 runs on A100 measured it).
    r = engine.evaluate(GPT3, {**AT_SCALE, "parallelism.tp": 16, "parallelism.pp": 8,
                               "parallelism.dp": 84})
    assert r["tp_bandwidth"] == pytest.approx(min(r["scaleup_link_bandwidth"],
                                                  8 * r["scaleout_link_bandwidth"]))
    inside = engine.evaluate(GPT3, AT_SCALE)  # tp 4 inside a node
    assert inside["tp_bandwidth"] == pytest.approx(inside["scaleup_link_bandwidth"])


def test_a_server_with_fewer_gpus_than_the_node_ends_its_nvlink_domain_at_the_board(engine):
    # An H100 node's NVLink domain is its 8-GPU board; a 4-GPU H100 server (TSUBAME 4.0, a
    # JUWELS Booster A100 node) ends it at 4, so tp 8 spans two servers and meets the NICs.
    four = {**AT_SCALE, "hardware.gpus_per_node": 4, "parallelism.tp": 8, "parallelism.pp": 8,
            "parallelism.dp": 168}
    r = engine.evaluate(GPT3, four)
    assert r["scaleup_ranks"] == 4
    assert r["tp_bandwidth"] == pytest.approx(min(r["scaleup_link_bandwidth"],
                                                  4 * r["scaleout_link_bandwidth"]))
    assert r["tp_bandwidth"] < r["scaleup_link_bandwidth"]
    # An NVL72 rack's domain spans its 4-GPU compute trays: tp 8 stays on NVLink.
    rack = engine.evaluate(GPT3, {**four, "hardware.node": "gb200-nvl72"})
    assert rack["scaleup_ranks"] == 72
    assert rack["tp_bandwidth"] == pytest.approx(rack["scaleup_link_bandwidth"])
    # The figure is 0 or 1: a share, a larger number or a YAML boolean is refused by name.
    for bad in (0.5, 2, True):
        with pytest.raises(Exception, match="hardware.scaleup_across_servers"):
            engine.evaluate(GPT3, {**four, "hardware.scaleup_across_servers": bad})


def test_internevo_all_reduces_gradients_and_broadcasts_weights_rank_by_rank(engine):
    # InternEvo's HybridZeroOptimizer: ZeRO-1 whose gradients are all-reduced over the whole
    # data-parallel group and whose updated weights go out as one broadcast per owning rank.
    sets = {**AT_SCALE, "parallelism.zero": 1, "parallelism.overlap_param_gather": False}
    plain = engine.evaluate(GPT3, sets)
    hybrid = engine.evaluate(GPT3, {**sets, "parallelism.grad_allreduce": True,
                                    "parallelism.param_broadcast": True})
    n, nodes, buckets = 336, 168, plain["dp_buckets"]
    # Gradients: an all-reduce moves twice a reduce-scatter's bytes (ring 2(n-1)/n against (n-1)/n).
    ar = (2 * (n - 1) / n * plain["grad_reduce_bytes"] / plain["dp_bandwidth"]
          + buckets * plain["dp_allreduce_latency"])
    assert hybrid["dp_grad_reduce_time"] == pytest.approx(ar)
    # Weights: the stage's 12 blocks x 12 tensors (GPT-3: QKV, output, up and down weights and
    # biases, two layernorms' scales and biases) plus embedding, final norm and head: 147
    # broadcasts, one per owning rank, since the 336 ranks outnumber the tensors.
    tensors = plain["layers_per_stage"] * plain["param_tensors_per_layer"] + 3
    assert tensors == 12 * 12 + 3 and hybrid["param_broadcasts"] == tensors
    # A broadcast is n ring steps (NCCL tuning.cc), each at the network's latency across nodes
    # (NCCL's stand-in for the chunks that fill the chain), where an all-gather pays it only at
    # the node boundaries.
    assert nodes > 1
    bcast = 8.4 * US + n * 14 * US
    assert hybrid["dp_broadcast_latency"] == pytest.approx(bcast)
    # Same bytes as the bucketed all-gathers; the buckets' ring latencies become the broadcasts'.
    expected = (plain["dp_param_gather_time"] - buckets * plain["dp_shard_ring_latency"]
                + tensors * bcast)
    assert hybrid["dp_param_gather_time"] == pytest.approx(expected)
    assert hybrid["dp_param_gather_time"] > 3 * plain["dp_param_gather_time"]
    # Neither input touches a run that does not set it.
    assert plain["param_broadcasts"] == 0


def test_megatron_bucket_grows_with_the_data_parallel_size(engine):
    big = engine.evaluate(GPT3, AT_SCALE)
    assert big["dp_bucket_params"] == 336e6  # max(40M, 1M x dp)
    assert big["dp_buckets"] == math.ceil(big["dp_params_per_gpu"] / 336e6)
    small = engine.evaluate(GPT3)  # dp = 16
    assert small["dp_bucket_params"] == 40e6
    given = engine.evaluate(GPT3, {"parallelism.bucket_size": 1e8, "parallelism.vpp": 3,
                                   "parallelism.pp": 8})
    # The first model chunk is bucketed; every later chunk is one bucket.
    assert given["dp_buckets"] == 2 + math.ceil(given["dp_params_per_gpu"] / 3 / 1e8)


def test_gradient_reduction_exposes_the_last_bucket_or_what_the_window_cannot_absorb(engine):
    r = engine.evaluate(GPT3, AT_SCALE)
    total, n, window = r["dp_grad_reduce_time"], r["dp_buckets"], r["dp_overlap_window"]
    assert r["dp_grad_reduce_exposed"] == pytest.approx(max(total / n,
                                                            total - window * (n - 1) / n))
    roomy = engine.evaluate(GPT3, {**AT_SCALE, "parallelism.vpp": 12})
    assert roomy["dp_overlap_window"] > roomy["dp_grad_reduce_time"]
    assert roomy["dp_grad_reduce_exposed"] == pytest.approx(
        roomy["dp_grad_reduce_time"] / roomy["dp_buckets"])
    off = engine.evaluate(GPT3, {**AT_SCALE, "parallelism.overlap_grad_reduce": False})
    assert off["dp_grad_reduce_exposed"] == pytest.approx(off["dp_grad_reduce_time"])
    # The hidden part still slows the compute it runs behind.
    hidden = r["dp_comm_time"] - r["dp_grad_reduce_exposed"] - r["dp_param_gather_exposed"]
    assert r["dp_comm_exposed"] == pytest.approx(
        r["dp_grad_reduce_exposed"] + r["dp_param_gather_exposed"]
        + r["overlap_slowdown"] * hidden)


def test_fp8_casts_read_16_bits_and_write_fp8_and_its_transpose(engine):
    bf16 = engine.evaluate(GPT3, {**AT_SCALE, "training.precision": "bf16"})
    assert bf16["fp8_cast_time_forward"] == 0 and bf16["fp8_cast_time_backward"] == 0
    r = engine.evaluate(GPT3, AT_SCALE)
    tokens, h, tp = 2048, 12288, 4
    forward = tokens * (h + h / tp + h + 4 * h / tp)  # QKV, out-proj, fc1, fc2 inputs
    backward = tokens * (3 * h / tp + h + 4 * h / tp + h)  # their output gradients
    assert r["fp8_cast_elements_forward"] == pytest.approx(forward)
    assert r["fp8_cast_elements_backward"] == pytest.approx(backward)
    assert r["fp8_cast_time_forward"] == pytest.approx(forward * 4 / r["hbm_bandwidth"]
                                                       + r["fp8_weight_cast_time_forward"])
    assert r["fp8_cast_time_backward"] == pytest.approx(backward * 4 / r["hbm_bandwidth"])
    # Small GEMMs lose twice as much against FP8's doubled peak.
    assert r["gemm_small_dim_effective"] == pytest.approx(
        r["gemm_small_dim"] * r["peak_flops_fp8"] / r["peak_flops_bf16"])


def test_fp8_training_keeps_linear_inputs_in_fp8_as_transformer_engine_does(engine):
    # GPT-3 175B (h 12288, 96 heads, ffn 49152, no GLU) at tp 8 with sequence parallelism, one
    # 2,048-token micro-batch, no dropout, on H100s.
    base = {"hardware.node": "h100-sxm", "training.dropout": False}
    bf16 = engine.evaluate(GPT3, {**base, "training.precision": "bf16"})
    fp8 = engine.evaluate(GPT3, {**base, "training.precision": "fp8"})
    hp = engine.evaluate(GPT3, {**base, "training.precision": "fp8",
                                "training.fp8_saved_inputs": False})
    s, h, t = 2048, 12288, 8
    # By hand, bytes per layer: the QKV input (s h / t), the fc1 input (s h / t) and the fc2
    # input (s 4h / t) drop from 2 bytes to 1; the attention output, which the fused kernel
    # keeps in 16 bits, gains the out-projection's 1-byte copy (s h / t).
    saved = s * (h / t + h / t + 4 * h / t) * (2 - 1) - s * h / t * 1
    assert fp8["gemm_input_bytes"] == 1 and bf16["gemm_input_bytes"] == 2
    assert bf16["act_per_layer_no_recompute"] - fp8["act_per_layer_no_recompute"] == \
        pytest.approx(saved)
    # torchao's Float8Linear keeps the 16-bit inputs: the 16-bit activations exactly.
    assert hp["act_per_layer_no_recompute"] == pytest.approx(bf16["act_per_layer_no_recompute"])
    assert hp["gemm_input_copy_bytes"] == 0


def test_fp8_casts_follow_the_scaling_recipe_and_the_weight_cache(engine):
    # GPT-3 175B at tp 8 on H100s in FP8: 96 layers over pp 8, 12 per stage.
    base = {"hardware.node": "h100-sxm", "training.precision": "fp8"}
    te = engine.evaluate(GPT3, base)
    ao = engine.evaluate(GPT3, {**base, "training.fp8_scaling": "current",
                                "training.fp8_weight_cache": False})
    bw = te["hbm_bandwidth"]
    # By hand: a block's Linear weights on one GPU, (4h^2 + 2 x 4h^2) / tp with h = 12288 (plus
    # the biases GPT-3 carries), and the bytes a cast moves per value.
    h = 12288
    assert te["fp8_weight_elements_per_layer"] == pytest.approx((12 * h * h) / 8, rel=1e-3)
    assert te["fp8_cast_bytes_per_element"] == 4  # read 2, write the FP8 copy and its transpose
    assert ao["fp8_cast_bytes_per_element"] == 6  # current scaling reads the tensor for its amax
    w = te["fp8_weight_elements_per_layer"]
    # Delayed scaling with the weight cached: one cast a step, shared by the micro-batches.
    assert te["fp8_weight_cast_time_forward"] == pytest.approx(w * 4 / te["microbatches"] / bw)
    assert te["fp8_weight_cast_time_backward"] == 0
    # torchao: every call casts the weight, amax + row-wise copy now, the column-wise copy in
    # the backward pass (torchao's roofline: 2 + 3 bytes, then 3).
    assert ao["fp8_weight_cast_time_forward"] == pytest.approx(w * 5 / bw)
    assert ao["fp8_weight_cast_time_backward"] == pytest.approx(w * 3 / bw)
    assert ao["step_time"] > te["step_time"]
    bf16 = engine.evaluate(GPT3, {**base, "training.precision": "bf16"})
    assert bf16["fp8_weight_cast_time_forward"] == 0 and bf16["fp8_cast_time_backward"] == 0


def test_nvfp4_runs_linear_gemms_at_the_measured_fp4_rate_and_keeps_attention_in_bf16(engine):
    # Transformer Engine's NVFP4 recipe: every Linear GEMM in FP4; attention and the LM head
    # in BF16. Azure's cuBLASLt benchmark measures FP4 GEMMs at 2.62x FP8 ones on GB200.
    # Graph-launched (as NVIDIA's NVFP4 recipes run): no block waits for the host's launching.
    base = {**BLACKWELL_64, "hardware.node": "gb200-nvl72", "training.kernel_launch": "graph"}
    fp8 = engine.evaluate(GPT3, {**base, "training.precision": "fp8"})
    fp4 = engine.evaluate(GPT3, {**base, "training.precision": "nvfp4"})
    assert fp4["peak_flops"] == 10000e12 and fp4["fp4_gemm_ratio"] == 2.62
    assert fp4["achievable_flops"] == pytest.approx(2.62 * fp8["achievable_flops"])
    assert fp4["gemm_peak_efficiency"] == pytest.approx(fp8["gemm_peak_efficiency"] * 2.62 / 2)
    assert fp4["attention_peak_flops"] == fp8["attention_peak_flops"] == 2500e12
    assert fp4["logits_achievable_flops"] == fp8["logits_achievable_flops"]
    # Casts: the same tensors as FP8, each read twice (amax first, then the quantization) and
    # written twice in 4 bits plus an E4M3 scale per 16 values (row-wise and transposed).
    assert fp4["fp8_cast_elements_forward"] == fp8["fp8_cast_elements_forward"]
    assert fp4["fp8_cast_bytes_per_element"] == pytest.approx(2 * 2 + 2 * (0.5 + 1 / 16))
    assert fp4["weight_bytes"] == pytest.approx(2 + 0.5 + 1 / 16)
    # Without a measured ratio the datasheet's holds: FP4 at the FP8 share of its own peak.
    sheet = engine.evaluate(GPT3, {**base, "training.precision": "nvfp4",
                                   "hardware.fp4_gemm_ratio": 0})
    assert sheet["gemm_peak_efficiency"] == pytest.approx(fp8["gemm_peak_efficiency"])
    assert fp4["step_time"] < fp8["step_time"]


def test_fp8_casts_of_a_moe_layer_count_every_routed_copy(engine):
    """A MoE layer quantises the input and inner activation of every token copy its experts
    take (TE GroupedLinear), not a dense MLP's worth: top-k copies at the expert width."""
    moe = str(EXAMPLES / "deepseek-v3-h800.yaml")
    r = engine.evaluate(moe, {"training.precision": "fp8"})
    routed, etp, h = r["routed_tokens_per_gpu"] * r["moe_imbalance_factor"], r["expert_tp"], \
        r["hidden"]
    ffn, up, shared, t, tp = (r["expert_ffn_size"], r["expert_up_width"], r["shared_experts"],
                              r["microbatch_tokens"], r["tp"])
    layer_fwd = routed * (etp * h + ffn) + shared * t * (h + ffn / tp)
    layer_bwd = routed * (up + etp * h) + shared * t * (up / tp + h)
    dense_fwd, dense_bwd = t * (h + r["ffn_hidden"] / tp), t * (r["mlp_up_width"] / tp + h)
    share = r["moe_layer_share"]
    assert r["fp8_cast_mlp_elements_forward"] == pytest.approx(
        dense_fwd + share * (layer_fwd - dense_fwd))
    assert r["fp8_cast_mlp_elements_backward"] == pytest.approx(
        dense_bwd + share * (layer_bwd - dense_bwd))
    assert layer_fwd > 2 * dense_fwd  # 8 routed copies outweigh one dense MLP input
    # A dense model keeps the core's count.
    dense = engine.evaluate(GPT3, AT_SCALE)
    assert dense["fp8_cast_mlp_elements_forward"] == pytest.approx(2048 * (12288 + 4 * 12288 / 4))


@pytest.mark.parametrize(("dispatcher", "key", "share", "other"), [
    # AWS EFA: nccl-tests' all-to-all at 0.64 of p6-b300's NICs
    ("alltoall", "hardware.alltoall_network_efficiency", 0.64, "deepep"),
    # FP8-Flow-MoE's RoCE cluster: DeepEP's internode dispatch at about 20 of 50 GB/s
    ("deepep", "hardware.deepep_network_efficiency", 0.4, "alltoall"),
])
def test_a_dispatcher_runs_its_network_leg_at_the_networks_own_benchmark_share(
        engine, dispatcher, key, share, other):
    """Where a network's own benchmark of a dispatcher (nccl-tests' all-to-all for NCCL's,
    DeepEP's internode test for DeepEP's) reaches less of the NIC than its ring collectives,
    that dispatcher pays the measured share on its network leg; the other dispatcher does not
    read the figure, and the default (0) keeps the ring share."""
    moe = str(EXAMPLES / "deepseek-v3-h800.yaml")
    base = {"parallelism.ep": 32, "moe.dispatcher": dispatcher}
    ring = engine.evaluate(moe, base)
    slow = engine.evaluate(moe, {**base, key: share})
    assert ring["ep_network_bandwidth"] == pytest.approx(ring["scaleout_link_bandwidth"])
    assert slow["ep_network_bandwidth"] == pytest.approx(share * slow["scaleout_bandwidth"])
    assert slow["ep_inter_share"] > 0
    network = slow["ep_network_copies_share"] * slow["ep_inter_share"] * slow["ep_dispatch_bytes"]
    nvlink = slow["ep_intra_share"] * slow["ep_dispatch_bytes"] / slow["scaleup_link_bandwidth"]
    assert slow["ep_a2a_time"] == pytest.approx(
        max(nvlink, network / (share * slow["scaleout_bandwidth"])) + slow["scaleout_latency"])
    assert slow["step_time"] > ring["step_time"]
    unread = engine.evaluate(moe, {**base, "moe.dispatcher": other, key: share})
    assert unread["ep_network_bandwidth"] == pytest.approx(unread["scaleout_link_bandwidth"])


def test_a_block_launched_eagerly_waits_for_the_host_where_its_gpu_work_is_shorter(engine):
    """Kernel launches are asynchronous: the host runs ahead while a block's GPU work outlasts its
    launching (host_launch_time for the forward, twice that for the backward's kernels), and the
    GPU waits for the difference where the work is shorter. A fully recomputed forward is launched
    again. A step replayed as a graph (CUDA graphs, an XLA program) launches nothing per block."""
    h = 0.05  # far above any block's work here
    cfg = {"training.host_launch_time": h, "training.recompute": "selective"}
    r = engine.evaluate(GPT3, cfg)
    fwd, bwd = r["layer_forward_time"], r["layer_backward_time"]
    assert fwd < h and bwd < 2 * h and r["full_recompute_share"] == 0
    assert r["dense_host_wait_per_layer"] == pytest.approx((h - fwd) + (2 * h - bwd))
    assert r["host_wait_per_layer"] == pytest.approx(r["dense_host_wait_per_layer"])
    graph = engine.evaluate(GPT3, {**cfg, "training.kernel_launch": "graph"})
    assert graph["dense_host_wait_per_layer"] == 0
    assert r["layer_microbatch_time"] - graph["layer_microbatch_time"] == pytest.approx(
        r["dense_host_wait_per_layer"])
    full = engine.evaluate(GPT3, {**cfg, "training.recompute": "full"})
    assert full["dense_host_wait_per_layer"] == pytest.approx(
        2 * (h - full["layer_forward_time"]) + (2 * h - full["layer_backward_time"]))
    # A launch shorter than the block's work costs nothing: the host keeps ahead.
    quick = engine.evaluate(GPT3, {**cfg, "training.host_launch_time": fwd / 4})
    assert quick["dense_host_wait_per_layer"] == 0


def test_a_moe_layer_that_syncs_with_the_host_makes_the_gpu_wait_for_it(engine):
    """A dropless MoE layer copies its tokens-per-expert counts to the host in its forward
    pass, so the GPU waits for the host to launch the layer's eager part (host_sync_time per
    MoE layer and micro-batch) for as long as that takes beyond the MoE forward work it
    launches (moe_mlp_time); a full recompute runs the forward, and its wait, again. The
    backward pass does not synchronise, but the host starts it with no lead and launches
    about twice the forward's kernels (2 x host_sync_time): the GPU waits for whatever that
    takes beyond the layer's backward work. A sync-free layer (full-iteration CUDA graph) and
    a dense block never wait."""
    moe = str(EXAMPLES / "deepseek-v3-h800.yaml")
    h = 0.05
    synced = engine.evaluate(moe, {"moe.host_sync_time": h, "moe.sync_free": False,
                                   "training.recompute": "selective"})
    free = engine.evaluate(moe, {"moe.host_sync_time": h, "moe.sync_free": True,
                                 "training.recompute": "selective"})
    share, mlp = synced["moe_layer_share"], synced["moe_mlp_time"]
    back = synced["layer_backward_time"]
    assert 0 < share < 1  # DeepSeek-V3's first three layers are dense
    assert 0 < mlp < h and 0 < back < 2 * h
    wait = share * ((h - mlp) + (2 * h - back))
    assert synced["host_wait_per_layer"] == pytest.approx(wait)
    assert free["host_wait_per_layer"] == 0
    assert synced["layer_microbatch_time"] - free["layer_microbatch_time"] == pytest.approx(wait)
    # A full recompute reruns the forward: the layer syncs, and the GPU waits, twice in the
    # forward passes; the backward's wait is the same.
    full = engine.evaluate(moe, {"moe.host_sync_time": h, "moe.sync_free": False,
                                 "training.recompute": "full"})
    assert full["host_wait_per_layer"] == pytest.approx(
        share * (2 * (h - full["moe_mlp_time"]) + (2 * h - full["layer_backward_time"])))
    # A host faster than the GPU work it launches hides behind it, forward and backward.
    hidden = engine.evaluate(moe, {"moe.host_sync_time": mlp / 2, "moe.sync_free": False})
    assert mlp < hidden["layer_backward_time"]
    assert hidden["host_wait_per_layer"] == 0
    # Between the two, only the backward's launching shows: a host slower than the MoE
    # forward work but faster than half the layer's backward work waits in the forward only.
    hm = (mlp + back / 2) / 2
    fwd_only = engine.evaluate(moe, {"moe.host_sync_time": hm, "moe.sync_free": False,
                                     "training.recompute": "selective"})
    assert mlp < hm < back / 2
    assert fwd_only["host_wait_per_layer"] == pytest.approx(share * (hm - mlp))
    # Every micro-batch pays it on every MoE layer of the slowest stage.
    one_stage = {"moe.host_sync_time": h, "parallelism.pp": 1, "parallelism.dp": 2048,
                 "parallelism.schedule": "1f1b", "parallelism.first_stage_layers": 0,
                 "training.global_batch": 16384, "parallelism.last_stage_layers": 0,
                 "training.recompute": "selective"}
    a = engine.evaluate(moe, {**one_stage, "moe.sync_free": False})
    b = engine.evaluate(moe, {**one_stage, "moe.sync_free": True})
    assert a["stage_microbatch_compute_time"] - b["stage_microbatch_compute_time"] == \
        pytest.approx(a["moe_layers"] * ((h - a["moe_mlp_time"])
                                         + (2 * h - a["layer_backward_time"])))
    # A dense model has no such wait, whatever the MoE inputs say.
    dense = engine.evaluate(GPT3, {**AT_SCALE, "moe.host_sync_time": h})
    assert dense["host_wait_per_layer"] == 0


def test_moe_layers_that_keep_their_counts_on_the_gpu_wait_only_as_a_dense_block_does(engine):
    """torchtitan's local dispatcher (ep 1) feeds torch._grouped_mm device offsets, so no MoE
    layer copies its counts to the host (moe.counts_to_host false): no layer pays the MoE
    host figure, and every block, MoE or dense, waits as an eagerly launched dense block does
    (dense_host_wait_per_layer), which a whole-step graph (moe.sync_free) still removes."""
    moe = str(EXAMPLES / "deepseek-v3-h800.yaml")
    h = 0.05
    base = {"moe.host_sync_time": h, "moe.sync_free": False, "training.recompute": "selective",
            "training.host_launch_time": 0.02}
    synced = engine.evaluate(moe, base)
    local = engine.evaluate(moe, {**base, "moe.counts_to_host": False})
    dense_wait = local["dense_host_wait_per_layer"]
    assert dense_wait > 0  # a 20 ms launch outruns the block's GPU work
    assert local["host_wait_per_layer"] == pytest.approx(dense_wait)
    share = synced["moe_layer_share"]
    assert synced["host_wait_per_layer"] == pytest.approx(
        share * ((h - synced["moe_mlp_time"]) + (2 * h - synced["layer_backward_time"]))
        + (1 - share) * dense_wait)
    assert local["host_wait_per_layer"] < synced["host_wait_per_layer"]
    graph = engine.evaluate(moe, {**base, "moe.counts_to_host": False, "moe.sync_free": True})
    assert graph["host_wait_per_layer"] == 0


def test_pytorch_grouped_gemm_runs_at_the_parts_measured_rate(engine):
    """torchtitan's experts run torch._grouped_mm, which torchao measures at 0.37 of a B200's
    BF16 peak on large expert GEMMs (bench/grouped_mm_torch.py); Transformer Engine's grouped
    GEMM runs at the part's dense figure. Both keep the small-shape factor; FP8 and a part
    without the measurement keep the dense figure."""
    moe = str(EXAMPLES / "gpt4-like-moe.yaml")
    on_b200 = {"hardware.node": "b200", "training.precision": "bf16"}
    te = engine.evaluate(moe, {**on_b200, "moe.grouped_gemm_kernel": "te"})
    torch = engine.evaluate(moe, {**on_b200, "moe.grouped_gemm_kernel": "torch"})
    assert torch["grouped_mm_efficiency_torch"] == pytest.approx(0.37)
    shape = te["grouped_gemm_efficiency"] / te["gemm_peak_efficiency"]
    assert 0.5 < shape < 1
    assert torch["grouped_gemm_efficiency"] == pytest.approx(0.37 * shape)
    assert torch["expert_gemm_time"] / te["expert_gemm_time"] == pytest.approx(
        te["gemm_peak_efficiency"] / 0.37)
    # The dense GEMMs do not change.
    assert torch["gemm_qkv_time"] == pytest.approx(te["gemm_qkv_time"])
    # GB300 sustains its measured tensor-rate ratio over the B200 figure.
    gb300 = engine.evaluate(moe, {"hardware.node": "gb300-nvl72", "training.precision": "bf16",
                                  "moe.grouped_gemm_kernel": "torch"})
    assert gb300["grouped_gemm_efficiency"] / gb300["grouped_gemm_shape_factor"] == pytest.approx(
        0.37 * 1.14)
    # FP8 grouped GEMMs are not torch._grouped_mm's BF16 kernel; H100 has no measurement.
    for other in ({**on_b200, "training.precision": "fp8"},
                  {"hardware.node": "h100-sxm", "training.precision": "bf16"}):
        a = engine.evaluate(moe, {**other, "moe.grouped_gemm_kernel": "te"})
        b = engine.evaluate(moe, {**other, "moe.grouped_gemm_kernel": "torch"})
        assert b["grouped_gemm_efficiency"] == pytest.approx(a["grouped_gemm_efficiency"])


def test_eager_pytorch_pays_for_each_unfused_operator(engine):
    """torchtitan without torch.compile runs its RMSNorm and RoPE op by op in float32 and
    SwiGLU as silu then multiply; the model counts each operator's HBM traffic (measured:
    compile is 14% faster on Llama 3.1 8B, which this count reproduces to 2 points)."""
    llama = str(EXAMPLES / "llama3-70b.yaml")
    fused = engine.evaluate(llama)
    eager = engine.evaluate(llama, {"training.fused_elementwise": False})
    assert fused["eager_elementwise_bytes_per_layer"] == 0
    t, h, tp = eager["microbatch_tokens"], eager["hidden"], eager["tp"]
    sp = eager["sp_degree"]
    norms = 2 * (2 * 2 + 7 * 4) * h / sp  # x.float, pow, mean, mul, type_as, * weight
    rope = 4 * 4 * (eager["q_width"] + eager["kv_heads"] * eager["qk_head_size"]) / tp
    swiglu = 2 * 2 * eager["ffn_hidden"] / tp  # silu's extra read and write
    assert eager["eager_elementwise_bytes_per_layer"] == pytest.approx(t * (norms + rope + swiglu))
    assert eager["step_time"] > fused["step_time"]


def test_rope_alone_runs_unfused_where_the_stack_cannot_fuse_it(engine):
    """Megatron-Core fuses RoPE only for plain RoPE: a YaRN model (gpt-oss-120b through
    Megatron-Bridge) applies it op by op while its norms and SwiGLU stay fused, so only
    the RoPE passes are added; in an eager stack they are counted once, not twice."""
    llama = str(EXAMPLES / "llama3-70b.yaml")
    fused = engine.evaluate(llama)
    rope_only = engine.evaluate(llama, {"training.fused_rope": False})
    t, tp = rope_only["microbatch_tokens"], rope_only["tp"]
    rope = 4 * 4 * (rope_only["q_width"] + rope_only["kv_heads"] * rope_only["qk_head_size"]) / tp
    assert fused["eager_elementwise_bytes_per_layer"] == 0
    assert rope_only["eager_elementwise_bytes_per_layer"] == pytest.approx(t * rope)
    assert rope_only["step_time"] > fused["step_time"]
    eager = engine.evaluate(llama, {"training.fused_elementwise": False})
    both = engine.evaluate(llama, {"training.fused_elementwise": False,
                                   "training.fused_rope": False})
    assert both["eager_elementwise_bytes_per_layer"] == eager["eager_elementwise_bytes_per_layer"]


def test_auto_recompute_does_not_redo_a_fused_attention_it_gains_nothing_from(engine):
    """Under a fused attention kernel the scores are never stored, so recomputing the attention
    core saves no memory: `auto` (what a run that leaves recompute out is taken to do) only
    recomputes whole layers, and the attention core only for an unfused kernel."""
    r = engine.evaluate(GPT3, {"training.recompute": "auto"})
    assert r["act_attention_scores"] == 0
    assert r["layer_recompute_time"] == pytest.approx(
        r["full_recompute_share"] * r["layer_forward_time"])
    unfused = engine.evaluate(GPT3, {"training.recompute": "auto",
                                     "training.flash_attention": False})
    share = unfused["full_recompute_share"]
    assert unfused["layer_recompute_time"] == pytest.approx(
        share * unfused["layer_forward_time"] + (1 - share) * unfused["attention_core_time"])


def test_document_masking_attends_over_the_size_biased_document_length(engine):
    full = engine.evaluate(GPT3)
    assert full["attention_span"] == 2048
    masked = engine.evaluate(GPT3, {"training.document_length": 512})  # cv 1: 2 x mean
    assert masked["attention_span"] == 1024
    assert masked["attention_core_flops"] == pytest.approx(full["attention_core_flops"] / 2)
    even = engine.evaluate(GPT3, {"training.document_length": 512,
                                  "training.document_length_cv": 0})
    assert even["attention_span"] == 512
    long_docs = engine.evaluate(GPT3, {"training.document_length": 1e6})
    assert long_docs["attention_span"] == 2048  # never beyond the sequence


def test_all_gather_context_parallelism_moves_the_ring_bytes_and_exposes_them(engine):
    sets = {"parallelism.cp": 2, "parallelism.dp": 8, "training.seq_len": 8192}
    ring = engine.evaluate(GPT3, sets)
    gather = engine.evaluate(GPT3, {**sets, "parallelism.cp_comm": "allgather"})
    assert gather["cp_comm_volume"] == ring["cp_comm_volume"]
    assert gather["cp_comm_exposed_per_layer"] == gather["cp_comm_per_layer"]
    expected = 3 * ((2 - 1) * gather["cp_chunk_bytes"] / gather["cp_bandwidth"]
                    + gather["collective_base_latency"] + (2 - 1) * gather["cp_latency"])
    assert gather["cp_comm_per_layer"] == pytest.approx(expected)


def test_goodput_makes_training_time_a_wall_clock_forecast(engine):
    r = engine.evaluate(GPT3)
    share = 1 / (1 + 1024 * 2.195e-5 * 1002 / 3600)
    assert r["goodput_share"] == pytest.approx(share)
    assert r["training_time"] == pytest.approx(r["steady_training_time"] / share)
    assert r["wall_time_per_step"] == pytest.approx(r["step_time"] / share)
    llama3_scale = engine.evaluate(GPT3, {**AT_SCALE, "hardware.gpus": 16384,
                                          "parallelism.dp": 512, "training.global_batch": 4096})
    assert llama3_scale["goodput_share"] == pytest.approx(0.909, abs=0.002)  # ">90%"
    given = engine.evaluate(GPT3, {"training.goodput": 0.8})
    assert given["training_time"] == pytest.approx(given["steady_training_time"] / 0.8)


def test_deepspeed_style_zero3_pays_a_latency_per_parameter_tensor(engine):
    sets = {"parallelism.zero": 3, "parallelism.tp": 1, "parallelism.pp": 1,
            "parallelism.dp": 1024, "training.global_batch": 2048}
    layer = engine.evaluate(GPT3, sets)
    tensor = engine.evaluate(GPT3, {**sets, "parallelism.zero3_gather_unit": "tensor"})
    assert layer["zero3_collectives_per_layer"] == 1
    # GPT-3: QKV, out-proj, fc1, fc2 weights and biases, two LayerNorms' scale and bias.
    assert tensor["zero3_collectives_per_layer"] == tensor["param_tensors_per_layer"] == 12
    extra = (12 - 1) * tensor["dp_ring_latency"]
    assert tensor["zero3_layer_gather_time"] - layer["zero3_layer_gather_time"] == \
        pytest.approx(extra)


def test_tensor_parallel_traffic_hidden_behind_gemms_costs_the_overlap_slowdown(engine):
    r = engine.evaluate(GPT3, {"parallelism.tp_comm_overlap": 1})
    assert r["tp_comm_unhidden_per_layer"] == 0
    assert r["tp_comm_exposed_per_layer"] == pytest.approx(
        r["overlap_slowdown"] * r["tp_comm_per_layer"])


def test_fsdp_under_pipeline_parallelism_syncs_once_per_step(engine):
    """With pp > 1 a stage keeps its FSDP weights gathered and its gradients unreduced until
    the last micro-batch (PyTorch pipelining's backward_maybe_with_nosync), so ZeRO-3 gathers
    once and reduce-scatters once per step; without pp, every micro-batch does both."""
    sets = {"parallelism.zero": 3, "parallelism.pp": 8, "parallelism.tp": 8,
            "parallelism.dp": 16}
    piped = engine.evaluate(GPT3, sets)
    assert piped["zero3_syncs_per_step"] == 1
    assert piped["zero3_gather_time"] == pytest.approx(
        piped["layers_per_stage"] * piped["zero3_layer_gather_time"])
    assert piped["dp_comm_time"] == pytest.approx(
        piped["dp_grad_reduce_time"] + piped["zero3_gather_time"])
    flat = engine.evaluate(GPT3, {**sets, "parallelism.pp": 1, "parallelism.dp": 128})
    m = flat["microbatches"]
    assert flat["zero3_syncs_per_step"] == m
    assert flat["zero3_gather_time"] == pytest.approx(
        2 * m * flat["layers_per_stage"] * flat["zero3_layer_gather_time"])


def test_fsdp_that_reshards_after_forward_under_pipelining_gathers_every_micro_batch(engine):
    """FSDP2's default reshard_after_forward=True under PyTorch pipelining: each micro-batch's
    backward gathers the stage's weights again (and leaves them for the next forward); the
    gradients are still reduce-scattered once per step."""
    sets = {"parallelism.zero": 3, "parallelism.pp": 8, "parallelism.tp": 8,
            "parallelism.dp": 16}
    kept = engine.evaluate(GPT3, sets)
    freed = engine.evaluate(GPT3, {**sets, "parallelism.fsdp_pp_reshard": True})
    m = freed["microbatches"]
    assert m > 1 and kept["zero3_gathers_per_step"] == 1 and freed["zero3_gathers_per_step"] == m
    assert freed["zero3_gather_time"] == pytest.approx(m * kept["zero3_gather_time"])
    assert freed["dp_comm_time"] == pytest.approx(
        kept["dp_grad_reduce_time"] + m * kept["zero3_gather_time"])
    assert freed["dp_comm_volume"] > kept["dp_comm_volume"]
    assert freed["step_time"] >= kept["step_time"]
    # Without pipeline parallelism FSDP gathers before every forward and backward either way.
    flat = {**sets, "parallelism.pp": 1, "parallelism.dp": 128}
    assert engine.evaluate(GPT3, {**flat, "parallelism.fsdp_pp_reshard": True})["step_time"] \
        == pytest.approx(engine.evaluate(GPT3, flat)["step_time"])


def test_a_part_that_sustains_a_higher_tensor_rate_scales_its_family_s_gemm_figure(engine):
    # GB300 and GB200 share datasheet peaks (5,000 TFLOP/s FP8 dense); Azure's cuBLASLt
    # benchmark measures GB300 at 1.14x GB200. Their fitted families differ (Blackwell and
    # Blackwell Ultra), so the same figures are set on both to see the ratio alone.
    fp8 = {**BLACKWELL_64, "training.precision": "fp8", "hardware.gemm_efficiency": 0.5,
           "hardware.attention_efficiency": 0.4}
    gb200 = engine.evaluate(GPT3, {**fp8, "hardware.node": "gb200-nvl72"})
    gb300 = engine.evaluate(GPT3, {**fp8, "hardware.node": "gb300-nvl72"})
    assert gb200["tensor_rate_ratio"] == 1 and gb300["tensor_rate_ratio"] == 1.14
    assert gb300["gemm_efficiency"] == gb200["gemm_efficiency"]
    assert gb300["achievable_flops"] == pytest.approx(5000e12 * gb200["gemm_efficiency"] * 1.14)
    assert gb200["achievable_flops"] == pytest.approx(5000e12 * gb200["gemm_efficiency"])
    # The LM head stays in BF16 under FP8 recipes, at the same sustained-rate gain.
    bf16_rate = 2500e12 * gb200["gemm_efficiency"] * 1.14
    assert gb300["logits_achievable_flops"] == pytest.approx(bf16_rate)
    # Attention is not a GEMM: the family's figure, scaled by cuDNN's measured GB300 / GB200
    # attention speed (1.12), not by the GEMM ratio.
    assert gb300["attention_efficiency"] == gb200["attention_efficiency"]
    assert gb300["attention_kernel_efficiency"] == pytest.approx(
        gb200["attention_kernel_efficiency"] * 1.12)
    # The product never claims more than the peak.
    capped = engine.evaluate(GPT3, {**fp8, "hardware.node": "gb300-nvl72",
                                    "hardware.gemm_efficiency": 0.95})
    assert capped["gemm_peak_efficiency"] == 1


def test_jax_save_qkv_proj_recomputes_only_what_the_backward_reads(engine):
    # MaxText's remat policy keeps Q, K and V; JAX dead-code-eliminates the recomputation down
    # to what the backward needs, so the MLP's output projection is not run again.
    llama = str(EXAMPLES / "llama3-70b.yaml")
    r = engine.evaluate(llama, {"training.recompute": "save_qkv_proj"})
    full = engine.evaluate(llama, {"training.recompute": "full"})
    assert r["layer_recompute_time"] == pytest.approx(
        r["layer_forward_time"] - r["gemm_qkv_time"] - r["gemm_mlp_down_time"])
    assert r["layer_recompute_time"] < full["layer_recompute_time"] == full["layer_forward_time"]
    # It keeps the layer input and the Q, K, V projections (one micro-batch's tokens each).
    tokens, tp = r["microbatch_tokens"], r["tp"]
    kept = tokens * r["hidden"] * 2 / r["sp_degree"] + tokens * 2 * r["qkv_width"] / tp
    assert r["act_per_layer"] == pytest.approx(kept)
    # Under TP with SP the recomputed forward repeats two collectives (the attention output's
    # reduce-scatter and the MLP input's all-gather), not full recompute's four.
    assert r["recompute_tp_collectives"] == 2 and full["recompute_tp_collectives"] == 4
    # torchtitan's per-op policy saves reduce-scatter outputs but not all-gather outputs, so
    # the two input all-gathers of the matmuls it recomputes run again.
    op = engine.evaluate(llama, {"training.recompute": "op"})
    assert op["recompute_tp_collectives"] == 2
    assert op["tp_comm_per_layer"] == pytest.approx(10 * op["tp_collective_time"])
    # Hardware FLOPs: the forward without the QKV and MLP output projections, per layer.
    per_layer = 2 * (r["attention_out_params"] + r["hidden"] * r["mlp_up_width"]) \
        + 2 * r["attention_span"] * (r["q_width"] + r["value_width"])
    assert r["recompute_flops_per_token"] == pytest.approx(r["layers"] * per_layer, rel=1e-9)
    # A MoE layer: the experts' down projection is the part not recomputed, and the tokens
    # are dispatched again (their combine follows the skipped projection).
    moe = engine.evaluate(str(EXAMPLES / "deepseek-v3-h800.yaml"),
                          {"training.recompute": "save_qkv_proj"})
    down = (moe["expert_gemm_time"] + moe["shared_expert_time"]) * moe["expert_ffn_size"] \
        / (moe["expert_up_width"] + moe["expert_ffn_size"])
    share = moe["moe_layer_share"]
    assert moe["mlp_output_projection_time"] == pytest.approx(
        moe["gemm_mlp_down_time"] + share * (down - moe["gemm_mlp_down_time"]))
    assert moe["ep_a2a_count"] == 5


def test_jax_save_dots_keeps_every_matmul_output_and_recomputes_the_elementwise_work(engine):
    # MaxText's minimal_with_context (once minimal_flash) saves every projection's output and
    # the attention context; the backward rebuilds only normalisations, RoPE and activations.
    llama = str(EXAMPLES / "llama3-70b.yaml")
    r = engine.evaluate(llama, {"training.recompute": "save_dots"})
    none = engine.evaluate(llama, {"training.recompute": "none"})
    tokens, tp, sp = r["microbatch_tokens"], r["tp"], r["sp_degree"]
    # Kept, 16 bits each: the layer input and the attention output projection (hidden wide),
    # Q, K, V, the context and the MLP's up and gate outputs, plus fp32 softmax statistics.
    kept = tokens * 2 * (2 * r["hidden"] / sp
                         + (r["qkv_width"] + r["value_width"] + r["mlp_up_width"]) / tp)
    assert r["act_per_layer"] == pytest.approx(kept + r["act_attention_stats"])
    assert r["act_per_layer"] < none["act_per_layer"]
    # Only the element-wise work runs again: no FLOPs, and no fully rebuilt layer in memory.
    assert r["layer_recompute_time"] == pytest.approx(r["elementwise_time_per_layer"])
    assert r["layer_recompute_time"] > 0
    assert r["recompute_flops_per_token"] == 0 and r["recompute_working_memory"] == 0
    # Under TP with SP the weight gradients read the normalised inputs, which only the two
    # input all-gathers rebuild.
    assert r["recompute_tp_collectives"] == 2 and none["recompute_tp_collectives"] == 0


def test_jax_save_weight_dots_recomputes_the_attention_core_too(engine):
    # JAX's checkpoint_dots_with_no_batch_dims (Pax SAVE_DOT_WITH_NO_BATCH_DIM, MaxText minimal)
    # saves only the weight matmuls' outputs: the attention core, a batched dot, runs again.
    llama = str(EXAMPLES / "llama3-70b.yaml")
    dots = engine.evaluate(llama, {"training.recompute": "save_dots"})
    weight = engine.evaluate(llama, {"training.recompute": "save_weight_dots"})
    context = weight["microbatch_tokens"] * weight["activation_bytes"] * weight["value_width"] \
        / weight["tp"]
    assert dots["act_per_layer"] - weight["act_per_layer"] == pytest.approx(
        context + dots["act_attention_stats"])
    assert weight["layer_recompute_time"] == pytest.approx(
        weight["elementwise_time_per_layer"] + weight["attention_core_time"])
    selective = engine.evaluate(llama, {"training.recompute": "selective"})
    assert weight["recompute_flops_per_token"] == pytest.approx(
        selective["recompute_flops_per_token"])
    assert weight["recompute_tp_collectives"] == 2


def test_jax_full_recompute_skips_what_no_gradient_reads(engine):
    # jax.checkpoint's partial evaluation dead-code-eliminates the recomputed forward: the
    # MLP's output projection feeds only the block's output, which no gradient of the block
    # reads, so a JAX stack recomputing every layer skips it (and its reduce-scatter).
    torch = engine.evaluate(GPT3, {"training.recompute": "full"})
    jax = engine.evaluate(GPT3, {"training.recompute": "full", "training.remat_dce": True})
    assert torch["layer_recompute_time"] == pytest.approx(torch["layer_forward_time"])
    assert jax["layer_recompute_time"] == pytest.approx(
        jax["layer_forward_time"] - jax["mlp_output_projection_time"])
    assert (torch["recompute_flops_per_token"] - jax["recompute_flops_per_token"]
            == pytest.approx(jax["layers"] * jax["mlp_output_projection_flops_per_token"]))
    assert torch["recompute_tp_collectives"] == 4 and jax["recompute_tp_collectives"] == 3
    # Without recompute there is nothing to skip.
    none = engine.evaluate(GPT3, {"training.recompute": "none", "training.remat_dce": True})
    assert none["layer_recompute_time"] == 0


def test_gpt_oss_experts_pay_their_eager_clamp_and_bias_passes(engine):
    # Megatron-Core's experts clamp the GLU input with chunk / clamp / cat before the fused GLU
    # kernel and add the down projection's bias in float32 after the grouped GEMM; Transformer
    # Engine's fused expert ops (and the sync-free path built on them) do neither on their own.
    moe = str(EXAMPLES / "gpt4-like-moe.yaml")
    plain = engine.evaluate(moe)
    oss = {"moe.glu_clamp": True, "moe.expert_bias": True}
    r = engine.evaluate(moe, oss)
    a, f = r["activation_bytes"], r["fp32_bytes"]
    assert (a, f) == (2, 4)
    # per routed copy: clamp 4a forward + 3a backward over the up-projection's output,
    # bias 6f + 2a forward and 4f + 2a backward over the expert output
    per_token = 7 * a * r["expert_up_width"] / r["expert_tp"] + (10 * f + 4 * a) * r["hidden"]
    assert r["expert_epilogue_bytes_per_token"] == pytest.approx(per_token)
    expected = (r["routed_tokens_per_gpu"] * r["moe_imbalance_factor"] * per_token
                / r["hbm_bandwidth"] * r["moe_layer_share"])
    assert r["unfused_epilogue_per_layer"] == pytest.approx(expected) and expected > 0
    assert r["layer_microbatch_time"] - plain["layer_microbatch_time"] == pytest.approx(expected)
    # the clamp keeps its input for the backward: one more copy of the up-projection's output
    kept = (r["routed_tokens_per_gpu"] * r["moe_imbalance_factor"] * a * r["expert_up_width"]
            / r["expert_tp"])
    assert r["moe_mlp_activation"] - plain["moe_mlp_activation"] == pytest.approx(kept)
    # a recomputed activation runs the clamp's forward again but does not keep its input
    rc = engine.evaluate(moe, {**oss, "training.recompute_moe_act": True,
                               "training.recompute": "selective"})
    assert rc["expert_epilogue_bytes_per_token"] == pytest.approx(
        per_token + 4 * a * r["expert_up_width"] / r["expert_tp"])
    # fused expert ops, or the sync-free path that uses them: no separate passes
    for fused in ({"moe.fused_expert_ops": True}, {"moe.sync_free": True}):
        assert engine.evaluate(moe, {**oss, **fused})["unfused_epilogue_per_layer"] == 0
    assert plain["expert_epilogue_bytes_per_token"] == 0
    assert plain["unfused_epilogue_per_layer"] == 0


def test_one_hot_dispatch_costs_the_square_of_its_group(engine):
    """GShard's one-hot dispatch and combine (DeepSpeed-MoE's native layer, MaxText's
    dense_matmul) are two GEMMs over every local token x every slot of its group's
    [experts x capacity] mask x the model width: 2 x 2 x tokens x (top_k x capacity factor x
    group tokens) x hidden FLOPs a MoE layer's forward, so the cost grows with the group.
    By hand: a micro-batch of 2 x 2,048 tokens, 512 a GPU under sequence parallelism 8,
    top-2 at capacity 1.25, width 4,096."""
    moe = str(EXAMPLES / "gpt4-like-moe.yaml")
    base = {"training.micro_batch": 2, "training.seq_len": 2048, "model.hidden": 4096,
            "model.heads": 32, "moe.top_k": 2, "moe.capacity_factor": 1.25}
    plain = engine.evaluate(moe, base)
    mb = engine.evaluate(moe, {**base, "moe.onehot_dispatch": "microbatch"})
    seq = engine.evaluate(moe, {**base, "moe.onehot_dispatch": "sequence"})
    assert plain["onehot_dispatch_flops"] == 0 and mb["moe_local_tokens"] == 512
    # DeepSpeed's group is the GPU's own tokens; MaxText's one (unsharded) sequence
    assert mb["onehot_group_tokens"] == 512 and seq["onehot_group_tokens"] == 2048
    assert mb["onehot_capacity_slots"] == pytest.approx(2 * 512 * 1.25)
    assert mb["onehot_dispatch_flops"] == pytest.approx(2 * 2 * 512 * 1280 * 4096)
    assert seq["onehot_dispatch_flops"] == pytest.approx(4 * mb["onehot_dispatch_flops"])
    assert mb["onehot_dispatch_time"] == pytest.approx(
        mb["onehot_dispatch_flops"] / mb["achievable_flops"])
    assert mb["moe_mlp_time"] - plain["moe_mlp_time"] == pytest.approx(mb["onehot_dispatch_time"])
    assert seq["step_time"] > mb["step_time"] > plain["step_time"]
    # dropless: the busiest expert's load sizes the buffers
    dropless = engine.evaluate(moe, {**base, "moe.onehot_dispatch": "microbatch",
                                     "moe.capacity_factor": 0, "moe.load_imbalance": 1.5})
    assert dropless["onehot_capacity_slots"] == pytest.approx(2 * 512 * 1.5)


def test_consecutive_routing_sends_a_token_across_the_network_once(engine):
    # NeMo AutoModel's FakeBalancedGate gives token t the experts t*k ... t*k + k - 1: on
    # DeepSeek-V3 with ep 64 over 8 nodes (32 experts a node) its 8 experts share one node.
    base = {"parallelism.ep": 64, "parallelism.tp": 1, "parallelism.pp": 16,
            "parallelism.dp": 128, "moe.max_nodes_per_token": 0, "moe.dispatcher": "deepep"}
    ds = str(EXAMPLES / "deepseek-v3-h800.yaml")
    learned = engine.evaluate(ds, base)
    neighbours = engine.evaluate(ds, {**base, "moe.routing": "consecutive"})
    domains = learned["ep_domains"]
    assert domains == 8
    assert learned["ep_remote_domains_per_token"] == pytest.approx(7 * (1 - (7 / 8) ** 8))
    assert neighbours["ep_remote_domains_per_token"] == pytest.approx(1 * 7 / 8)
    # DeepEP sends one network copy per remote node: 7/8 of a copy against 8 * 7/8 routed.
    assert neighbours["ep_network_copies_share"] == pytest.approx((7 / 8) / (8 * 7 / 8))
    assert neighbours["ep_a2a_time"] < learned["ep_a2a_time"]
    # Without per-node forwarding every remote copy crosses the network either way.
    plain = {**base, "moe.dispatcher": "alltoall"}
    assert engine.evaluate(ds, {**plain, "moe.routing": "consecutive"})["ep_a2a_time"] \
        == pytest.approx(engine.evaluate(ds, plain)["ep_a2a_time"])


def test_first_flashattention_runs_at_half_flashattention2s_speed(engine):
    # Dao 2023 (FlashAttention-2): around 2x the first FlashAttention's speed on A100.
    a100 = {"hardware.node": "a100-sxm4-80gb"}
    fa2 = engine.evaluate(GPT3, a100)
    fa1 = engine.evaluate(GPT3, {**a100, "training.attention_kernel": "fa1"})
    assert fa1["attention_kernel_efficiency"] == pytest.approx(
        fa2["attention_kernel_efficiency"] / 2)
    assert fa1["attention_core_time"] == pytest.approx(2 * fa2["attention_core_time"])
    # Only attention slows: the GEMMs are the same kernels.
    assert fa1["gemm_time_per_layer"] == pytest.approx(fa2["gemm_time_per_layer"])
    assert fa1["step_time"] > fa2["step_time"]


def test_attention_runs_slower_per_flop_on_heads_narrower_than_128(engine):
    # FlashAttention-3's forward-speed figures on H100: head dim 64 runs at 0.874 of head dim
    # 128 with FlashAttention-2 and about 0.714 with FlashAttention-3 / cuDNN.
    h100 = {"hardware.node": "h100-sxm"}
    wide = engine.evaluate(GPT3, h100)  # 12288 / 96 heads = 128 wide
    narrow = engine.evaluate(GPT3, {**h100, "model.head_dim": 64})
    assert wide["qk_head_size"] == 128 and narrow["qk_head_size"] == 64
    assert wide["attention_kernel_efficiency"] == pytest.approx(wide["attention_efficiency"])
    assert narrow["attention_kernel_efficiency"] == pytest.approx(
        narrow["attention_efficiency"] * 0.5 ** 0.19)
    fa3 = engine.evaluate(GPT3, {**h100, "model.head_dim": 64, "training.attention_kernel": "fa3"})
    assert fa3["attention_kernel_efficiency"] == pytest.approx(
        fa3["attention_efficiency_fa3"] * 0.5 ** 0.49)
    assert 0.5 ** 0.19 == pytest.approx(0.874, abs=0.005)
    assert 0.5 ** 0.49 == pytest.approx(0.714, abs=0.005)
    # Wider heads keep the figure (the benchmarks disagree above 128).
    assert engine.evaluate(GPT3, {**h100, "model.head_dim": 256})["attention_kernel_efficiency"] \
        == pytest.approx(wide["attention_efficiency"])


def test_fused_attention_pays_a_fixed_cost_per_query_row_and_kernel_call(engine):
    # The kernels' benchmarks: time = c x (keys attended + k) per query row, k = 267 keys for
    # FlashAttention-2 on H100 and 630 for cuDNN's fused attention (the FA3 class). GPT-3 at
    # 2,048 tokens attends to 1,024 keys per row on average (causal).
    h100 = {"hardware.node": "h100-sxm"}
    base = engine.evaluate(GPT3, h100)
    assert base["attention_kernel_row_overhead"] == 267 and base["attention_kernel_calls"] == 1
    free = engine.evaluate(GPT3, {**h100, "hardware.attention_row_overhead": 0})
    assert base["attention_core_time"] == pytest.approx(
        free["attention_core_time"] * (1024 + 267) / 1024)
    fa3 = engine.evaluate(GPT3, {**h100, "training.attention_kernel": "fa3"})
    assert fa3["attention_kernel_row_overhead"] == 630
    h100 = {**h100, "training.attention_kernel": "fa3"}
    # A 128-token sliding window: each row attends to about 128 keys, so the row cost is most
    # of the kernel's time (cuDNN's gpt-oss benchmark: 6-7% of the peak on GB200).
    window = engine.evaluate(GPT3, {**h100, "model.sliding_window": 128,
                                    "model.full_attention_every": 0})
    assert window["attention_span"] == pytest.approx(2 * 128 - 128 ** 2 / 2048)
    flat = window["attention_core_flops"] / 2 / (window["attention_peak_flops"]
                                                * window["attention_kernel_efficiency"])
    assert window["attention_core_time"] == pytest.approx(
        flat * (window["attention_span"] / 2 + 630) / (window["attention_span"] / 2))
    # Ring context parallelism (load-balanced 2 x cp chunks) calls the kernel once per ring step
    # a row's chunk meets: (3 cp + 1) / 4 calls on average; all-gather and all-to-all once.
    ring = engine.evaluate(GPT3, {**h100, "parallelism.cp": 4, "parallelism.dp": 4,
                                  "training.seq_len": 8192})
    assert ring["attention_kernel_calls"] == pytest.approx(13 / 4)
    flat = ring["attention_core_flops"] / 2 / (ring["attention_peak_flops"]
                                              * ring["attention_kernel_efficiency"])
    assert ring["attention_core_time"] == pytest.approx(flat * (4096 + 630 * 13 / 4) / 4096)
    gather = engine.evaluate(GPT3, {**h100, "parallelism.cp": 4, "parallelism.dp": 4,
                                    "training.seq_len": 8192, "parallelism.cp_comm": "allgather"})
    assert gather["attention_kernel_calls"] == 1


def test_nvlink_sharp_speeds_all_reduces_inside_an_nvswitch_domain_only(engine):
    # NCCL reduces in the NVSwitch (NVLS) for all-reduce only: ~480 GB/s bus bandwidth on 8
    # H100 against 370 for rings, no gain on 2-4 GPUs (NVIDIA/nccl issues 1442, 1455).
    h100 = {"hardware.node": "h100-sxm", "parallelism.sp": False}
    ring = engine.evaluate(GPT3, {**h100, "hardware.nvls_allreduce_speedup": 1})
    nvls = engine.evaluate(GPT3, h100)
    assert nvls["nvls_allreduce_speedup"] == 1.30 and nvls["tp_allreduce_speedup"] == 1.30
    latency = (8 - 1) * nvls["tp_latency"]
    assert nvls["tp_collective_time"] - latency == pytest.approx(
        (ring["tp_collective_time"] - latency) / 1.30)
    # Sequence parallelism turns the all-reduces into reduce-scatters and all-gathers: rings.
    assert engine.evaluate(GPT3, {"hardware.node": "h100-sxm"})["tp_allreduce_speedup"] == 1
    # Four GPUs gain nothing (the gain grows linearly from 4 to 8).
    tp4 = {**h100, "parallelism.tp": 4, "parallelism.dp": 32}
    assert engine.evaluate(GPT3, tp4)["tp_allreduce_speedup"] == 1
    # A100's NVSwitch has no NVLS.
    assert engine.evaluate(GPT3, {**h100, "hardware.node": "a100-sxm4-80gb"})[
        "tp_allreduce_speedup"] == 1
    # A ZeRO-0 data-parallel all-reduce inside the domain gains too; across nodes it does not.
    small = {"hardware.node": "h100-sxm", "hardware.gpus": 8, "parallelism.tp": 1,
             "parallelism.pp": 1, "parallelism.dp": 8, "parallelism.zero": 0,
             "model.layers": 4, "training.global_batch": 64}
    assert engine.evaluate(GPT3, small)["dp_allreduce_speedup"] == 1.30
    assert engine.evaluate(GPT3, {**small, "hardware.gpus": 16, "parallelism.dp": 16,
                                  "training.global_batch": 128})["dp_allreduce_speedup"] == 1


def test_a_pipeline_fills_and_drains_through_the_other_stages_not_the_slowest(engine):
    # 1F1B with unequal stages: a step is (m - 1) x the slowest stage + every stage once (the
    # first micro-batch's trip forward and the last one's back), so the bubble is the other
    # stages' time. Two stages, 40 and 56 blocks, the LM head on the second.
    sets = {"parallelism.pp": 2, "parallelism.dp": 64, "parallelism.first_stage_layers": 40,
            "parallelism.last_stage_layers": 56}
    r = engine.evaluate(GPT3, sets)
    block = r["layer_microbatch_time"]
    assert r["stage_microbatch_compute_time"] == pytest.approx(56 * block + r["logits_time"])
    assert r["pipeline_bubble_time"] == pytest.approx(40 * block)
    # The old rule, (p - 1) x the slowest stage, would charge the LM head and 16 blocks more.
    assert r["pipeline_bubble_time"] < (2 - 1) * r["stage_microbatch_compute_time"]


def test_hybrid_sharding_gathers_in_the_node_and_all_reduces_shards_across_nodes(engine):
    # PyTorch FSDP HYBRID_SHARD on 16 nodes of 8 A100s: weights, gradients and optimizer states
    # sharded over the 8 GPUs of a node (NVLink), replicated over the 16 nodes; after the
    # reduce-scatter in the node, each GPU all-reduces its 1/8 of the gradients with its 15
    # peers on its own NIC (tree: 2 log2 16 = 8 network steps, cheaper than the ring's 30).
    llama = str(EXAMPLES / "llama3-70b.yaml")
    base = {"hardware.node": "a100-sxm4-80gb", "hardware.gpus": 128, "parallelism.tp": 1,
            "parallelism.pp": 1, "parallelism.vpp": 1, "parallelism.cp": 1, "parallelism.dp": 128,
            "parallelism.zero": 3, "training.global_batch": 256, "training.micro_batch": 2,
            "training.recompute": "full"}
    full = engine.evaluate(llama, base)
    hsdp = engine.evaluate(llama, {**base, "parallelism.dp_shard": 8})
    assert full["dp_shard_group"] == 128 and full["dp_replicas"] == 1
    assert full["dp_replica_reduce_time"] == 0
    assert hsdp["dp_shard_group"] == 8 and hsdp["dp_replicas"] == 16
    assert hsdp["zero_shards"] == 8
    assert hsdp["optimizer_memory"] == pytest.approx(full["optimizer_memory"] * 16)
    assert hsdp["dp_shard_bandwidth"] == hsdp["scaleup_link_bandwidth"]
    assert hsdp["dp_replica_bandwidth"] == hsdp["scaleout_link_bandwidth"]
    layer_bytes = hsdp["params_per_gpu"] / hsdp["layers_per_stage"] * hsdp["weight_comm_bytes"]
    assert hsdp["zero3_layer_gather_time"] == pytest.approx(
        7 / 8 * layer_bytes / hsdp["scaleup_link_bandwidth"]
        + hsdp["collective_base_latency"] + 7 * hsdp["scaleup_latency"])
    latency = hsdp["collective_base_latency"] + 8 * hsdp["scaleout_latency"]
    assert hsdp["dp_replica_latency"] == pytest.approx(latency)
    assert hsdp["dp_replica_reduce_time"] == pytest.approx(
        2 * 15 / 16 * hsdp["grad_reduce_bytes"] / 8 / hsdp["scaleout_link_bandwidth"]
        + hsdp["dp_buckets"] * latency)
    # The weight traffic leaves the network: gathers are cheaper than over 128 ranks.
    assert hsdp["zero3_gather_time"] < full["zero3_gather_time"]


def test_cross_entropy_loss_is_priced_by_its_memory_traffic(engine):
    # Llama-3-size vocabulary on one H100 (3.35 TB/s): 8,192 tokens of 128,256 logits.
    cfg = {"hardware.node": "h100-sxm", "hardware.gpus": 8, "parallelism.tp": 1,
           "parallelism.pp": 1, "parallelism.dp": 8, "training.global_batch": 64,
           "training.micro_batch": 1, "training.seq_len": 8192, "model.vocab": 128256}
    logits = 8192 * 128256
    # Bytes per logit read from the kernels: Megatron's unfused vocab_parallel_cross_entropy
    # (2 x 16-bit + 12 x fp32 accesses), its jit-fused version (2 + 6), Transformer Engine's
    # Triton kernel (3 + 4) and flash-attn's kernel with the in-place backward (3 x 16-bit).
    per_logit = {"unfused": 2 * 2 + 12 * 4, "fused": 2 * 2 + 6 * 4, "te": 3 * 2 + 4 * 4,
                 "flash": 3 * 2}
    times = {}
    for kernel, nbytes in per_logit.items():
        r = engine.evaluate(GPT3, {**cfg, "training.loss_kernel": kernel})
        assert r["loss_bytes_per_logit"] == nbytes
        assert r["loss_time"] == pytest.approx(logits * nbytes / 3.35e12, rel=1e-3)
        times[kernel] = r
    # The loss is on the last stage, beside the LM head's GEMM; nothing else moves.
    gemm = times["unfused"]["logits_time"] - times["unfused"]["loss_time"]
    assert times["flash"]["logits_time"] - times["flash"]["loss_time"] == pytest.approx(gemm)
    assert times["unfused"]["gemm_time_per_layer"] == times["flash"]["gemm_time_per_layer"]
    assert times["unfused"]["step_time"] > times["fused"]["step_time"] \
        > times["te"]["step_time"] > times["flash"]["step_time"]
    # Tensor parallelism splits the vocabulary, and with it the loss.
    tp8 = engine.evaluate(GPT3, {**cfg, "parallelism.tp": 8, "parallelism.dp": 1})
    assert tp8["loss_time"] == pytest.approx(times["unfused"]["loss_time"] / 8)


def test_tensor_parallelism_beyond_the_key_value_heads_gathers_the_qkv_projection(engine):
    # Megatron-Core (attention.py since f7dfb997): with tp > kv_heads each rank attends with
    # its query group's one key/value head, after an all-gather of the QKV projection's output
    # (forward) and a reduce-scatter of its gradient (backward), on no GEMM's shadow.
    base = {"hardware.node": "h100-sxm", "hardware.gpus": 64, "parallelism.tp": 8,
            "parallelism.pp": 1, "parallelism.dp": 8, "training.global_batch": 64,
            "training.micro_batch": 1, "training.recompute": "none", "model.heads": 96,
            "model.kv_heads": 4}
    r = engine.evaluate(GPT3, base)
    assert r["kv_heads_per_rank"] == 1
    head = r["kv_width"] / 4
    assert r["kv_width_per_rank"] == pytest.approx(head)
    assert r["qkv_width_per_rank"] == pytest.approx(r["q_width"] / 8 + 2 * head)
    gathered = r["activation_bytes"] * r["microbatch_tokens"] * r["qkv_width"]
    one = 7 / 8 * gathered / r["tp_bandwidth"] + 7 * r["tp_latency"]
    assert r["tp_qkv_gather_time"] == pytest.approx(one)
    assert r["tp_qkv_gathers_per_layer"] == pytest.approx(2 * one)  # no recompute
    # The same layer with the key/value heads split evenly: no gather, the rest of the TP
    # traffic unchanged (tp_collective_time moves activations of the model width).
    even = engine.evaluate(GPT3, {**base, "model.kv_heads": 8})
    assert even["tp_qkv_gather_time"] == 0 and even["kv_heads_per_rank"] == 1
    assert r["tp_comm_per_layer"] - even["tp_comm_per_layer"] == pytest.approx(2 * one)
    assert (r["tp_comm_exposed_per_layer"] - even["tp_comm_exposed_per_layer"]
            == pytest.approx(2 * one))
    # Neither divides the other: refused with its one-line reason.
    with pytest.raises(Exception, match="kv_heads = 3 and parallelism.tp = 8"):
        engine.evaluate(GPT3, {**base, "model.kv_heads": 3})


def test_activation_offloading_keeps_the_offloaded_layers_in_host_memory(engine):
    # Megatron-Core's cpu_offloading_num_layers: with pp 1 and no recompute, the offloaded
    # layers' activations wait in host memory; one layer's copy is in flight.
    llama = str(EXAMPLES / "llama3-70b.yaml")
    base = {"parallelism.tp": 8, "parallelism.pp": 1, "parallelism.dp": 64,
            "parallelism.vpp": 1, "training.recompute": "none", "hardware.node": "gb200-nvl72"}
    kept = engine.evaluate(llama, base)
    off = engine.evaluate(llama, {**base, "training.offload_layers": 40})
    layers = off["layers_first_stage"]
    assert off["offloaded_layer_share"] == pytest.approx(40 / layers)
    held = off["stage_inflight_layers"] * (1 - 40 / layers) + 1
    assert off["act_memory"] == pytest.approx(
        off["act_per_layer"] * held + off["recompute_working_memory"] + off["logits_memory"])
    assert kept["offloaded_act_memory"] == 0
    assert off["act_memory"] < kept["act_memory"]
    # A layer's copy takes its activations over the host link; only what the neighbouring
    # layer's forward (to host) and backward (back) do not cover shows.
    copy = off["act_per_layer"] / off["host_bandwidth"]
    assert off["offload_transfer_time"] == pytest.approx(copy)
    shown = 40 / layers * (max(0.0, copy - off["layer_forward_time"])
                           + max(0.0, copy - off["layer_backward_time"]))
    assert off["offload_exposed_per_layer"] == pytest.approx(shown)
    assert kept["offload_exposed_per_layer"] == 0
    # A slow host link shows: PCIe Gen4 at 32 GB/s leaves the copies exposed.
    slow = engine.evaluate(llama, {**base, "training.offload_layers": 40,
                                   "hardware.host_bandwidth": 32e9})
    assert slow["offload_exposed_per_layer"] > off["offload_exposed_per_layer"]
    assert slow["layer_microbatch_time"] - kept["layer_microbatch_time"] == pytest.approx(
        slow["offload_exposed_per_layer"])
    # Megatron-Core refuses offloading every layer, and offloading beside recompute.
    with pytest.raises(Exception, match="training.offload_layers = 80 must be below"):
        engine.evaluate(llama, {**base, "training.offload_layers": 80})
    with pytest.raises(Exception, match="offloads activations only without recompute"):
        engine.evaluate(llama, {**base, "training.offload_layers": 10,
                                "training.recompute": "selective"})


def test_mla_up_projection_and_expert_activation_recomputed_on_their_own(engine):
    # Megatron-Core's recompute_modules 'mla_up_proj' and 'moe_act' (DeepSeek-V3's own
    # training recomputes both): memory falls by what they no longer keep, time rises by
    # their forward work.
    dsv3 = str(EXAMPLES / "deepseek-v3-h800.yaml")
    base = {"training.recompute": "none"}
    r = engine.evaluate(dsv3, base)
    up = engine.evaluate(dsv3, {**base, "training.recompute_mla_up_proj": True})
    tokens, a = r["microbatch_tokens"], r["activation_bytes"]
    assert r["act_attention_linear"] - up["act_attention_linear"] == pytest.approx(
        tokens * a * r["qkv_width_per_rank"])
    up_params = r["q_lora_rank"] * r["q_width"] \
        + r["kv_lora_rank"] * r["heads"] * (r["qk_nope_head_dim"] + r["v_head_dim"])
    assert up["mla_up_proj_recompute_time"] == pytest.approx(
        r["gemm_qkv_time"] * up_params / r["attention_in_params"])
    assert up["layer_recompute_time"] - r["layer_recompute_time"] == pytest.approx(
        up["mla_up_proj_recompute_time"])
    assert up["recompute_flops_per_token"] - r["recompute_flops_per_token"] == pytest.approx(
        (r["layers"] + r["mtp_layers"]) * 2 * up_params)
    act = engine.evaluate(dsv3, {**base, "training.recompute_moe_act": True})
    routed = r["routed_tokens_per_gpu"] * r["moe_imbalance_factor"]
    assert r["moe_mlp_activation"] - act["moe_mlp_activation"] == pytest.approx(
        routed * r["gemm_input_bytes"] * r["expert_ffn_size"])
    assert act["moe_act_recompute_time"] == pytest.approx(
        a * routed * (r["expert_up_width"] + r["expert_ffn_size"]) / r["hbm_bandwidth"]
        * r["moe_layer_share"])
    # Under full recompute the whole layer runs again anyway: the flags change nothing.
    full = engine.evaluate(dsv3, {"training.recompute": "full"})
    both = engine.evaluate(dsv3, {"training.recompute": "full",
                                  "training.recompute_mla_up_proj": True,
                                  "training.recompute_moe_act": True})
    assert both["step_time"] == pytest.approx(full["step_time"])
    assert both["memory_per_gpu"] == pytest.approx(full["memory_per_gpu"])
    # The whole MoE layer (recompute_modules 'moe'): only its input is kept, and the backward
    # runs its forward again -- the MLP's compute once more, two more all-to-alls.
    layer = engine.evaluate(dsv3, {**base, "training.recompute_moe": True})
    tokens_in = tokens * a * r["hidden"] / r["sp_degree"]
    mask = r["mask_bytes"] * tokens * r["hidden"] / r["sp_degree"] if r["dropout"] else 0
    assert layer["moe_mlp_activation"] == pytest.approx(tokens_in + mask)
    assert layer["moe_mlp_activation"] < r["moe_mlp_activation"] / 4
    assert layer["module_recompute_time"] == pytest.approx(
        r["moe_layer_share"] * r["moe_mlp_time"])
    assert layer["ep_a2a_count"] == r["ep_a2a_count"] + 2 == 6
    assert layer["recompute_flops_per_token"] - r["recompute_flops_per_token"] == pytest.approx(
        r["moe_layers"] * r["moe_mlp_flops_per_token"])
    assert layer["step_time"] > r["step_time"]
    # With the layer recomputed whole, its activation's own recompute adds nothing more.
    both_moe = engine.evaluate(dsv3, {**base, "training.recompute_moe": True,
                                      "training.recompute_moe_act": True})
    assert both_moe["module_recompute_time"] == pytest.approx(layer["module_recompute_time"])
    full_moe = engine.evaluate(dsv3, {"training.recompute": "full",
                                      "training.recompute_moe": True})
    assert full_moe["step_time"] == pytest.approx(full["step_time"])
    assert full_moe["ep_a2a_count"] == full["ep_a2a_count"]
    # Without MLA there is no up-projection to recompute.
    llama = engine.evaluate(GPT3, {"training.recompute_mla_up_proj": True})
    assert llama["mla_up_proj_recompute_time"] == 0
    assert llama["act_attention_linear"] == pytest.approx(
        engine.evaluate(GPT3)["act_attention_linear"])


def test_fp8_scope_puts_the_experts_or_the_dense_linears_alone_in_fp8(engine):
    """training.fp8_scope: torchao's MXFP8 MoE recipe converts the routed experts' grouped GEMMs
    and the Linears apart. 'experts' prices the dense Linears as BF16 training does and the
    routed experts as FP8 training does; 'dense' the other way round; 'all' is FP8 throughout.
    Attention and the LM head are BF16 in every case."""
    moe = str(EXAMPLES / "gpt4-like-moe.yaml")
    on_b200 = {"hardware.node": "b200", "training.fp8_scaling": "block"}
    bf16 = engine.evaluate(moe, {**on_b200, "training.precision": "bf16"})
    fp8 = engine.evaluate(moe, {**on_b200, "training.precision": "fp8"})
    experts = engine.evaluate(moe, {**on_b200, "training.precision": "fp8",
                                    "training.fp8_scope": "experts"})
    dense = engine.evaluate(moe, {**on_b200, "training.precision": "fp8",
                                  "training.fp8_scope": "dense"})
    assert fp8["expert_gemm_time"] < 0.8 * bf16["expert_gemm_time"]
    assert fp8["gemm_qkv_time"] < 0.8 * bf16["gemm_qkv_time"]
    # experts only: the dense GEMMs at BF16's peak and rate, the experts' at FP8's
    for key in ("gemm_qkv_time", "gemm_attn_out_time", "shared_expert_time", "router_time"):
        assert experts[key] == pytest.approx(bf16[key])
    assert experts["expert_gemm_time"] == pytest.approx(fp8["expert_gemm_time"])
    assert experts["gemm_peak_flops"] == bf16["peak_flops"]
    assert experts["expert_peak_flops"] == fp8["peak_flops"]
    # dense only: the reverse
    for key in ("gemm_qkv_time", "gemm_attn_out_time", "shared_expert_time"):
        assert dense[key] == pytest.approx(fp8[key])
    assert dense["expert_gemm_time"] == pytest.approx(bf16["expert_gemm_time"])
    # casts: the routed copies' when the experts are in FP8, the dense Linears' when they are
    routed = experts["fp8_cast_elements_forward"]
    dense_casts = dense["fp8_cast_elements_forward"]
    assert routed > 0 and dense_casts > 0
    assert routed + dense_casts == pytest.approx(fp8["fp8_cast_elements_forward"])
    assert bf16["fp8_cast_elements_forward"] == 0
    # weights: the low-precision copy only for the weights in FP8
    assert experts["expert_weight_bytes"] == fp8["expert_weight_bytes"]
    assert fp8["expert_weight_bytes"] > bf16["expert_weight_bytes"]
    assert experts["weight_bytes"] == bf16["weight_bytes"]
    assert dense["weight_bytes"] == fp8["weight_bytes"]
    assert dense["expert_weight_bytes"] == bf16["expert_weight_bytes"]
    assert fp8["fp8_weight_elements_per_layer"] == pytest.approx(
        experts["fp8_weight_elements_per_layer"] + dense["fp8_weight_elements_per_layer"])
    # attention stays BF16 whatever the scope
    for r in (fp8, experts, dense):
        assert r["attention_core_time"] == pytest.approx(bf16["attention_core_time"])
    # a dense model under 'experts' trains wholly in BF16
    gpt = engine.evaluate(GPT3, {**AT_SCALE, "training.fp8_scope": "experts"})
    gpt16 = engine.evaluate(GPT3, {**AT_SCALE, "training.precision": "bf16"})
    assert gpt["layer_forward_time"] == pytest.approx(gpt16["layer_forward_time"])


def test_an_embedding_stage_holds_no_block_and_the_next_stage_sets_the_memory_peak(engine):
    """Megatron-LM's layout 'E|(tt|)*30,tL' (DeepSeek-V3 on 32 stages): parallelism.embedding_stage
    gives the first stage the embedding and no block, the 30 middle stages ceil(61 / 31) = 2
    blocks each and the last the remaining 1; the bubble counts the near-empty first stage once
    (stage_time_sum), and the activation peak moves to the second stage, 2 blocks over p - 1 = 31
    micro-batches in flight."""
    moe = str(EXAMPLES / "deepseek-v3-h800.yaml")
    sets = {"parallelism.pp": 32, "parallelism.dp": 64, "parallelism.schedule": "1f1b",
            "parallelism.first_stage_layers": 0, "parallelism.last_stage_layers": 0,
            "parallelism.embedding_stage": True}
    r = engine.evaluate(moe, sets)
    assert (r["layers_first_stage"], r["layers_middle_stage"], r["layers_last_stage"]) == (0, 2, 1)
    assert r["stage_layers"] == 2
    assert r["stage_inflight_layers"] == pytest.approx(2 * 31 * r["vpp_memory_factor"])
    assert 0 < r["pipeline_bubble_fraction"] < 1 and math.isfinite(r["step_time"])
    # without it, 61 blocks do not split over 32 stages with a block on every one
    with pytest.raises(Exception, match="does not split over pp x vpp"):
        engine.evaluate(moe, {**sets, "parallelism.embedding_stage": False})
    # interleaved layouts give the first stage's blocks over its chunks instead
    with pytest.raises(Exception, match="embedding-only stage is priced without interleaving"):
        engine.evaluate(moe, {**sets, "parallelism.vpp": 2})
    # one stage: nothing to split, the flag is moot
    one = engine.evaluate(moe, {**sets, "parallelism.pp": 1, "parallelism.dp": 2048,
                                "parallelism.ep": 64, "training.global_batch": 16384})
    assert one["layers_first_stage"] == 61
