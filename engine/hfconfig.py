"""Read a Hugging Face `config.json` from disk into dlformula model keys.

Understands the Llama family (Llama, Mistral, Qwen2 and other `*ForCausalLM` configs using the
same key names), GPT-2 style configs, Mixtral's MoE keys, DeepSeek-V2/V3's MLA and MoE keys, and
sliding-window attention with its layer pattern (Mistral, Gemma 2/3, gpt-oss).
Nothing is downloaded: give the path of a file you have.
"""

from __future__ import annotations

import json
from typing import Any, NamedTuple

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
    """Model keys (`model.layers`, ...) from the config.json at `path`."""
    return read_hf_config_notes(path)[0]


def read_hf_config_notes(path: str) -> tuple[dict[str, Any], dict[str, str]]:
    """Model keys from the config.json at `path`, and notes on the keys whose value is the
    family's Hugging Face default (the file leaves them out)."""
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
    return read_hf_data(data, path)


class Family(NamedTuple):
    """A model family as Hugging Face's config class for it defines it: the class (for
    messages), the defaults it gives keys a config.json leaves out (`save_pretrained` writes
    only keys that differ from them), and what the family's code does whatever the keys say."""

    config_class: str
    defaults: dict[str, Any]
    gated: bool  # the MLP has a gate projection (SwiGLU/GeGLU), whatever hidden_act says
    style: str  # "llama" (RMSNorm, RoPE, no biases) or "gpt2" (LayerNorm, learned positions)


_LLAMA_STYLE = {"hidden_act": "silu", "tie_word_embeddings": False, "attention_bias": False}
# transformers' configuration_*.py defaults (v4.4x)
FAMILIES: dict[str, Family] = {
    "llama": Family("LlamaConfig", {**_LLAMA_STYLE, "vocab_size": 32000, "hidden_size": 4096,
                                    "intermediate_size": 11008, "num_hidden_layers": 32,
                                    "num_attention_heads": 32,
                                    "max_position_embeddings": 2048}, True, "llama"),
    "mistral": Family("MistralConfig", {**_LLAMA_STYLE, "vocab_size": 32000,
                                        "hidden_size": 4096, "intermediate_size": 14336,
                                        "num_hidden_layers": 32, "num_attention_heads": 32,
                                        "num_key_value_heads": 8,
                                        "max_position_embeddings": 131072}, True, "llama"),
    "mixtral": Family("MixtralConfig", {**_LLAMA_STYLE, "vocab_size": 32000,
                                        "hidden_size": 4096, "intermediate_size": 14336,
                                        "num_hidden_layers": 32, "num_attention_heads": 32,
                                        "num_key_value_heads": 8,
                                        "max_position_embeddings": 131072,
                                        "num_local_experts": 8, "num_experts_per_tok": 2},
                      True, "llama"),
    "qwen2": Family("Qwen2Config", {**_LLAMA_STYLE, "vocab_size": 151936,
                                    "hidden_size": 4096, "intermediate_size": 22016,
                                    "num_hidden_layers": 32, "num_attention_heads": 32,
                                    "num_key_value_heads": 32,
                                    "max_position_embeddings": 32768}, True, "llama"),
    "qwen3": Family("Qwen3Config", dict(_LLAMA_STYLE), True, "llama"),
    "gemma": Family("GemmaConfig", {**_LLAMA_STYLE, "hidden_act": "gelu_pytorch_tanh",
                                    "tie_word_embeddings": True}, True, "llama"),
    "gemma2": Family("Gemma2Config", {**_LLAMA_STYLE, "hidden_act": "gelu_pytorch_tanh",
                                      "tie_word_embeddings": True}, True, "llama"),
    "phi3": Family("Phi3Config", dict(_LLAMA_STYLE), True, "llama"),
    "deepseek_v2": Family("DeepseekV2Config", dict(_LLAMA_STYLE), True, "llama"),
    "deepseek_v3": Family("DeepseekV3Config", dict(_LLAMA_STYLE), True, "llama"),
    "gpt2": Family("GPT2Config", {"activation_function": "gelu_new", "vocab_size": 50257,
                                  "n_positions": 1024, "n_embd": 768, "n_layer": 12,
                                  "n_head": 12, "tie_word_embeddings": True}, False, "gpt2"),
    "gpt_neox": Family("GPTNeoXConfig", {"hidden_act": "gelu", "tie_word_embeddings": False},
                       False, "gpt2"),
    "gptj": Family("GPTJConfig", {"activation_function": "gelu_new"}, False, "gpt2"),
    "opt": Family("OPTConfig", {"activation_function": "relu", "tie_word_embeddings": True},
                  False, "gpt2"),
    "starcoder2": Family("Starcoder2Config", {"hidden_act": "gelu_pytorch_tanh"}, False,
                         "gpt2"),
    "nemotron": Family("NemotronConfig", {"hidden_act": "relu2"}, False, "llama"),
}
# architectures[0] -> model_type, for a config.json without model_type
_ARCHITECTURES = {"LlamaForCausalLM": "llama", "MistralForCausalLM": "mistral",
                  "MixtralForCausalLM": "mixtral", "Qwen2ForCausalLM": "qwen2",
                  "Qwen3ForCausalLM": "qwen3", "GemmaForCausalLM": "gemma",
                  "Gemma2ForCausalLM": "gemma2", "Phi3ForCausalLM": "phi3",
                  "DeepseekV2ForCausalLM": "deepseek_v2", "DeepseekV3ForCausalLM": "deepseek_v3",
                  "GPT2LMHeadModel": "gpt2", "GPTNeoXForCausalLM": "gpt_neox",
                  "GPTJForCausalLM": "gptj", "OPTForCausalLM": "opt",
                  "Starcoder2ForCausalLM": "starcoder2", "NemotronForCausalLM": "nemotron"}


def family_of(data: dict[str, Any]) -> tuple[str, Family | None]:
    """The family a config.json belongs to, by model_type, else by architectures."""
    model_type = str(data.get("model_type") or "").lower()
    if model_type not in FAMILIES:
        archs = data.get("architectures")
        if isinstance(archs, list):
            for a in archs:
                if isinstance(a, str) and a in _ARCHITECTURES:
                    model_type = _ARCHITECTURES[a]
                    break
    return model_type, FAMILIES.get(model_type)


def read_hf_data(data: dict[str, Any], path: str) -> tuple[dict[str, Any], dict[str, str]]:
    """Model keys from a config.json's data, and for each key taken from the family's
    defaults rather than the file, a note saying so."""
    model_type, family = family_of(data)
    defaulted: dict[str, str] = {}
    present = {k: v for k, v in data.items() if v is not None}
    if family is not None:
        for k, v in family.defaults.items():
            if k not in present:
                present[k] = v
                defaulted[k] = f"{family.config_class} default {k}={v!r}"

    out: dict[str, Any] = {}
    notes: dict[str, str] = {}
    for key, names in {**_COMMON, **_OPTIONAL}.items():
        for n in names:
            if present.get(n) is not None:
                value = present[n]
                if isinstance(value, bool) or not isinstance(value, (int, float)):
                    raise UsageError(f"'{n}' must be a number, not {value!r}", path)
                out[key] = value
                if n in defaulted:
                    notes[key] = defaulted[n]
                break
        else:
            if key in _COMMON:
                raise UsageError(f"no {' or '.join(names)} in this config; dlformula reads "
                                 "Llama-, GPT-2-, Mixtral- and DeepSeek-style configs", path)
    gpt2_like = (family.style == "gpt2" if family is not None
                 else model_type in ("gpt2", "gpt_neox", "gptj", "opt") or "n_embd" in data)
    if "model.kv_heads" not in out:
        out["model.kv_heads"] = out["model.heads"]
    if "model.ffn_hidden" not in out:
        out["model.ffn_hidden"] = 4 * out["model.hidden"]
    if "moe.experts" in out and "moe.expert_ffn_hidden" not in out:
        out["moe.expert_ffn_hidden"] = out["model.ffn_hidden"]
    act_key = "hidden_act" if "hidden_act" in present else "activation_function"
    act = str(present.get(act_key, "")).lower()
    if family is not None:
        out["model.glu"] = family.gated
        if act_key in defaulted:
            notes["model.glu"] = (f"{family.config_class}: gated MLP "
                                  f"({defaulted[act_key]})")
    else:
        out["model.glu"] = not gpt2_like and act in ("silu", "swiglu", "gelu_pytorch_tanh",
                                                     "geglu", "gelu")
    tie = present.get("tie_word_embeddings", gpt2_like)
    out["model.tied_embeddings"] = bool(tie)
    if "tie_word_embeddings" in defaulted:
        notes["model.tied_embeddings"] = defaulted["tie_word_embeddings"]
    out["model.norm"] = "layernorm" if gpt2_like else "rmsnorm"
    out["model.linear_bias"] = bool(present.get("attention_bias", gpt2_like))
    if "attention_bias" in defaulted:
        notes["model.linear_bias"] = defaulted["attention_bias"]
    if family is not None:
        learned = model_type in ("gpt2", "opt")
    else:
        learned = gpt2_like
    out["model.position_embedding"] = "learned" if learned else "rope"
    window = _sliding_window(present, model_type, path)
    if window is not None:
        out["model.sliding_window"], out["model.full_attention_every"] = window
    return out, notes


# Families whose Hugging Face code alternates windowed and full layers when the config.json
# has no layer_types (transformers' modeling_gemma2.py: every other layer is sliding).
_ALTERNATING = {"gemma2": 2}


def _sliding_window(present: dict[str, Any], model_type: str,
                    path: str) -> tuple[int, int] | None:
    """(sliding_window, full_attention_every) from a config.json's sliding_window with its
    layer pattern (layer_types, sliding_window_pattern), or None when attention is not
    windowed (no sliding_window, or use_sliding_window false as Qwen2/Qwen3 ship it)."""
    window = present.get("sliding_window")
    if window is None or present.get("use_sliding_window") is False:
        return None
    if isinstance(window, bool) or not isinstance(window, (int, float)) or window < 0:
        raise UsageError(f"'sliding_window' must be a number of tokens, not {window!r}", path)
    every = _ALTERNATING.get(model_type, 0)
    pattern = present.get("sliding_window_pattern")
    types = present.get("layer_types")
    if isinstance(pattern, int) and not isinstance(pattern, bool) and pattern > 0:
        every = pattern  # Gemma 3: one global layer in every `pattern`
    elif isinstance(types, list) and types:
        full = sum(1 for x in types if x == "full_attention")
        if full == 0:
            every = 0
        elif full == len(types):
            return None  # no layer is windowed
        else:
            every = max(1, round(len(types) / full))
    return int(window), every
