"""Plugins: the hook system, local folders, installed (entry-point) plugins, broken plugins with
one clear line each, and the built-in MoE plugin's numbers.

Installed plugins are controlled like datasette's tests do: every test here sets
DLFORMULA_LOAD_PLUGINS (to "" or to the one fake plugin it installs), so a plugin that happens
to be installed on the machine never changes a number.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import io
import json
import math
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import click
import pytest

from conftest import EXAMPLES, ROOT

PLUGINS = ROOT / "tests" / "data" / "plugins"
EXAMPLE = PLUGINS / "example_plugin"
EXAMPLE_PKG = EXAMPLE / "dlformula_example"
EXAMPLE_CONFIG = str(EXAMPLE / "config.yaml")
BROKEN = PLUGINS / "broken"
MIXTRAL = str(PLUGINS / "mixtral-8x7b.yaml")
DEEPSEEK = str(PLUGINS / "deepseek-v3.yaml")
GPT3 = str(EXAMPLES / "gpt3-175b.yaml")
LLAMA = str(EXAMPLES / "llama3-70b.yaml")
MiB = 2**20


@pytest.fixture(autouse=True)
def no_installed_plugins(monkeypatch):
    """Only the plugins a test asks for: no installed ones, no DLFORMULA_PLUGINS folders."""
    monkeypatch.setenv("DLFORMULA_LOAD_PLUGINS", "")
    monkeypatch.delenv("DLFORMULA_PLUGINS", raising=False)


def _cli_group() -> click.Group:
    """cli.py's group with --plugin and `plugins` (built here until cli.py registers them)."""
    from dlformula import cli as climod
    from dlformula.cli_plugins import plugin_option, plugins_command

    group = climod.cli
    if any(p.name == "plugin_paths" for p in group.params):
        return group
    callback = group.callback

    def wired(no_cache, plugin_paths):
        return callback(no_cache=no_cache)

    mirror = plugin_option(click.Group(group.name, commands=dict(group.commands),
                                       params=list(group.params), callback=wired,
                                       context_settings=group.context_settings))
    mirror.add_command(plugins_command)
    if "export" not in mirror.commands:
        with contextlib.suppress(ImportError):
            from dlformula.cli_export import export

            mirror.add_command(export)
    return mirror


@pytest.fixture
def run(monkeypatch):
    """Run `dlformula ARGS` in-process: (exit code, stdout, stderr)."""
    from dlformula import cli as climod
    from dlformula.cli_plugins import loaded_plugins

    wired = any(p.name == "plugin_paths" for p in climod.cli.params)
    group = _cli_group()
    monkeypatch.setattr(climod, "cli", group)

    def _run(*args: str) -> tuple[int, str, str]:
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            if wired:  # cli.main loads the plugins itself
                code = climod.main(list(args))
            else:
                try:
                    with loaded_plugins(group, list(args)):
                        code = climod.main(list(args))
                except Exception as exc:  # what main() reports when the loading is inside it
                    from dlformula.errors import DlfError

                    if not isinstance(exc, DlfError):
                        raise
                    for line in exc.lines():
                        print(f"error: {line}", file=sys.stderr)
                    code = exc.exit_code
        return code, out.getvalue(), err.getvalue()

    return _run


def _engine(*paths):
    from dlformula import Engine

    return Engine(plugins=[str(p) for p in paths])


# -- the MoE plugin: dense models are unchanged ---------------------------------------------------
@pytest.mark.parametrize("config, sets", [
    (GPT3, []),
    (LLAMA, []),
    (GPT3, ["parallelism.zero=3", "training.recompute=full"]),
    (LLAMA, ["parallelism.zero=0", "parallelism.pp=2", "parallelism.dp=32"]),
    (LLAMA, ["parallelism.zero=2", "parallelism.cp=2", "parallelism.dp=8", "parallelism.vpp=1",
             "parallelism.schedule=dualpipe"]),
])
def test_moe_plugin_leaves_dense_models_unchanged(config, sets):
    """Every override equals the core formula when moe.experts is 0: the same numbers, bit for
    bit, as the core alone (this also catches an override that drifted from the core)."""
    from dlformula import Engine
    from dlformula.resources import builtin_folders

    with_moe = Engine().evaluate(config, sets).values
    core = Engine(folders=builtin_folders()).evaluate(config, sets).values
    differ = [n for n, v in core.items() if not (v == with_moe[n] or (
        isinstance(v, float) and math.isnan(v) and math.isnan(with_moe[n])))]
    assert differ == []
    assert with_moe["params_active"] == with_moe["params_total"]
    assert with_moe["ep_comm_time"] == 0


def test_moe_plugin_is_loaded_through_the_same_hooks_as_the_core():
    from dlformula.plugin_manager import PluginSet

    plugins = PluginSet.load(entry_points=False, env={})
    assert [(i.name, i.kind) for i in plugins.infos] == [("dlformula", "core"),
                                                       ("moe", "built-in")]
    core, moe = plugins.infos
    assert plugins.hooks_of(core) == ["formula_folders", "hardware_folders", "preset_folders",
                                      "functions"]
    assert plugins.hooks_of(moe) == ["formula_folders"]
    assert [f.kind for f in plugins.folders() if f.origin == "moe"] == ["formulas"]


# -- the MoE plugin: published parameter counts ---------------------------------------------------
def _within(value, target, rel=0.02):
    return abs(value - target) / target <= rel


def test_mixtral_total_and_active_parameters(engine):
    r = engine.evaluate(MIXTRAL)
    assert _within(r["params_total"], 46.7e9), r["params_total"]
    assert _within(r["params_active"], 12.9e9), r["params_active"]
    assert r["moe_layers"] == 32


def _has_mla(engine) -> bool:
    return any(d.config == "mla.kv_lora_rank" for d in engine.model.inputs.values())


def test_deepseek_v3_total_and_active_parameters(engine):
    if not _has_mla(engine):
        pytest.xfail("needs MLA in core formulas")
    r = engine.evaluate(DEEPSEEK)
    assert _within(r["params_total"], 671e9), r["params_total"]  # MTP module excluded
    assert _within(r["params_active"], 37e9), r["params_active"]
    assert r["moe_layers"] == 58  # 61 layers, the first 3 dense


@pytest.mark.parametrize("config", [MIXTRAL, DEEPSEEK])
def test_moe_configs_evaluate_fully_with_mfu_on_active_parameters(engine, config):
    if config == DEEPSEEK and not _has_mla(engine):
        pytest.xfail("needs MLA in core formulas")
    r = engine.evaluate(config)
    bad = [n for n, v in r.quantities().items() if not math.isfinite(float(v))]
    assert bad == []
    for name in ("params_total", "params_active", "ep_comm_time", "moe_imbalance_factor",
                 "grouped_gemm_efficiency", "expert_params_per_gpu", "router_flops_per_token",
                 "moe_mlp_activation", "ep_a2a_time", "ep_comm_volume"):
        assert name in r.values
    # Model FLOPs (and so MFU) count the experts a token passes through, not all of them.
    scores = r["layers"] * 2 * r["seq_len"] * (r["q_width"] + r["value_width"])
    weights = r["forward_flops_per_token"] - scores  # 2 FLOPs per weight a token meets
    assert weights == pytest.approx(2 * (r["params_active"] - r["embedding_params"]), rel=0.01)
    assert weights < 0.5 * 2 * r["params_total"]
    assert r["ep_comm_time"] > 0


# -- the MoE plugin: parallel layout, memory, communication ---------------------------------------
def test_expert_memory_falls_as_expert_parallelism_rises(engine):
    memory, experts_per_gpu = [], []
    for ep in (1, 2, 4, 8):
        r = engine.evaluate(MIXTRAL, [f"parallelism.ep={ep}"])
        memory.append(r["states_memory"])
        experts_per_gpu.append(r["expert_params_per_gpu"])
        stage_routed = r["routed_expert_params"] / r["layers"] * r["stage_layers"]
        assert r["expert_params_per_gpu"] == pytest.approx(stage_routed / (1 * ep))
    assert memory == sorted(memory, reverse=True) and memory[0] > 2 * memory[-1]
    assert experts_per_gpu[0] == pytest.approx(8 * experts_per_gpu[-1])


def test_expert_optimizer_states_shard_over_the_expert_data_parallel_group(engine):
    # tp 2, dp 8, ep 4, etp 1: expert_dp = 2 x 1 x 8 / (1 x 4) = 4, the dense group dp x cp = 8
    r = engine.evaluate(MIXTRAL, ["parallelism.ep=4", "parallelism.zero=1"])
    assert r["expert_dp"] == 4
    expected = (r["dense_params_per_gpu"] / 8 + r["expert_params_per_gpu"] / 4) * 8
    assert r["optimizer_memory"] == pytest.approx(expected)
    assert r["weight_memory"] == pytest.approx(r["params_per_gpu"] * 2)  # not sharded at ZeRO-1


def test_zero3_gathers_only_the_experts_of_its_own_rank(engine):
    # FSDP / ZeRO-3 gathers a layer's experts over the expert data-parallel group, so the
    # working copy of a MoE layer holds this rank's experts, not all of them.
    for ep in (1, 4):
        r = engine.evaluate(MIXTRAL, [f"parallelism.ep={ep}", "parallelism.zero=3"])
        dense = r["attention_params_per_layer"] + r["mlp_params_per_layer"] \
            - r["moe_layer_share"] * r["experts"] * r["expert_params"]
        layer = dense / r["tp"] + r["expert_params_per_gpu"] / r["stage_layers"] \
            + 2 * r["norm_params"] / r["tp"]
        assert r["zero3_working_memory"] == pytest.approx(2 * layer * (2 + 4))
        if ep == 1:
            one = r["zero3_working_memory"]
    assert r["zero3_working_memory"] < one / 2


def test_expert_gradients_reduce_over_the_nics_of_their_own_ranks(engine):
    """Experts' rank order is etp-ep-edp: with ep 8 filling an 8-GPU node an expert's
    data-parallel peers sit one per node, so each group reduces and gathers over one NIC while
    the node's other groups use the others; with ep 4 two peers share a node (two NICs); a
    group inside one node uses NVLink."""
    r = engine.evaluate(MIXTRAL)  # tp 2, dp 8, ep 8, etp 1, zero 1: expert_dp = 16 / 8 = 2
    nic, nvlink = r["scaleout_link_bandwidth"], r["scaleup_link_bandwidth"]
    assert r["expert_dp"] == 2 and r["expert_dp_bandwidth"] == pytest.approx(nic)
    assert r["dp_bandwidth"] == pytest.approx(min(nvlink, 4 * nic))  # dense peers: 8 / tp a node
    experts = r["expert_params_per_gpu"]
    latency = math.ceil(experts / r["dp_bucket_params"]) * r["expert_dp_ring_latency"]
    assert r["expert_dp_grad_reduce_time"] == pytest.approx(
        (2 - 1) / 2 * experts * r["grad_bytes"] / nic + latency)
    assert r["expert_dp_param_gather_time"] == pytest.approx(
        (2 - 1) / 2 * experts * r["weight_comm_bytes"] / nic + latency)
    dense = (8 - 1) / 8 * r["dense_params_per_gpu"] * r["weight_comm_bytes"] / r["dp_bandwidth"]
    assert r["dp_param_gather_time"] == pytest.approx(
        dense + r["dp_buckets"] * r["dp_ring_latency"] + r["expert_dp_param_gather_time"])
    ep4 = engine.evaluate(MIXTRAL, ["parallelism.ep=4"])  # expert_dp 4, two peers a node
    assert ep4["expert_dp"] == 4 and ep4["expert_dp_bandwidth"] == pytest.approx(2 * nic)
    node = engine.evaluate(MIXTRAL, ["parallelism.ep=4", "parallelism.dp=4",
                                     "hardware.gpus=32"])  # a stage of 8 ranks: one node
    assert node["expert_dp"] == 2 and node["expert_dp_bandwidth"] == pytest.approx(nvlink)
    assert engine.evaluate(MIXTRAL, ["parallelism.zero=0"])["expert_dp_param_gather_time"] == 0


def test_all_to_all_inside_the_node_is_faster_than_across_nodes(engine):
    inside = engine.evaluate(MIXTRAL)  # ep 8 x etp 1 ranks: one 8-GPU NVLink domain
    across = engine.evaluate(MIXTRAL, ["parallelism.etp=2"])  # 16 ranks: two nodes
    assert inside["ep_crosses_domain"] == 0 and across["ep_crosses_domain"] == 1
    assert inside["ep_inter_share"] == 0 and across["ep_intra_share"] == pytest.approx(3 / 8)
    assert across["ep_a2a_time"] > 3 * inside["ep_a2a_time"]


def test_node_limited_routing_sends_one_network_copy_per_node(engine):
    # top-2 over 16 ranks on two nodes; with at most one node per token, a token crosses the
    # network once however many of its experts sit there
    sets = ["parallelism.etp=2", "training.seq_len=65536"]
    free = engine.evaluate(MIXTRAL, sets)
    limited = engine.evaluate(MIXTRAL, sets + ["moe.max_nodes_per_token=1"])
    assert free["ep_network_copies_share"] == 1 and limited["ep_network_copies_share"] == 0.5
    network = free["ep_inter_share"] * free["ep_dispatch_bytes"] / free["scaleout_link_bandwidth"]
    assert free["ep_a2a_time"] - limited["ep_a2a_time"] == pytest.approx(network / 2, rel=1e-6)


def test_deepep_sends_a_token_once_to_each_remote_node_holding_its_experts(engine):
    # top-2 over two nodes: the remote node holds at least one of a token's experts with
    # probability 1 - (1/2)^2 = 3/4, against 2 x 1/2 = 1 remote copy sent one by one
    sets = ["parallelism.etp=2", "training.seq_len=65536"]
    copies = engine.evaluate(MIXTRAL, sets)
    once = engine.evaluate(MIXTRAL, sets + ["moe.dispatcher=deepep"])
    assert once["ep_domains"] == 2 and once["ep_remote_domains_hit"] == pytest.approx(0.75)
    assert once["ep_network_copies_share"] == pytest.approx(0.75)
    assert once["ep_a2a_time"] < copies["ep_a2a_time"]
    inside = engine.evaluate(MIXTRAL, ["moe.dispatcher=deepep"])  # 8 ranks: one node
    assert inside["ep_network_copies_share"] == 1 and inside["ep_inter_share"] == 0


def test_allgather_dispatcher_gathers_every_token_of_its_group(engine):
    """Megatron-LM's allgather dispatcher all-gathers the hidden states (16-bit), the float32
    router probabilities and the one-byte routing map over the expert tensor- and expert-parallel
    group, and reduce-scatters the outputs in float32; the backward swaps them. Over the 16 ranks
    of etp 2 x ep 8 (two 8-GPU nodes, eight of the group's ranks and so eight NICs a node) each
    rank moves 15 other ranks' tokens whatever its top-2 routing picks, against the all-to-all's
    routed copies, and the expert-TP gather is part of it."""
    sets = ["parallelism.etp=2"]
    a2a = engine.evaluate(MIXTRAL, sets)
    ag = engine.evaluate(MIXTRAL, sets + ["moe.dispatcher=allgather"])
    nic, nvlink = ag["scaleout_link_bandwidth"], ag["scaleup_link_bandwidth"]
    assert ag["ep_gather_ranks"] == 16 and ag["ep_gather_bandwidth"] == pytest.approx(
        min(nvlink, 8 * nic))
    per_token = (2 + 4) / 2 * ag["hidden"] + 9 / 4 * ag["experts"]  # bf16 run, 8 experts
    assert ag["ep_gather_bytes_per_token"] == pytest.approx(per_token)
    assert ag["ep_a2a_time"] == pytest.approx(
        15 * ag["moe_local_tokens"] * per_token / ag["ep_gather_bandwidth"]
        + ag["ep_gather_latency"])
    assert ag["etp_collective_time"] == 0 and a2a["etp_collective_time"] > 0
    assert ag["ep_comm_time"] > a2a["ep_comm_time"]  # 15 tokens' worth against top-2's copies
    inside = engine.evaluate(MIXTRAL, ["moe.dispatcher=allgather"])  # 8 ranks: one node
    assert inside["ep_gather_bandwidth"] == pytest.approx(nvlink)
    # ep 1 with experts split over tp 2: Megatron gathers over the two expert-TP ranks
    tp_only = engine.evaluate(MIXTRAL, ["moe.dispatcher=allgather", "parallelism.ep=1",
                                        "parallelism.etp=2"])
    assert tp_only["ep_gather_ranks"] == 2 and tp_only["ep_a2a_time"] == pytest.approx(
        tp_only["moe_local_tokens"] * per_token / nvlink + tp_only["ep_gather_latency"])


def test_1f1b_all_to_all_overlap_hides_like_dualpipe_in_the_steady_state(engine):
    """Megatron's 1F1B all-to-all overlap pairs passes only in the steady state: the warm-up
    forwards (2 (p - 1) + (v - 1) p + 1 on the first stage) and their cool-down backwards expose
    their all-to-alls; DualPipe pairs every pass."""
    sets = ["parallelism.etp=2"]
    dual = engine.evaluate(MIXTRAL, sets + ["parallelism.schedule=dualpipe"])
    overlapped = engine.evaluate(MIXTRAL, sets + ["parallelism.ep_comm_overlap=true"])
    plain = engine.evaluate(MIXTRAL, sets)
    m, v, p = overlapped["microbatches"], overlapped["vpp"], overlapped["pp"]
    paired = (m * v - min(m * v, 2 * (p - 1) + (v - 1) * p + 1)) / (m * v)
    assert overlapped["ep_overlap_paired_share"] == pytest.approx(paired)
    assert dual["ep_overlap_paired_share"] == 1
    assert overlapped["ep_comm_exposed_per_layer"] == pytest.approx(
        paired * dual["ep_comm_exposed_per_layer"]
        + (1 - paired) * plain["ep_comm_exposed_per_layer"])
    assert plain["ep_comm_exposed_per_layer"] == pytest.approx(
        plain["moe_layer_share"] * plain["ep_comm_per_moe_layer"])
    assert overlapped["ep_comm_exposed_per_layer"] < plain["ep_comm_exposed_per_layer"]


@pytest.mark.parametrize("network", [None, "hardware.scaleout_bandwidth=10e9"])
def test_dualpipe_hides_each_all_to_all_behind_its_own_segment(engine, network):
    """Megatron-LM's paired schedule: the backward combine runs behind the forward's attention
    block, both dispatches behind the MLP's backward and forward (three MLP forwards), the
    forward combine behind the attention block's backward. A piece longer than its segment
    leaves the rest exposed -- on a slow network (10 GB/s) even though the whole layer's compute
    would cover the four together."""
    sets = ["parallelism.etp=2"] + ([network] if network else [])  # all-to-all across 2 nodes
    plain = engine.evaluate(MIXTRAL, sets)
    dual = engine.evaluate(MIXTRAL, sets + ["parallelism.schedule=dualpipe"])
    a = dual["ep_comm_per_moe_layer"] / 4  # no recompute: four pieces of one size
    attn_f = dual["layer_forward_time"] - dual["mlp_time"]
    attn_b = dual["layer_backward_time"] - 2 * dual["mlp_time"]
    mlp = dual["moe_mlp_time"]
    exposed = max(0, a - attn_f) + max(0, 2 * a - 3 * mlp) + max(0, a - attn_b)
    assert dual["ep_overlap_paired_exposed"] == pytest.approx(exposed)
    hidden = exposed + dual["overlap_slowdown"] * (4 * a - exposed)
    assert dual["ep_comm_exposed_per_layer"] == pytest.approx(dual["moe_layer_share"] * hidden)
    assert dual["ep_comm_exposed_per_layer"] < plain["ep_comm_exposed_per_layer"]
    if network:  # the pieces outrun their segments, though not the whole layer's compute
        assert exposed > 0 and 4 * a < dual["layer_forward_time"] + dual["layer_backward_time"]
    else:
        assert exposed == 0


def test_capacity_factor_caps_the_load_imbalance(engine):
    r = engine.evaluate(MIXTRAL, ["moe.load_imbalance=1.4"])
    assert r["moe_imbalance_factor"] == 1.4
    capped = engine.evaluate(MIXTRAL, ["moe.load_imbalance=1.4", "moe.capacity_factor=1.25"])
    assert capped["moe_imbalance_factor"] == 1.25
    assert capped["expert_gemm_flops"] < r["expert_gemm_flops"]
    assert capped["step_time"] < r["step_time"]


def test_padding_to_capacity_computes_and_sends_the_whole_capacity(engine):
    """GShard / DeepSpeed-MoE: each expert's buffer is padded to capacity_factor x the mean load,
    so the experts compute, and the all-to-all sends, that much whatever the routing -- at ep 1
    too. Without padding a capacity only caps the imbalance (here 1: balanced, nothing dropped)."""
    balanced = engine.evaluate(MIXTRAL)
    unpadded = engine.evaluate(MIXTRAL, ["moe.capacity_factor=2"])
    padded = engine.evaluate(MIXTRAL, ["moe.capacity_factor=2", "moe.pad_to_capacity=true"])
    assert unpadded["moe_imbalance_factor"] == 1
    assert unpadded["expert_gemm_flops"] == pytest.approx(balanced["expert_gemm_flops"])
    assert padded["moe_imbalance_factor"] == 2
    assert padded["expert_gemm_flops"] == pytest.approx(2 * balanced["expert_gemm_flops"])
    assert padded["ep_dispatch_bytes"] == pytest.approx(2 * balanced["ep_dispatch_bytes"])
    assert padded["step_time"] > unpadded["step_time"]
    # a learned router's imbalance beyond the capacity is dropped, not computed: still 2
    skewed = engine.evaluate(MIXTRAL, ["moe.capacity_factor=2", "moe.pad_to_capacity=true",
                                       "moe.load_imbalance=3"])
    assert skewed["moe_imbalance_factor"] == 2
    local = engine.evaluate(MIXTRAL, ["parallelism.ep=1", "moe.capacity_factor=1.25",
                                      "moe.pad_to_capacity=true"])
    assert local["moe_imbalance_factor"] == 1.25
    assert local["expert_gemm_flops"] == pytest.approx(
        1.25 * engine.evaluate(MIXTRAL, ["parallelism.ep=1"])["expert_gemm_flops"])


def test_load_imbalance_needs_expert_parallelism(engine):
    """The busiest rank carries load_imbalance x the mean only when experts are spread over
    ranks; at ep 1 every rank runs every expert on its own tokens and nobody waits."""
    spread = engine.evaluate(MIXTRAL, ["moe.load_imbalance=1.23"])
    assert spread["ep"] > 1 and spread["moe_imbalance_factor"] == 1.23
    balanced = engine.evaluate(MIXTRAL)
    assert spread["expert_gemm_flops"] == pytest.approx(1.23 * balanced["expert_gemm_flops"])
    local = engine.evaluate(MIXTRAL, ["parallelism.ep=1", "moe.load_imbalance=1.23"])
    assert local["moe_imbalance_factor"] == 1
    assert local["step_time"] == engine.evaluate(MIXTRAL, ["parallelism.ep=1"])["step_time"]


def test_grouped_gemm_efficiency_drops_for_starved_experts(engine):
    fed = engine.evaluate(MIXTRAL)
    starved = engine.evaluate(MIXTRAL, ["training.seq_len=256"])
    assert starved["tokens_per_expert"] == fed["tokens_per_expert"] / 16
    assert starved["grouped_gemm_efficiency"] < 0.7 * fed["grouped_gemm_efficiency"]


@pytest.mark.parametrize("sets, message", [
    (["parallelism.ep=3", "parallelism.dp=24", "hardware.gpus=192"],
     "error: --set: moe.experts = 8 is not divisible by parallelism.ep = 3; choose an ep that "
     "divides the expert count (Megatron-LM: 'Number of experts should be a multiple of expert "
     "model parallel_size')"),
    (["parallelism.etp=2", "parallelism.dp=4", "parallelism.pp=8"],
     "error: --set: expert tensor x expert parallel = 2 x 8 does not divide the 2 x 1 x 4 "
     "(tp x cp x dp) ranks of a pipeline stage; Megatron-core requires world_size divisible by "
     "etp x ep x pp"),
    (["parallelism.sp=false"],
     "error: --set: a MoE model with parallelism.tp = 2 needs sequence parallelism (Megatron-LM: "
     "'When using MoE and tensor parallelism, sequence parallelism must be used'); set "
     "parallelism.sp to true"),
    (["training.precision=fp16"],
     "error: --set: expert parallelism does not support fp16 training (Megatron-LM); set "
     "training.precision to bf16"),
    (["moe.pad_to_capacity=true"],
     "error: --set: moe.pad_to_capacity pads each expert to its capacity, but moe.capacity_factor "
     "is 0 (dropless: no capacity); set moe.capacity_factor (DeepSpeed-MoE trains at 1.0-1.25) or "
     "pad_to_capacity false (Megatron-LM: --moe-pad-expert-input-to-capacity is 'effective only "
     "after the --moe-expert-capacity-factor is set')"),
    (["moe.top_k=9"],
     "error: --set: moe.top_k = 9 exceeds moe.experts = 8; a token cannot be routed to more "
     "experts than exist"),
])
def test_expert_layouts_megatron_refuses_are_refused(run, sets, message):
    args = ["eval", MIXTRAL, "--brief"]
    for s in sets:
        args += ["--set", s]
    code, _, err = run(*args)
    assert code == 2
    assert message in err.splitlines(), err


def test_expert_parallelism_on_a_dense_model_is_refused(run):
    code, _, err = run("eval", LLAMA, "--set", "parallelism.ep=2")
    assert code == 2
    assert err.splitlines() == [
        "error: --set: parallelism.ep = 2 needs a mixture-of-experts model (moe.experts > 1); "
        "set ep to 1 for a dense model"]


def test_overrides_are_shown_by_explain_and_plugins(run):
    code, out, _ = run("explain", "params_active", "--depth", "0")
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "params_active = params_total - inactive_expert_params"
    # the override line names what it replaced (its wording is explain's)
    assert any(line.strip().startswith("overridden by plugin 'moe', was ")
               and "model.yaml:" in line and "params_total" in line for line in lines[1:]), out
    code, out, _ = run("plugins")
    assert code == 0
    assert any(line.startswith("  overrides params_active (was ") and "model.yaml:" in line
               for line in out.splitlines()), out


# -- local folder plugins ------------------------------------------------------------------------
def test_a_plugin_folder_adds_a_node_type_a_formula_a_function_and_a_command(run):
    p = str(EXAMPLE_PKG)
    code, out, _ = run("--plugin", p, "hardware")
    assert code == 0 and any(line.startswith("acme-x1 ") for line in out.splitlines())
    code, out, _ = run("--plugin", p, "hardware", "acme-x1")
    assert code == 0 and out.startswith("acme-x1: ACME X1 (example) (ACME)")
    code, out, err = run("--plugin", p, "eval", EXAMPLE_CONFIG, "--format", "json")
    assert code == 0, err
    q = json.loads(out)["quantities"]
    mem, rounded = q["memory_per_gpu"]["value"], q["memory_per_gpu_rounded"]["value"]
    assert rounded == math.ceil(mem / (2 * MiB)) * 2 * MiB and rounded >= mem
    assert json.loads(out)["inputs"]["allocation_granularity"]["config"] == \
        "example.allocation_granularity"
    code, out, _ = run("--plugin", p, "explain", "memory_per_gpu_rounded", "-c", EXAMPLE_CONFIG,
                       "--depth", "1")
    assert code == 0
    assert out.splitlines()[0] == \
        "memory_per_gpu_rounded = round_up_to(memory_per_gpu, allocation_granularity)"
    assert "round_up_to(" in out.splitlines()[4]
    code, out, _ = run("--plugin", p, "rounded-memory", EXAMPLE_CONFIG)
    assert code == 0 and out.endswith(" blocks)\n")
    code, out, _ = run("rounded-memory", EXAMPLE_CONFIG)
    assert code == 2  # the command exists only with the plugin
    code, out, _ = run("--plugin=" + p, "plugins", "--format", "json")
    entry = [e for e in json.loads(out)["plugins"] if e["name"] == "dlformula_example"][0]
    assert entry["kind"] == "folder"
    assert entry["hardware"] == ["acme-x1"]
    assert entry["quantities"] == ["memory_per_gpu_rounded"]
    assert entry["config_keys"] == ["example.allocation_granularity"]
    assert entry["functions"] == ["round_up_to"] and entry["commands"] == ["rounded-memory"]
    assert entry["hooks"] == ["formula_folders", "hardware_folders", "config_keys", "functions",
                              "register_commands"]


def test_dlformula_plugins_env_loads_folders(run, monkeypatch):
    monkeypatch.setenv("DLFORMULA_PLUGINS", str(EXAMPLE_PKG))
    code, out, _ = run("eval", EXAMPLE_CONFIG, "--only", "memory_per_gpu_rounded")
    assert code == 0 and "memory_per_gpu_rounded" in out


def test_plugin_functions_run_vectorized_and_from_a_warm_cache():
    import numpy as np

    eng = _engine(EXAMPLE_PKG)
    assert eng.digest != __import__("dlformula.sources", fromlist=["x"]).digest_sources(
        eng.sources)  # the function is part of the cache key
    r = eng.evaluate(EXAMPLE_CONFIG)
    values = {n: np.full(3, r.config.values[n]) for n in r.model.inputs}
    values["allocation_granularity"] = np.array([1.0, 2 * MiB, 1024 * MiB])
    fn, _ = r.model.functions(vectorized=True, only=["memory_per_gpu_rounded"])
    got = fn(values)["memory_per_gpu_rounded"]
    mem = r["memory_per_gpu"]
    assert list(got) == [math.ceil(mem), math.ceil(mem / (2 * MiB)) * 2 * MiB,
                         math.ceil(mem / 2**30) * 2**30]
    # A second process loads the model this one cached (no sympy) and binds the function
    # again (the session's cache folder: conftest.py).
    code = ("import sys; from dlformula import Engine; "
            f"r = Engine(plugins=[{str(EXAMPLE_PKG)!r}]).evaluate({EXAMPLE_CONFIG!r}); "
            "print(r['memory_per_gpu_rounded'], 'sympy' in sys.modules)")
    env = {**os.environ, "DLFORMULA_LOAD_PLUGINS": ""}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [repr(r["memory_per_gpu_rounded"]), "False"]


def test_linting_extra_files_knows_the_plugin_functions(tmp_path):
    """`dlformula check FILE` loads the installed files plus FILE: plugin functions included."""
    from dlformula.resources import extra_sources

    (tmp_path / "mine.yaml").write_text(
        "quantities:\n  params_rounded:\n    expr: round_up_to(params_total, 1e9)\n"
        "    unit: parameter\n    doc: Parameters in whole billions.\n    source: test\n")
    eng = _engine(EXAMPLE_PKG)
    fs = eng.load_formula_set(extra_sources(eng.sources, [str(tmp_path / "mine.yaml")]))
    assert "params_rounded" in fs.quantities and "memory_per_gpu_rounded" in fs.quantities


def test_export_sees_the_plugin_node_and_formula(tmp_path):
    import openpyxl

    from dlformula.excel import export

    eng = _engine(EXAMPLE_PKG)
    out = tmp_path / "plan.xlsx"
    info = export(eng, EXAMPLE_CONFIG, str(out))
    wb = openpyxl.load_workbook(out)
    sheet, cell = info.cells["memory_per_gpu_rounded"]
    assert wb[sheet][cell].value.startswith("=CEILING(")
    text = [str(c.value) for row in wb["Hardware"].iter_rows() for c in row]
    assert "acme-x1" in text
    # LibreOffice recalculates this workbook with the others in tests/test_excel.py
    # (test_a_plugin_formula_recalculates_in_libreoffice).


# -- installed plugins (entry points) -------------------------------------------------------------
DIST_NAME, DIST_VERSION = "dlformula-example", "0.1.0"
ENTRY_POINTS = "[dlformula]\nexample = dlformula_example\n"


def test_the_example_distribution_declares_the_entry_point_the_tests_install():
    text = (EXAMPLE / "pyproject.toml").read_text()
    assert f'name = "{DIST_NAME}"' in text and f'version = "{DIST_VERSION}"' in text
    assert '[project.entry-points.dlformula]\nexample = "dlformula_example"' in text


def _dist_files(entry_points: str = ENTRY_POINTS) -> dict[str, bytes]:
    """The files of the example distribution as installed: package plus .dist-info."""
    files = {f"dlformula_example/{f.relative_to(EXAMPLE_PKG).as_posix()}": f.read_bytes()
             for f in sorted(EXAMPLE_PKG.rglob("*"))
             if f.is_file() and "__pycache__" not in f.parts}
    info = f"dlformula_example-{DIST_VERSION}.dist-info"
    files[f"{info}/METADATA"] = (f"Metadata-Version: 2.1\nName: {DIST_NAME}\n"
                                 f"Version: {DIST_VERSION}\n").encode()
    files[f"{info}/WHEEL"] = (b"Wheel-Version: 1.0\nGenerator: dlformula-tests\n"
                              b"Root-Is-Purelib: true\nTag: py3-none-any\n")
    files[f"{info}/entry_points.txt"] = entry_points.encode()
    return files


@pytest.fixture
def installed(tmp_path, monkeypatch):
    """Install the example distribution in-process: a site folder with its .dist-info on
    sys.path, found by importlib.metadata like any installed distribution."""

    def install(entry_points: str = ENTRY_POINTS) -> Path:
        site = tmp_path / "site"
        for name, data in _dist_files(entry_points).items():
            (site / name).parent.mkdir(parents=True, exist_ok=True)
            (site / name).write_bytes(data)
        monkeypatch.syspath_prepend(str(site))
        monkeypatch.setenv("DLFORMULA_LOAD_PLUGINS", "example")
        return site

    yield install
    for mod in [m for m in sys.modules if m.startswith("dlformula_example")]:
        del sys.modules[mod]


def test_an_installed_plugin_is_seen_by_hardware_eval_explain_and_plugins(run, installed):
    installed()
    code, out, _ = run("hardware", "acme-x1")
    assert code == 0 and "ACME X1" in out
    code, out, err = run("eval", EXAMPLE_CONFIG, "--only", "memory_per_gpu_rounded")
    assert code == 0, err
    assert "memory_per_gpu_rounded" in out
    code, out, _ = run("explain", "memory_per_gpu_rounded")
    assert code == 0 and "example.yaml:5" in out
    code, out, _ = run("plugins", "--format", "json")
    entry = [e for e in json.loads(out)["plugins"] if e["name"] == "example"][0]
    assert (entry["kind"], entry["version"]) == ("entry point", DIST_VERSION)
    assert entry["from"] == f"{DIST_NAME} {DIST_VERSION} (entry point example = dlformula_example)"
    code, out, _ = run("plugins")
    assert f"example {DIST_VERSION} (entry point: {entry['from']})" in out.splitlines()


def test_installed_plugins_load_only_when_allowed(run, installed, monkeypatch):
    installed()
    monkeypatch.setenv("DLFORMULA_LOAD_PLUGINS", "")
    code, out, _ = run("hardware")
    assert code == 0 and "acme-x1" not in out
    monkeypatch.delenv("DLFORMULA_LOAD_PLUGINS")  # unset: every installed plugin
    code, out, _ = run("hardware")
    assert code == 0 and "acme-x1" in out
    monkeypatch.setenv("DLFORMULA_LOAD_PLUGINS", "exmaple")
    code, _, err = run("hardware")
    assert code == 1
    assert err.splitlines()[0].startswith(
        "error: DLFORMULA_LOAD_PLUGINS names 'exmaple', which is not an installed plugin "
        "(did you mean 'example'?); installed: ")


def test_an_installed_plugin_that_cannot_be_imported_is_named(run, installed):
    installed("[dlformula]\nexample = dlformula_example_missing\n")
    code, _, err = run("hardware")
    assert code == 1
    assert err.splitlines() == [
        f"error: plugin 'example' ({DIST_NAME} {DIST_VERSION} (entry point example = "
        "dlformula_example_missing)) cannot be imported: ModuleNotFoundError: No module named "
        "'dlformula_example_missing'; fix or uninstall it, or leave it out with "
        "DLFORMULA_LOAD_PLUGINS"]


def _wheel(out_dir: Path) -> Path:
    """A real wheel of the example distribution (built without a build backend)."""
    files = _dist_files()
    info = f"dlformula_example-{DIST_VERSION}.dist-info"
    record = []
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(data)}")
    record.append(f"{info}/RECORD,,")
    files[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
    path = out_dir / f"dlformula_example-{DIST_VERSION}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)
    return path


def test_a_pip_installed_plugin_in_a_temporary_environment(tmp_path):
    """pip installs the example into a fresh virtual environment (which sees this dlformula
    through a .pth file naming the running interpreter's site directories); `dlformula` run
    there finds it by its entry point."""
    import site

    pytest.importorskip("pip")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=120)
    python = venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    # --system-site-packages would see the base interpreter's packages, not those of a venv
    # these tests may run in; addsitedir also runs an editable install's .pth hook.
    venv_site = subprocess.run([str(python), "-c", "import site; print(site.getsitepackages()[0])"],
                               capture_output=True, text=True, check=True).stdout.strip()
    parents = [*site.getsitepackages(), site.getusersitepackages()]
    Path(venv_site, "dlformula_parent_env.pth").write_text(
        "".join(f"import site; site.addsitedir({d!r})\n" for d in parents))
    pip = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install",
                          "--no-index", "--no-deps", "--no-cache-dir", "--quiet",
                          str(_wheel(tmp_path))], capture_output=True, text=True, timeout=300)
    assert pip.returncode == 0, pip.stdout + pip.stderr
    env = {k: v for k, v in os.environ.items() if not k.startswith("DLFORMULA_")}
    env["DLFORMULA_CACHE_DIR"] = str(tmp_path / "cache")

    def dlformula(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(python), "-m", "dlformula.cli", *args], capture_output=True,
                              text=True, env=env, timeout=300, cwd=tmp_path)

    res = dlformula("hardware")
    assert res.returncode == 0, res.stderr
    assert any(line.startswith("acme-x1 ") for line in res.stdout.splitlines())
    res = dlformula("eval", EXAMPLE_CONFIG, "--format", "json")
    assert res.returncode == 0, res.stderr
    assert "memory_per_gpu_rounded" in json.loads(res.stdout)["quantities"]
    res = dlformula("explain", "memory_per_gpu_rounded", "--depth", "0")
    assert res.returncode == 0 and "site-packages" in res.stdout


# -- broken plugins: one clear line naming the plugin --------------------------------------------
def _b(name: str) -> str:
    return str(BROKEN / name)


def _rel(path: Path) -> str:
    from dlformula.errors import display_path

    return display_path(str(path))


@pytest.mark.parametrize("folder, message", [
    ("import_error",
     "plugin 'import_error' ({where}): cannot import __init__.py: ModuleNotFoundError: No module "
     "named 'dlformula_no_such_module'"),
    ("misspelled_hook",
     "plugin 'misspelled_hook' ({where}): unknown hook 'formula_foldrs' (did you mean "
     "'formula_folders'?); hooks: formula_folders, hardware_folders, preset_folders, "
     "config_keys, functions, register_commands"),
    ("missing_folder",
     "plugin 'missing_folder': hardware folder {where}/hardware (from hardware_folders()) does "
     "not exist; create it or stop returning it"),
    ("bad_signature",
     "plugin 'bad_signature' ({where}): hookimpl definition: formula_folders(engine); "
     "Argument(s) {{'engine'}} are declared in the hookimpl but can not be found in the "
     "hookspec; see docs/plugins.md for each hook's signature"),
    ("bad_yaml",
     "{where}/formulas/broken.yaml:6: YAML syntax error: did not find expected ',' or ']'; "
     "fix the indentation or quoting on this line (plugin 'bad_yaml')"),
])
def test_a_broken_plugin_gives_one_line_naming_it(run, folder, message):
    code, out, err = run("--plugin", _b(folder), "eval", GPT3, "--brief")
    assert code == 1 and out == ""
    assert err.splitlines() == ["error: " + message.format(where=_rel(BROKEN / folder))]


def test_broken_hardware_in_a_plugin_names_it(run):
    code, _, err = run("--plugin", _b("bad_hardware"), "hardware", "broken-x1")
    assert code == 1
    where = _rel(BROKEN / "bad_hardware" / "hardware" / "broken-x1.yaml")
    assert err.splitlines() == [
        f"error: {where}:3: spec 'hbm_capacity' needs a source: every hardware figure says "
        "where it comes from (plugin 'bad_hardware')"]


def test_two_plugins_defining_one_name_name_both_files(run):
    code, _, err = run("--plugin", _b("twice_a"), "--plugin", _b("twice_b"), "list")
    assert code == 1
    a, b = (_rel(BROKEN / x / "formulas" / "twice.yaml") for x in ("twice_a", "twice_b"))
    assert err.splitlines() == [
        f"error: {b}:2: 'doubled_step' is already defined at {a}:2; rename it, or add "
        "'override: true' to replace the earlier definition (plugin 'twice_b')"]


def test_a_missing_plugin_folder_is_a_clear_error(run):
    code, _, err = run("--plugin", _b("no_such_folder"), "list")
    assert code == 1
    assert err.splitlines() == [f"error: --plugin: plugin folder '{_b('no_such_folder')}' does "
                                "not exist or is not a folder"]


def _plugin(tmp_path: Path, name: str, code: str) -> str:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "__init__.py").write_text("from dlformula.hookspecs import Function, hookimpl\n"
                                        + code)
    return str(folder)


@pytest.mark.parametrize("code, message", [
    ("@hookimpl\ndef formula_folders():\n    return 'formulas'\n",
     "plugin 'p': hook formula_folders() must return a list, not str"),
    ("@hookimpl\ndef functions():\n    raise RuntimeError('boom')\n",
     "plugin 'p': hook functions() failed: RuntimeError: boom"),
    ("@hookimpl\ndef functions():\n    return [Function('Max', python=max)]\n",
     "plugin 'p': function 'Max': a built-in function has this name; choose another"),
    ("@hookimpl\ndef functions():\n    return [Function('f', python=abs, dims='odd')]\n",
     "plugin 'p': function 'f': dims must be one of dimensionless, same, first, sqrt, not "
     "'odd'"),
    ("@hookimpl\ndef functions():\n    return [Function('f', python=abs, excel='A1+{}')]\n",
     "plugin 'p': function 'f': excel must be a spreadsheet function name (CEILING) or a form "
     "with {} for the arguments (CEILING({},1)), not 'A1+{}'"),
    ("@hookimpl\ndef config_keys():\n    return {'width': {'unit': '1'}}\n",
     "plugin 'p': config key 'width' from config_keys() must be SECTION.KEY, e.g. example.width"),
    ("import click\n@hookimpl\ndef register_commands(cli):\n"
     "    cli.add_command(click.Command('eval'))\n",
     "plugin 'p' adds a command 'eval', which dlformula already has; rename the plugin's "
     "command"),
])
def test_a_hook_returning_the_wrong_thing_names_the_plugin(run, tmp_path, code, message):
    code_, _, err = run("--plugin", _plugin(tmp_path, "p", code), "list", "step_time")
    assert code_ == 1
    assert err.splitlines() == ["error: " + message]


def test_config_keys_become_inputs_with_their_checks(tmp_path, run):
    p = _plugin(tmp_path, "keys", (
        "@hookimpl\ndef config_keys():\n"
        "    return {'extra.width': {'unit': 'byte', 'default': 3, 'domain': 'number > 0',\n"
        "                            'doc': 'A width.'},\n"
        "            'extra.bad': {'unit': '1', 'domain': 'positive', 'doc': 'Bad.'}}\n"))
    code, _, err = run("--plugin", p, "list", "width")
    assert code == 1
    assert err.splitlines() == [
        "error: <plugin keys: config_keys()>/extra.yaml:10: bad domain for input 'bad': cannot "
        "read domain 'positive'; write e.g. 'integer >= 1', 'number > 0', '0 <= number <= 1', "
        "'number', 'boolean', or give 'choices' (plugin 'keys')"]


def test_plugin_paths_are_read_before_the_subcommand():
    from dlformula.cli_plugins import plugin_paths_from_args

    assert plugin_paths_from_args(["--no-cache", "--plugin", "a", "--plugin=b", "eval", "x",
                                   "--plugin", "c"]) == ["a", "b"]
    assert plugin_paths_from_args(["--plugin"]) == []


# -- the documentation stays true ---------------------------------------------------------------
def test_docs_describe_every_hook_and_show_the_tested_example():
    from dlformula.hookspecs import HOOK_NAMES

    text = (ROOT / "docs" / "plugins.md").read_text()
    missing = [h for h in HOOK_NAMES if f"`{h}(" not in text]
    assert missing == []
    for f in ("dlformula_example/__init__.py", "dlformula_example/formulas/example.yaml"):
        body = (EXAMPLE / f).read_text()
        assert body in text, f"docs/plugins.md no longer shows {f} as the tests use it"
    assert (EXAMPLE / "pyproject.toml").read_text() in text


def test_a_dense_model_shows_no_expert_work(engine):
    """Issue 17: a dense model showed moe_mlp_activation 210 MiB and expert_gemm_flops 1.2 TFLOP
    (the expert width defaults to ffn_hidden); every expert work and traffic figure is 0."""
    r = engine.evaluate(GPT3)
    assert r["experts"] == 0
    for name in ("expert_params", "expert_flops_per_token", "moe_mlp_flops_per_token",
                 "expert_gemm_flops", "expert_gemm_bytes",
                 "moe_elementwise_time", "moe_mlp_time", "moe_mlp_activation",
                 "ep_dispatch_bytes", "ep_a2a_count", "ep_comm_time"):
        assert r[name] == 0, name


BUSY = ("quantities:\n"
        "  busy_share:\n"
        "    expr: 1 - pipeline_bubble_fraction\n"
        "    unit: 1\n"
        "    display: percent\n"
        "    better: higher\n"
        "    doc: Share of the step the pipeline is busy.\n"
        "    source: definition\n"
        "    title: Pipeline busy\n"
        "    short: busy\n"
        "    summary: 65\n"
        "    column: 15\n")


def test_a_plugin_quantity_is_shown_as_its_yaml_says_everywhere(run, tmp_path):
    """Issue 17: display knowledge lives in the YAML (`display`, `better`, `title`, `short`,
    `summary`, `column`), so a plugin's share prints as a percent in eval, sweep, search and the
    workbook, takes its rank among the key results (eval's first lines, the workbook Summary,
    under its title) and among search's columns (under its short header), and search maximises
    what it says is better higher, the same as the core's mfu."""
    (tmp_path / "formulas").mkdir()
    (tmp_path / "formulas" / "busy.yaml").write_text(BUSY)
    p = str(tmp_path)
    code, out, err = run("--plugin", p, "eval", GPT3, "--only", "busy_share")
    assert code == 0, err
    assert re.search(r"busy_share\s+\d+\.\d %", out), out
    code, out, err = run("--plugin", p, "eval", GPT3, "--brief")
    assert code == 0, err
    keys = [line.split()[0] for line in out.splitlines()[1:]]
    assert keys[keys.index("step_time") + 1:][:2] == ["busy_share", "mfu"], out  # rank 65
    assert re.search(r"\n  busy_share +\d+\.\d %\n", out), out
    code, out, err = run("--plugin", p, "sweep", GPT3, "--vary", "parallelism.pp=8,16",
                         "--columns", "busy_share")
    assert code == 0, err
    assert len(re.findall(r"\d+\.\d %", out)) >= 2, out
    # a sweep's default columns are the `column:` ranks too: busy (15) between step time and mfu
    code, out, err = run("--plugin", p, "sweep", GPT3, "--vary", "parallelism.pp=8,16")
    assert code == 0, err
    header = out.splitlines()[0].split()
    assert header[header.index("step_time"):][:3] == ["step_time", "busy_share", "mfu"], out
    assert re.search(r" s +\d+\.\d % +\d+\.\d % ", out.splitlines()[1]), out
    code, out, err = run("--plugin", p, "search", GPT3, "--objective", "busy_share",
                         "--top", "3")
    assert code == 0, err
    assert "objective busy_share (higher is better)" in out, out
    header = next(line for line in out.splitlines() if line.startswith("rank"))
    assert re.search(r"recompute +busy +step_time +mfu +memory/GPU ", header), header
    code, out, err = run("--plugin", p, "search", GPT3, "--top", "3")
    assert code == 0, err
    header = next(line for line in out.splitlines() if line.startswith("rank"))
    assert re.search(r"recompute +step_time +busy +mfu +memory/GPU ", header), header  # 15
    row = out.splitlines()[out.splitlines().index(header) + 1]
    assert re.search(r" s +\d+\.\d % +\d+\.\d % ", row), row
    # the workbook: a Summary row under its title, after step time and before MFU, as a percent
    import openpyxl

    from dlformula.excel import export

    info = export(_engine(p), GPT3, str(tmp_path / "plan.xlsx"))
    ws = openpyxl.load_workbook(tmp_path / "plan.xlsx")["Summary"]
    rows = {c.value: c.row for c in ws["D"] if c.value in ("step_time", "busy_share", "mfu")}
    assert rows["step_time"] + 1 == rows["busy_share"] == rows["mfu"] - 1, rows
    assert ws.cell(rows["busy_share"], 1).value == "Pipeline busy"
    assert ws.cell(rows["busy_share"], 2).number_format == "0.0%"
    assert ws.cell(rows["mfu"], 1).value == "MFU"  # the core's title, from its formula file
    assert info.cells["busy_share"][0] == "Busy"  # its own sheet, named for its file
    # a misspelt display word is refused at its line
    (tmp_path / "formulas" / "busy.yaml").write_text(BUSY.replace("percent", "percentage"))
    code, _, err = run("--plugin", p, "eval", GPT3, "--only", "busy_share")
    assert code == 1 and "busy.yaml:5: quantity 'busy_share': 'display' is 'percentage'; " \
        "write percent (or leave it out)" in err, err


def test_an_override_keeps_how_the_quantity_is_shown(tmp_path):
    """An override restates the formula, not how it is shown: mfu replaced by a plugin without
    `display`, `title` or `summary` stays a percent, titled MFU, among the key results."""
    body = ("quantities:\n  mfu:\n    expr: achieved_flops_per_gpu / peak_flops\n    unit: 1\n"
            "    doc: the same.\n    source: test\n    override: true\n")
    model = _engine(_formula_plugin(tmp_path, "again", body)).model
    q = model.quantities["mfu"]
    assert q.path.endswith("again.yaml")
    assert (q.display, q.better, q.title, q.summary, q.column) == ("percent", "higher", "MFU",
                                                                   70, 20)
    assert model.summary.index("mfu") == model.summary.index("step_time") + 1


def _formula_plugin(tmp_path, name: str, body: str) -> str:
    folder = tmp_path / name
    (folder / "formulas").mkdir(parents=True)
    (folder / "formulas" / f"{name}.yaml").write_text(body)
    return str(folder)


def test_an_override_keeps_the_dimension(run, tmp_path):
    """Issue 17.7: an override in another unit was accepted, and the mismatch surfaced at the
    core file that uses it. Now the override's own line says what is wrong."""
    p = _formula_plugin(tmp_path, "seconds", "quantities:\n  memory_per_gpu:\n    expr: step_time\n"
                "    unit: s\n    doc: wrong.\n    source: test\n    override: true\n")
    code, _, err = run("--plugin", p, "eval", GPT3, "--only", "step_time")
    assert code == 1
    assert "seconds.yaml:2: 'memory_per_gpu' overrides " in err and "memory.yaml:" in err
    assert "in s (s), but the definition it replaces is in byte (byte); an override keeps " \
        "the dimension" in err


def test_a_second_override_of_one_name_must_say_whose_it_replaces(run, tmp_path):
    """The MoE plugin replaces params_active; a second plugin replacing it with plain
    `override: true` would silently win or lose by load order. It must name the plugin."""
    body = ("quantities:\n  params_active:\n    expr: params_total\n    unit: 1\n"
            "    doc: every parameter.\n    source: test\n    override: {}\n")
    p = _formula_plugin(tmp_path, "again", body.format("true"))
    code, _, err = run("--plugin", p, "eval", GPT3, "--only", "params_active")
    assert code == 1
    assert "again.yaml:2: 'params_active' is already overridden at " in err
    assert "by plugin 'moe'" in err and "write 'override: moe'" in err
    p = _formula_plugin(tmp_path, "ordered", body.format("moe"))
    code, out, err = run("--plugin", p, "eval", GPT3, "--only", "params_active", "--format",
                         "json")
    assert code == 0, err
    q = json.loads(out)["quantities"]["params_active"]["value"]
    code, out, _ = run("eval", GPT3, "--only", "params_total", "--format", "json")
    assert q == json.loads(out)["quantities"]["params_total"]["value"]
    p = _formula_plugin(tmp_path, "wrongname", body.replace("params_active", "hfu")
                .format("acme"))  # a core definition nobody replaced yet
    code, _, err = run("--plugin", p, "eval", GPT3, "--only", "hfu")
    assert code == 1 and "says 'override: acme', but the definition it would replace" in err
    assert "comes from 'dlformula'; write 'override: dlformula' or 'override: true'" in err


def test_search_varies_an_input_a_plugin_adds(run, tmp_path):
    """Issue 17.3: search's axes came from a table in search.py, so a plugin's degree was
    never varied. The input's `search:` rule in its YAML makes it an axis."""
    body = ("inputs:\n  overlap_chunks:\n"
            "    {unit: 1, default: 1, domain: 1 <= integer <= 3, config: example.chunks,\n"
            "     search: domain, doc: Chunks per collective., source: test}\n")
    p = _formula_plugin(tmp_path, "chunks", body)
    fixed = [a for k in ("parallelism.zero=1", "training.recompute=selective",
                         "parallelism.schedule=1f1b", "parallelism.vpp=1") for a in ("--fix", k)]
    code, out, err = run("--plugin", p, "search", GPT3, "--top", "3", "--format", "json", *fixed)
    assert code == 0, err
    doc = json.loads(out)
    rows = doc["layouts"] if isinstance(doc, dict) and "layouts" in doc else doc
    assert {r["overlap_chunks"] for r in rows} <= {1, 2, 3} and "overlap_chunks" in rows[0]
    p = _formula_plugin(tmp_path, "badrule", body.replace("search: domain",
                                                          "search: everything"))
    code, _, err = run("--plugin", p, "search", GPT3, "--top", "3")
    assert code == 1 and "badrule.yaml:4: input 'overlap_chunks': search rule 'everything' " \
        "is not one of gpus, domain, choices, divisors:CONFIG.KEY" in err, err
