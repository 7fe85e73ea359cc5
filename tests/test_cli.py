"""The command line: formats, the JSON contract, help for every command, exit codes."""

from __future__ import annotations

import csv
import io
import json
import os

import pytest
import yaml

from conftest import EXAMPLES

GPT3 = str(EXAMPLES / "gpt3-175b.yaml")


def test_eval_table_key_results_first(run):
    code, out, err = run("eval", GPT3)
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[0].startswith("Key results: ") and "gpt3-175b on 1024 x a100-sxm4-80gb" in lines[0]
    assert "memory_per_gpu" in lines[1] and "of 80.00 GiB" in lines[1] and "fits" in lines[1]
    order = [line.split()[0] for line in lines[2:6]]
    assert order == ["step_time", "mfu", "hfu", "tokens_per_second"]
    assert "[memory]" in out and "[time]" in out
    assert "GiB" in out and "TFLOP/s" in out and "days" in out


def test_brief_training_days_states_the_goodput_it_assumes(run):
    """training_days is a wall-clock forecast: the key results say at what goodput, and whether
    it is the config's or the estimate from interruptions at the GPU count."""
    code, out, _ = run("eval", GPT3, "--brief")
    line = next(x for x in out.splitlines() if x.strip().startswith("training_days"))
    # 1,024 GPUs at Llama 3's rate: 1 / (1 + 1024 x 2.195e-5 / h x 1002 s) = 99.4%
    share = 1 / (1 + 1024 * 2.195e-5 * 1002 / 3600)
    assert code == 0 and f"(at {100 * share:.1f}% goodput, Llama 3's interruption rate" in line
    assert "set training.goodput" in line
    code, out, _ = run("eval", GPT3, "--brief", "--set", "training.goodput=0.8")
    line = next(x for x in out.splitlines() if x.strip().startswith("training_days"))
    assert code == 0 and line.endswith("(at 80.0% goodput, as given)")


def test_eval_json_contract(run, gpt3):
    code, out, _ = run("eval", GPT3, "--format", "json")
    assert code == 0
    data = json.loads(out)
    q = data["quantities"]
    for name in ["params_total", "states_memory", "act_memory", "memory_per_gpu",
                 "flops_per_step", "step_time", "mfu", "tokens_per_second", "training_days"]:
        # Step time and what follows from it carry the validated runs' error band too.
        banded = name in ("step_time", "mfu", "tokens_per_second", "training_days")
        assert set(q[name]) == {"value", "unit", "doc"} | ({"band"} if banded else set())
        assert q[name]["value"] == pytest.approx(gpt3[name])
    assert q["memory_per_gpu"]["unit"] == "byte" and q["step_time"]["unit"] == "s"
    assert data["inputs"]["tp"]["value"] == 8
    assert data["inputs"]["recompute"]["value"] == "selective"
    assert data["inputs"]["sp"]["value"] is True


def test_eval_csv_yaml_only(run):
    code, out, _ = run("eval", GPT3, "--format", "csv", "--only", "act_*")
    rows = list(csv.DictReader(io.StringIO(out)))
    assert code == 0 and rows and all(r["name"].startswith("act_") for r in rows)
    code, out, _ = run("eval", GPT3, "--format", "yaml", "--only", "step_time")
    data = yaml.safe_load(out)
    assert list(data["quantities"]) == ["step_time"]


def test_eval_only_takes_several_patterns_and_refuses_one_that_matches_nothing(run):
    code, out, _ = run("eval", GPT3, "--format", "json", "--only", "step_time, mfu,act_mem*")
    assert code == 0
    names = set(json.loads(out)["quantities"])
    assert {"step_time", "mfu", "act_memory"} <= names
    assert all(n == "mfu" or "step_time" in n or n.startswith("act_mem") for n in names)
    code, out, err = run("eval", GPT3, "--only", "no_such_name")
    assert code == 2 and out == ""
    assert "--only 'no_such_name' matches no quantity" in err and "Traceback" not in err


def test_explain_with_config(run):
    code, out, _ = run("explain", "act_memory", "-c", GPT3)
    assert code == 0
    first = out.splitlines()[0]
    assert first.startswith("act_memory = act_per_layer * stage_inflight_layers")
    assert "memory.yaml:" in out.splitlines()[3] and "defined at " in out
    assert "= 9.01 GiB" in out
    assert "└── " in out and "input, training.recompute = selective" in out
    # every quantity is expanded once; later mentions point back
    assert out.count("\nact_per_layer = ") + out.count("── act_per_layer = ") == 1


def test_explain_latex_names_are_whole_and_choices_are_labels(run):
    """Issue 17: sympy's default made `achieved_{flops per gpu}` and `precision = 2`."""
    code, out, _ = run("explain", "peak_flops", "--depth", "0", "--latex")
    assert code == 0
    latex = next(line for line in out.splitlines() if "latex: " in line)
    assert r"\mathrm{peak\_flops\_fp8} & \text{for}\: \mathrm{precision} = \text{fp8}" in latex
    assert "_{" not in latex and "= 2" not in latex


def test_explain_symbolic_depth_latex(run):
    code, out, _ = run("explain", "mfu", "--depth", "1", "--latex")
    assert code == 0
    assert "latex: \\frac{" in out and "uses: " in out and "= " not in out.split("\n")[4]


def test_list_graph_hardware_presets(run):
    code, out, _ = run("list", "memory")
    assert code == 0 and "memory_per_gpu" in out
    code, out, _ = run("graph", "mfu", "--format", "mermaid")
    assert code == 0 and out.startswith("flowchart LR") and "peak_flops --> mfu" in out
    code, out, _ = run("graph", "act_memory")
    assert code == 0 and '"act_per_layer" -> "act_memory";' in out
    code, out, _ = run("hardware")
    assert code == 0 and all(n in out for n in ["a100-sxm4-80gb", "h100-sxm", "h200", "mi300x"])
    # Each figure in the file's own unit: the A100's price is 2.79 USD per GPU-hour.
    a100 = next(line.split() for line in out.splitlines() if line.startswith("a100-sxm4-80gb "))
    assert a100[1:5] == ["312", "0", "-", "80"] and a100[9] == "2.79"
    gb300 = next(line.split() for line in out.splitlines() if line.startswith("gb300-nvl72 "))
    assert gb300[1:4] == ["2500", "5000", "15000"]  # FP4 where the part has it
    code, out, _ = run("hardware", "h100-sxm")
    assert code == 0 and "source:" in out and "hbm_capacity" in out
    code, out, _ = run("presets")
    assert code == 0 and "llama3.1-405b" in out and "gpt3-175b" in out
    code, out, _ = run("presets", "gpt3-175b")
    assert code == 0 and "model.layers" in out and "Brown et al." in out


@pytest.mark.parametrize("cmd", ["eval", "explain", "list", "graph", "check", "hardware",
                                 "presets"])
def test_every_command_has_help(run, cmd):
    code, out, _ = run(cmd, "--help")
    assert code == 0 and out.startswith(f"Usage: dlformula {cmd}")


@pytest.mark.parametrize("args,code,message", [
    (["eval"], 2, "error: Missing argument 'CONFIG'. (see `dlformula eval --help`)"),
    (["eval", GPT3, "--format", "xml"], 2, "error: Invalid value for '--format'"),
    (["frobnicate"], 2, "error: No such command 'frobnicate'."),
    (["explain", "act_memroy"], 2, "error: no quantity or input named 'act_memroy' (did you "
                                   "mean 'act_memory'?); `dlformula list` shows them all"),
    (["graph", "nope"], 2, "error: no name 'nope'"),
    (["hardware", "h100"], 2, "error: unknown hardware node 'h100'"),
    (["list", "zzzz"], 2, "error: nothing matches 'zzzz'"),
])
def test_usage_errors(run, args, code, message):
    got, out, err = run(*args)
    assert got == code
    assert err.startswith(message) and err.count("\n") == 1
    assert "Traceback" not in err


def test_eval_is_the_console_script(tmp_path):
    """The installed `dlformula` command works from any directory. It is looked up where this
    interpreter's installation puts scripts, not on PATH (a venv's python run by its full path
    has its scripts off PATH)."""
    import subprocess
    import sysconfig

    exe = os.path.join(sysconfig.get_path("scripts"), "dlformula")
    assert os.access(exe, os.X_OK), f"{exe} missing: install the project first"
    res = subprocess.run([exe, "eval", GPT3, "--only", "step_time", "--format", "json"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["quantities"]["step_time"]["value"] > 0


def test_warnings_go_to_stderr_and_do_not_stop(run):
    code, out, err = run("eval", GPT3, "--set", "training.global_batch=15360", "--brief")
    assert code == 0 and out.startswith("Key results")
    assert err == ("warning: the batch of 31.46 M token exceeds the critical batch of about "
                   "15.33 M token (Kaplan et al. 2020): larger batches waste compute; lower "
                   "training.global_batch\n")
    code, out, err = run("eval", GPT3, "--set", "parallelism.tp=1", "--set", "parallelism.dp=128",
                         "--brief")
    assert code == 0 and "DOES NOT FIT" in out
    assert "warning: memory_per_gpu = " in err and "exceeds hbm_capacity = 80.00 GiB" in err


def test_breakdown_layer_table(run):
    code, out, _ = run("eval", GPT3, "--breakdown", "layer")
    assert code == 0
    rows = [line.split()[0] for line in out.splitlines()[2:]]
    assert rows == ["norm1", "qkv", "logits", "softmax", "attn_dropout", "attend", "out_proj",
                    "norm2", "fc1", "act", "fc2", "total"]
    assert "scale-up domain" in out.splitlines()[0]


def test_bytes_read_byte_and_reach_zebibytes():
    """Issue 17.6: "B" meant bytes in one line and billions in the next, and a run's total
    traffic printed as 28,061,082,822.66 TiB. One table (humanize.STEPS) for CLI and workbook."""
    from dlformula.humanize import human

    assert human(512, "byte") == ("512.00", "byte")
    assert human(3e22, "byte") == ("25.41", "ZiB")
    assert human(2.0**50 * 3, "byte") == ("3.00", "PiB")
    assert human(174.6e9, "parameter") == ("174.6", "B parameter")
    assert human(5e5, "B/s") == ("5e+05", "byte/s")


def test_brief_leaves_out_times_the_layout_does_not_spend(run):
    """A dense model spends no expert-parallel time and tp 1 no TP time: the brief says nothing
    of them rather than `ep_comm_time 0 s`; an MoE model's expert-parallel time is shown."""
    code, out, err = run("eval", GPT3, "--brief")
    assert code == 0, err
    assert "ep_comm_time" not in out and "  tp_comm_time" in out
    code, out, err = run("eval", GPT3, "--brief", "--set", "parallelism.tp=1",
                         "--set", "parallelism.dp=128", "--set", "parallelism.sp=false")
    assert code == 0, err
    assert "tp_comm_time" not in out and "  dp_comm_time" in out
    code, out, err = run("eval", str(EXAMPLES / "deepseek-v3-h800.yaml"), "--brief")
    assert code == 0, err
    assert "  ep_comm_time" in out


@pytest.mark.parametrize("fmt", ["json", "csv", "yaml"])
def test_brief_with_a_machine_format_is_refused_in_one_line(run, fmt):
    """Issue 17: `--format json --brief` printed the table. The combination is refused (exit 2,
    nothing on stdout), saying how to choose names for a machine-readable report."""
    code, out, err = run("eval", GPT3, "--format", fmt, "--brief")
    assert code == 2 and out == ""
    assert err.strip().splitlines() == [
        f"error: --brief prints a table for people, so it does not combine with --format {fmt}; "
        f"drop one of them (--only PATTERN chooses the names of a {fmt} report)"]
