"""Source conventions the mapping reads: how sources name accelerators, precisions and
recompute modes, which fields mean what, and what a framework does when a run is silent."""

from __future__ import annotations

# GPU names as sources print them -> hardware node ids. First match wins; a row may instead
# name a node directly with `hardware.node`.
GPU_PATTERNS: list[tuple[str, str]] = [
    (r"gb200", "gb200-nvl72"),
    (r"b200", "b200"),
    (r"h200", "h200"),
    (r"h100.*pcie", "h100-pcie"),
    (r"h100", "h100-sxm"),
    (r"h800", "h800-sxm"),
    (r"a100.*40\s*gb", "a100-sxm4-40gb"),
    (r"a100", "a100-sxm4-80gb"),
    (r"a800", "a800-sxm4-80gb"),
    (r"mi325", "mi325x"),
    (r"mi300", "mi300x"),
    (r"mi250", "mi250x"),
    (r"v5p", "tpu-v5p"),
    (r"trainium\s*2|trn2", "trainium2"),
]

# Known variants of a node type, matched on the GPU name after the node: config overrides and
# why. torchtitan's H100s are a 96 GB HBM2e part at a 500 W limit; its benchmark page gives
# 2.4 TB/s and says the peak is "between SXM and NVL" without a figure, so the peaks are the
# midpoint of the two datasheets (SXM 989.4 / NVL 835.5 dense BF16 TFLOP/s, FP8 twice that).
GPU_VARIANTS: list[tuple[str, dict[str, str], str]] = [
    (r"h100.*96\s*gb.*hbm2e", {
        "hardware.hbm_bandwidth": "2.4 TB/s",
        "hardware.peak_flops_bf16": "912.45 TFLOP/s",
        "hardware.peak_flops_fp16": "912.45 TFLOP/s",
        "hardware.peak_flops_fp8": "1824.7 TFLOP/s",
        "hardware.peak_flops_tf32": "456 TFLOP/s",
    }, "H100 96GB HBM2e: 2.4 TB/s (torchtitan benchmark page); peaks midway between the H100 "
       "SXM and NVL datasheets (the page says 'between SXM and NVL')"),
]

# Config keys a row may never set: they would feed a measurement back into the prediction.
RESERVED_KEYS = {"training.achieved_flops_per_gpu"}

# Precision as sources write it ("bf16 (amp)", "amp_bf16", "bf16-mixed", "fp8 (torchao
# float8)", "MXFP8") -> the model's precision: the first pattern found anywhere in the text
# wins, most specific first (an FP8 run names BF16 too, for its other tensors).
PRECISIONS: list[tuple[str, str | None]] = [
    (r"fp4|float4", None),  # 4-bit training: not modelled
    (r"fp8|float8|e4m3", "fp8"),
    (r"bf16|bfloat16", "bf16"),
    (r"fp16|float16|half", "fp16"),
    (r"tf32", "tf32"),
    (r"fp32|float32", "tf32"),
]
# Activation recompute as sources write it -> the model's choice (None: the default).
RECOMPUTE: list[tuple[str, str | None]] = [
    (r"unknown|not given|n/a", None),
    (r"selective", "selective"),
    (r"^op\b|per-op|op-level", "op"),
    (r"full|uniform|block|^true$|^yes$|^on$", "full"),
    (r"none|^false$|^no$|^off$|disabled|^0$", "none"),
]

# MoE fields a row may carry (in `model` or `moe`) -> the MoE plugin's config keys.
MOE_FIELDS: dict[str, tuple[str, ...]] = {
    "moe.experts": ("experts", "num_experts", "n_routed_experts", "moe_experts",
                    "num_local_experts"),
    "moe.top_k": ("top_k", "moe_top_k", "experts_per_token", "num_experts_per_tok",
                  "active_experts"),
    "moe.expert_ffn_hidden": ("expert_ffn_hidden", "moe_ffn_hidden", "moe_intermediate_size",
                              "expert_hidden"),
    "moe.shared_experts": ("shared_experts", "n_shared_experts", "num_shared_experts"),
    "moe.first_dense_layers": ("first_dense_layers", "first_k_dense_replace",
                               "dense_layers"),
    "moe.moe_every": ("moe_every", "moe_layer_freq", "moe_frequency"),
    "moe.capacity_factor": ("capacity_factor", "moe_capacity_factor"),
    "moe.max_nodes_per_token": ("max_nodes_per_token", "node_limit", "topk_group"),
}
# Row fields read explicitly below; any other `model` field is passed through when a loaded
# formula reads `model.<field>` (or `mla.<field>`), and otherwise listed as ignored.
MODEL_FIELDS = {"layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab", "seq_len",
                "params_billion", "arch", "head_dim", "glu", "norm", "tied_embeddings",
                "linear_bias", "position_embedding", "name"}
# Parallel fields read explicitly; any other `parallel` field whose `parallelism.<field>` a
# loaded formula reads (cp_comm, tp_comm_overlap, bucket_size, ...) passes through.
PARALLEL_FIELDS = {"tp", "pp", "dp", "cp", "ep", "etp", "vpp", "sp", "zero", "fsdp",
                   "recompute", "pp_schedule", "async_tp"}
# FlashAttention (Dao et al., arXiv:2205.14135, May 2022) reached Megatron-LM and other
# frameworks after that; runs published before it ran unfused attention.
FLASH_ARXIV_YYMM = 2206
FLASH_YEAR = 2023


# Batch fields, first given wins.
GLOBAL_BATCH_FIELDS = ("global_batch_sequences", "global_batch", "global_batch_size", "gbs")
MICRO_BATCH_FIELDS = ("micro_batch", "micro_batch_size", "mbs")

# Hopper-native (Transformer Engine's cuDNN fused attention, FlashAttention-3).
FA3_WORDS = ("nemo", "transformer engine", "megatron", "mcore", "cudnn", "flashattention-3",
             "flash-attention-3", "flash attention 3", "dgxc")
# MoE runs that say they dispatch tokens with DeepEP/HybridEP (Megatron-LM's flex dispatcher),
# or overlap the all-to-alls with another micro-batch's compute.
DEEPEP = r"(?<!not )\b(deepep|hybridep|flex dispatcher)\b"
EP_OVERLAP = r"overlap-moe-expert-parallel-comm|a2a[ _-]overlap|all-to-all/compute overlap|" \
             r"1f1b overlap"
# A run of NVIDIA's published performance recipes (NeMo, Megatron-Bridge, DGX Cloud
# benchmarking), which reduce gradients in bf16 (NeMo-Framework-Launcher configs:
# optim.grad_sync_dtype bf16; NeMo 2 scripts/performance and Megatron-Bridge performance
# configs: grad_reduce_in_fp32 = False). NeMo AutoModel is PyTorch FSDP2, not these recipes.
NVIDIA_RECIPES = r"\bnemo\b(?!\s*automodel)|megatron-bridge|dgxc"

