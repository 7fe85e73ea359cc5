"""Issue 14: a Hugging Face config.json is read by its family (model_type, else architectures)
with that family's defaults for the keys it leaves out, and the `from` column says so."""

from __future__ import annotations

import json

from conftest import DATA, EXAMPLES

GPT3 = str(EXAMPLES / "gpt3-175b.yaml")
LAYOUT = ["parallelism.tp=8", "parallelism.pp=1", "parallelism.dp=128",
          "training.global_batch=1024"]


def _llama8b(tmp_path, drop=(), **changes):
    data = json.loads((DATA / "hf" / "llama3.1-8b.json").read_text())
    for k in drop:
        del data[k]
    data.update(changes)
    p = tmp_path / "config.json"
    p.write_text(json.dumps(data))
    return str(p)


def test_llama_without_hidden_act_is_gated(engine, tmp_path):
    path = _llama8b(tmp_path, drop=["hidden_act"])
    r = engine.evaluate(GPT3, LAYOUT, hf_config=path)
    assert r["params_total"] == 8_030_261_248  # as with hidden_act: silu
    assert r.config.origins["glu"].kind == "hf_config default"
    assert r.config.origins["hidden"].kind == "hf_config"


def test_llama_by_architectures_alone(engine, tmp_path):
    path = _llama8b(tmp_path, drop=["hidden_act", "model_type", "tie_word_embeddings",
                                    "attention_bias"])
    r = engine.evaluate(GPT3, LAYOUT, hf_config=path)
    assert r["params_total"] == 8_030_261_248
    assert r.config.origins["tied_embeddings"].kind == "hf_config default"


def test_llama_family_shape_defaults(engine, tmp_path):
    # save_pretrained writes only what differs from LlamaConfig's defaults: Llama-2-7B's shape
    p = tmp_path / "config.json"
    p.write_text(json.dumps({"model_type": "llama", "architectures": ["LlamaForCausalLM"]}))
    r = engine.evaluate(GPT3, ["parallelism.tp=8", "parallelism.pp=1", "parallelism.dp=128",
                               "training.global_batch=1024", "training.seq_len=2048"],
                        hf_config=str(p))
    assert abs(r["params_total"] / 6_738_415_616 - 1) < 1e-9  # Llama-2-7B
    assert r.config.origins["layers"].kind == "hf_config default"


def test_gated_activation_does_not_make_starcoder2_gated(tmp_path):
    from dlformula.hfconfig import read_hf_config

    p = tmp_path / "config.json"
    p.write_text(json.dumps({"model_type": "starcoder2", "hidden_size": 3072,
                             "num_hidden_layers": 30, "num_attention_heads": 24,
                             "vocab_size": 49152, "intermediate_size": 12288,
                             "max_position_embeddings": 16384,
                             "hidden_act": "gelu_pytorch_tanh"}))
    assert read_hf_config(str(p))["model.glu"] is False


def test_table_says_which_values_are_defaults(run, tmp_path):
    path = _llama8b(tmp_path, drop=["hidden_act"])
    code, out, err = run("eval", GPT3, "--hf-config", path, *sum((["--set", s] for s in LAYOUT),
                                                                 []))
    assert code == 0, err
    glu = next(line for line in out.splitlines() if line.split()[:1] == ["glu"])
    assert "hf_config default" in glu


def test_non_numeric_shape_is_one_line(run, tmp_path):
    path = _llama8b(tmp_path, hidden_size="big")
    code, _, err = run("eval", GPT3, "--hf-config", path)
    assert code == 2 and err.startswith("error: ") and "'hidden_size' must be a number" in err
