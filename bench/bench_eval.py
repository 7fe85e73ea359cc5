"""Start-up and library benchmark: the figures of issue 16's goal table, in one run.

- warm `dlformula eval examples/gpt3-175b.yaml` against `python -c pass` and, when given,
  dlcalc's `3dtrn` on the same GPT-3 layout (goal: at or below dlcalc);
- cold `eval` (empty cache: parses the formulas, generates the code; goal <= 1 s);
- warm `explain act_memory -c ...` (from the cached model, no sympy; goal <= 0.2 s);
- `export` with an empty cache (goal <= 1 s);
- `Engine.evaluate(path, overrides)` in one process, a different layout each call, against
  llm-analysis's `train()` when a Python with llm-analysis is given (goal: at least as fast).

Commands run alternately and the medians are printed; these machines are noisy, read the
ratios of one run.

    python bench/bench_eval.py [--runs 20] [--dlcalc /path/to/3dtrn]
                               [--llm-analysis /path/to/python-with-llm-analysis]

Neither peer is a dependency: `python -m venv /tmp/dlc && /tmp/dlc/bin/pip install dlcalc`,
then `--dlcalc /tmp/dlc/bin/3dtrn`; `python -m venv /tmp/lla && /tmp/lla/bin/pip install
llm-analysis`, then `--llm-analysis /tmp/lla/bin/python`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "gpt3-175b.yaml"
DLCALC_CONFIG = ROOT / "bench" / "data" / "dlcalc-gpt3-175b.yaml"
LAYOUTS = [(8, 8, 16), (4, 8, 32), (8, 4, 32), (2, 8, 64)]

# llm-analysis's train() on a layout of the same kind, a different micro-batch each call.
LLM_ANALYSIS = """
import contextlib, io, logging, time
from llm_analysis import analysis
logging.disable(logging.CRITICAL)
kw = dict(model_name="facebook_opt-1.3b", gpu_name="a100-sxm-80gb", dtype_name="w16a16e16",
          log_level="CRITICAL", seq_len=2048, global_batch_size=1536, total_num_tokens=300e9,
          activation_recomputation=1, ds_zero=1, tp_size=8, pp_size=1, total_num_gpus=64,
          flops_efficiency=0.5, hbm_memory_efficiency=0.9)
with contextlib.redirect_stdout(io.StringIO()):
    analysis.train(**kw)
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < 3:
        analysis.train(**{**kw, "batch_size_per_gpu": 1 + n % 4})
        n += 1
print(n / (time.perf_counter() - start))
"""


def timed(cmd: list[str], env: dict[str, str] | None = None) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, env=env)
    return time.perf_counter() - start


def medians(cmds: dict[str, list[str]], runs: int, env: dict[str, str],
            before: dict[str, object] | None = None) -> dict[str, float]:
    """Median wall time of each command, the commands run alternately."""
    samples: dict[str, list[float]] = {name: [] for name in cmds}
    for _ in range(runs):
        for name, cmd in cmds.items():
            hook = (before or {}).get(name)
            if callable(hook):
                hook()
            samples[name].append(timed(cmd, env))
    return {name: statistics.median(s) for name, s in samples.items()}


def engine_rate(seconds: float = 3.0) -> float:
    """Engine.evaluate(path, overrides) per second, a different layout each call."""
    from dlformula import Engine

    engine = Engine()
    path = str(EXAMPLE)
    engine.evaluate(path)
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        tp, pp, dp = LAYOUTS[n % len(LAYOUTS)]
        engine.evaluate(path, {"parallelism.tp": tp, "parallelism.pp": pp,
                               "parallelism.dp": dp, "training.micro_batch": 1 + n % 2})
        n += 1
    return n / (time.perf_counter() - start)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--dlcalc", default=shutil.which("3dtrn"), help="path to dlcalc's 3dtrn")
    ap.add_argument("--llm-analysis", help="a Python interpreter with llm-analysis installed")
    args = ap.parse_args()
    exe = shutil.which("dlformula") or sys.exit("install dlformula first (pip install .)")

    cache = tempfile.mkdtemp(prefix="dlformula-bench-")
    empty = tempfile.mkdtemp(prefix="dlformula-bench-empty-")
    env = dict(os.environ, DLFORMULA_CACHE_DIR=cache)
    out = tempfile.mkdtemp(prefix="dlformula-bench-out-")

    def clear() -> None:
        shutil.rmtree(empty, ignore_errors=True)

    eval_cmd = [exe, "eval", str(EXAMPLE)]
    cold_env = dict(os.environ, DLFORMULA_CACHE_DIR=empty)
    few = max(3, args.runs // 4)
    cold: dict[str, float] = {}
    for name, cmd in (("eval, cold cache", eval_cmd),
                      ("export, empty cache",
                       [exe, "export", str(EXAMPLE), "-o", os.path.join(out, "plan.xlsx")])):
        samples = []
        for _ in range(few):
            clear()
            samples.append(timed(cmd, cold_env))
        cold[name] = statistics.median(samples)
    timed(eval_cmd, env)  # populate the cache
    cmds = {"python -c pass": [sys.executable, "-c", "pass"],
            "dlformula eval, warm cache": eval_cmd,
            "dlformula explain act_memory, warm": [exe, "explain", "act_memory", "-c",
                                                   str(EXAMPLE)]}
    if args.dlcalc:
        cmds["dlcalc 3dtrn (GPT-3 175B)"] = [args.dlcalc, str(DLCALC_CONFIG)]
    warm = medians(cmds, args.runs, env)
    print(f"{'command':<42}{'median s':>10}")
    for name, t in {**warm, **cold}.items():
        print(f"{name:<42}{t:>10.3f}")
    base = warm["python -c pass"]
    w = warm["dlformula eval, warm cache"]
    print(f"\nwarm eval / python -c pass = {w / base:.2f}")
    if args.dlcalc:
        print(f"warm eval / dlcalc 3dtrn = {w / warm['dlcalc 3dtrn (GPT-3 175B)']:.2f}")
    os.environ["DLFORMULA_CACHE_DIR"] = cache
    rate = engine_rate()
    print(f"\nEngine.evaluate(path, overrides), a different layout each call: {rate:,.0f}/s")
    if args.llm_analysis:
        res = subprocess.run([args.llm_analysis, "-c", LLM_ANALYSIS], capture_output=True,
                             text=True, check=True)
        theirs = float(res.stdout.strip().splitlines()[-1])
        print(f"llm-analysis train(), a different micro-batch each call: {theirs:,.0f}/s")
        print(f"Engine / llm-analysis = {rate / theirs:.2f}")
    for folder in (cache, empty, out):
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
