"""Start-up benchmark: `dlformula eval examples/gpt3-175b.yaml`, warm and cold cache.

Compares, in one run on one machine, against `python -c pass` and, when available, dlcalc's
`3dtrn` (the fastest peer calculator CLI) on the same GPT-3 layout. Prints medians; these
machines are noisy, so read the ratios.

    python bench/bench_eval.py [--runs 20] [--dlcalc /path/to/3dtrn]

dlcalc is not a dependency: `python -m venv /tmp/dlc && /tmp/dlc/bin/pip install dlcalc`, then
pass `--dlcalc /tmp/dlc/bin/3dtrn`.
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


def timed(cmd: list[str], env: dict[str, str] | None = None) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, env=env)
    return time.perf_counter() - start


def median_of(cmd: list[str], runs: int, env: dict[str, str] | None = None,
              before: object = None) -> float:
    samples = []
    for _ in range(runs):
        if callable(before):
            before()
        samples.append(timed(cmd, env))
    return statistics.median(samples)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--dlcalc", default=shutil.which("3dtrn"), help="path to dlcalc's 3dtrn")
    args = ap.parse_args()
    exe = shutil.which("dlformula") or sys.exit("install dlformula first (pip install .)")

    cache = tempfile.mkdtemp(prefix="dlformula-bench-")
    env = dict(os.environ, DLFORMULA_CACHE_DIR=cache)
    eval_cmd = [exe, "eval", str(EXAMPLE)]

    def clear() -> None:
        shutil.rmtree(cache, ignore_errors=True)

    cold = median_of(eval_cmd, max(3, args.runs // 4), env, before=clear)
    timed(eval_cmd, env)  # populate the cache
    rows = [("python -c pass", median_of([sys.executable, "-c", "pass"], args.runs))]
    if args.dlcalc:
        rows.append(("dlcalc 3dtrn (GPT-3 175B)",
                     median_of([args.dlcalc, str(DLCALC_CONFIG)], args.runs)))
    warm = median_of(eval_cmd, args.runs, env)
    rows.append(("dlformula eval, warm cache", warm))
    rows.append(("dlformula eval, cold cache", cold))
    rows.append(("dlformula explain step_time (sympy)",
                 median_of([exe, "explain", "step_time", "-c", str(EXAMPLE)],
                           max(3, args.runs // 4), env)))
    print(f"{'command':<40}{'median s':>10}")
    for name, t in rows:
        print(f"{name:<40}{t:>10.3f}")
    base = rows[0][1]
    print(f"\nwarm eval / python -c pass = {warm / base:.2f}")
    if args.dlcalc:
        print(f"warm eval / dlcalc 3dtrn = {warm / rows[1][1]:.2f}")
    shutil.rmtree(cache, ignore_errors=True)


if __name__ == "__main__":
    main()
