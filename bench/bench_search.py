"""Search benchmark: wall time and peak memory of `dlformula search` from a shell, warm cache,
for the 2.9T-parameter MoE example (23,040 A100s; goal: under 1 s and 300 MB), Llama 3.1 405B
on 16,384 H100s over the full layout space, and the 70B / 64-GPU example of docs/search.md.
Prints medians, peak RSS and the layout counts; asserts nothing.

    python bench/bench_search.py [--runs 5]

The command runs through `python -c` calling the program's entry point, so the figure is the
same as for the `dlformula` script (Python start-up included); the child reports its own peak
RSS (VmHWM).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUNNER = ("import sys; from dlformula.launch import main; code = main(sys.argv[1:]); "
          "hwm = [l.split()[1] for l in open('/proc/self/status') if l.startswith('VmHWM')]; "
          "print('peak_kib', *hwm, file=sys.stderr); sys.exit(code)")
MOE = ["search", str(ROOT / "examples" / "moe-2.9t.yaml")]
LLAMA_405B = ["search", "--gpus", "16384", "--set", "model.preset=llama3.1-405b",
              "--set", "hardware.node=h100-sxm", "--set", "training.seq_len=8192",
              "--set", "training.global_batch=2048", "--set", "training.tokens=15.6e12"]
LLAMA_70B = ["search", str(ROOT / "examples" / "llama3-70b.yaml"), "--gpus", "64",
             "--set", "training.seq_len=4096", "--set", "training.global_batch=1024"]


def wall(args: list[str], env: dict[str, str]) -> tuple[float, str, float]:
    """(seconds, stdout, peak RSS in MiB) of one run."""
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", RUNNER, *args], capture_output=True, text=True,
                         env=env, check=True)
    seconds = time.perf_counter() - start
    peak = [line.split()[1] for line in out.stderr.splitlines() if line.startswith("peak_kib")]
    return seconds, out.stdout, float(peak[0]) / 1024 if peak else float("nan")


def in_process(args: list[str]) -> float:
    """The search call alone (engine loaded, config resolved inside), best of three."""
    from dlformula import Engine
    from dlformula.search import search

    engine = Engine()
    engine.model.functions(vectorized=True)
    sets = [args[i + 1] for i, a in enumerate(args) if a == "--set"]
    gpus = int(args[args.index("--gpus") + 1]) if "--gpus" in args else None
    config = args[1] if not args[1].startswith("--") else None
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        search(config, gpus=gpus, sets=sets, engine=engine, top=10)
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    env = dict(os.environ, DLFORMULA_CACHE_DIR=tempfile.mkdtemp(prefix="dlformula-bench-"))
    cold, _, _ = wall(LLAMA_405B, env)  # fills the cache (compiles the model)
    print(f"first run (builds the model cache): {cold:.2f} s")
    for name, cmd in (("MoE 2.9T on 23,040 x a100-sxm4-40gb (examples/moe-2.9t.yaml)", MOE),
                      ("Llama 3.1 405B on 16,384 x h100-sxm", LLAMA_405B),
                      ("Llama 3 70B on 64 x h100-sxm (docs/search.md)", LLAMA_70B)):
        times, out, peaks = [], "", []
        for _ in range(args.runs):
            seconds, out, peak = wall(cmd, env)
            times.append(seconds)
            peaks.append(peak)
        counts = out.splitlines()[1]
        shown = " ".join(os.path.relpath(a, ROOT) if a.endswith(".yaml") else a for a in cmd)
        print(f"{name}: `dlformula {shown}`")
        print(f"  wall, warm cache: median {statistics.median(times):.2f} s, best "
              f"{min(times):.2f} s over {args.runs} runs; peak RSS {max(peaks):.0f} MiB; "
              f"search() alone {in_process(cmd):.3f} s")
        print(f"  {counts}")
        best = next((line for line in out.splitlines() if line.startswith("Recommended")), "")
        print(f"  {best}")


if __name__ == "__main__":
    main()
