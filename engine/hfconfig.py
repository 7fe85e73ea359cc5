"""Read a Hugging Face `config.json` from disk into dlformula model keys.

Understands the Llama family (Llama, Mistral, Qwen2 and other `*ForCausalLM` configs using the
same key names), GPT-2 style configs, Mixtral's MoE keys and DeepSeek-V2/V3's MLA and MoE keys.
Nothing is downloaded: give the path of a file you have.
"""

from __future__ import annotations

import json
from typing import Any

from .errors import UsageError

# dlformula key -> Hugging Face keys to try, in order
_COMMON = {
    "model.layers": ("num_hidden_layers", "n_layer", "num_layers"),
    "model.hidden": ("hidden_size", "n_embd", "d_model"),
    "model.heads": ("num_attention_heads", "n_head"),
    "model.vocab": ("vocab_size",),
    "model.max_position": ("max_position_embeddings", "n_positions"),
}
_OPTIONAL = {
    "model.kv_heads": ("num_key_value_heads",),
    "model.head_dim": ("head_dim",),
    "model.ffn_hidden": ("intermediate_size", "n_inner", "ffn_dim"),
    "moe.experts": ("num_local_experts", "n_routed_experts"),
    "moe.top_k": ("num_experts_per_tok",),
    "moe.expert_ffn_hidden": ("moe_intermediate_size",),
    "moe.shared_experts": ("n_shared_experts",),
    "moe.first_dense_layers": ("first_k_dense_replace",),
    "moe.moe_every": ("moe_layer_freq",),
    "mla.q_lora_rank": ("q_lora_rank",),
    "mla.kv_lora_rank": ("kv_lora_rank",),
    "mla.qk_nope_head_dim": ("qk_nope_head_dim",),
    "mla.qk_rope_head_dim": ("qk_rope_head_dim",),
    "mla.v_head_dim": ("v_head_dim",),
}


MAX_JSON_DEPTH = 32


def _check_json_depth(text: str, path: str) -> None:
    """Refuse JSON nested deeper than MAX_JSON_DEPTH before json (which recurses) reads it."""
    if text.count("[") + text.count("{") <= MAX_JSON_DEPTH:
        return
    import re

    depth = 0
    for m in re.finditer(r'"(?:[^"\\]|\\.)*"|[\[\]{}]', text):
        tok = m.group()
        if tok in "[{":
            depth += 1
            if depth > MAX_JSON_DEPTH:
                line = text.count("\n", 0, m.start()) + 1
                raise UsageError(f"JSON nested more than {MAX_JSON_DEPTH} levels deep; a "
                                 "config.json is flat", path, line)
        elif tok in "]}":
            depth -= 1


def read_hf_config(path: str) -> dict[str, Any]:
    import os

    from .yamlfile import read_file_text

    if not os.path.lexists(path):
        raise UsageError(f"Hugging Face config '{path}' does not exist; give the path of a "
                         "config.json on disk")
    text = read_file_text(path, "Hugging Face config", UsageError)
    _check_json_depth(text, path)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"not valid JSON: {exc.msg}; is this a config.json?", path,
                         exc.lineno) from None
    except (RecursionError, ValueError) as exc:
        raise UsageError(f"cannot read this JSON: {type(exc).__name__}", path) from None
    if not isinstance(data, dict):
        raise UsageError("a Hugging Face config.json is a JSON object", path, 1)

    out: dict[str, Any] = {}
    for key, names in {**_COMMON, **_OPTIONAL}.items():
        for n in names:
            if data.get(n) is not None:
                out[key] = data[n]
                break
        else:
            if key in _COMMON:
                raise UsageError(f"no {' or '.join(names)} in this config; dlformula reads "
                                 "Llama-, GPT-2-, Mixtral- and DeepSeek-style configs", path)
    model_type = str(data.get("model_type", "")).lower()
    gpt2_like = model_type in ("gpt2", "gpt_neox", "gptj", "opt") or "n_embd" in data
    if "model.kv_heads" not in out:
        out["model.kv_heads"] = out["model.heads"]
    if "model.ffn_hidden" not in out:
        out["model.ffn_hidden"] = 4 * out["model.hidden"]
    if "moe.experts" in out and "moe.expert_ffn_hidden" not in out:
        out["moe.expert_ffn_hidden"] = out["model.ffn_hidden"]
    act = str(data.get("hidden_act", data.get("activation_function", ""))).lower()
    out["model.glu"] = not gpt2_like and act in ("silu", "swiglu", "gelu_pytorch_tanh", "geglu",
                                                  "gelu") and model_type != "nemotron"
    out["model.tied_embeddings"] = bool(data.get("tie_word_embeddings", gpt2_like))
    out["model.norm"] = "layernorm" if gpt2_like else "rmsnorm"
    out["model.linear_bias"] = bool(data.get("attention_bias", gpt2_like))
    out["model.position_embedding"] = "learned" if gpt2_like else "rope"
    return out
