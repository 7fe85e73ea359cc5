"""FP8 against BF16 on the same run: the measured speed-up beside the model's.

Pairs are runs of one shipped file with the same model shape, layout, batch and node, one in
BF16 and one in FP8. For each pair this prints the measured speed-up (BF16 step / FP8 step),
the model's, and their ratio (above 1: the model expects more from FP8 than was measured), then
the median ratio. Run: python bench/fp8_pairs.py
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import defaultdict

from dlformula.core import Engine
from dlformula.validation.fit import FitRun, collect
from dlformula.validation.shipped import shipped_paths

SAME = ("layers", "hidden", "heads", "seq_len", "global_batch", "micro_batch", "tp", "pp", "dp",
        "cp", "ep", "gpus", "vpp", "recompute", "zero", "peak_flops_bf16")


def main() -> None:
    start = time.perf_counter()
    engine = Engine()
    runs = collect(engine, list(shipped_paths().values()))
    groups: dict[tuple, dict[str, FitRun]] = defaultdict(dict)
    for run in runs:
        key = (run.file, tuple(run.values.get(k) for k in SAME))
        groups[key][run.traits["precision"]] = run
    ratios = []
    print(f"{'file':18} {'16-bit run':48} {'measured':>9} {'model':>7} {'ratio':>6}")
    for (path, _), pair in sorted(groups.items(), key=lambda kv: kv[0][0]):
        if "bf16" not in pair or "fp8" not in pair:
            continue
        bf16, fp8 = pair["bf16"], pair["fp8"]
        step = {name: float(engine.model.evaluate(r.values)["step_time"])
                for name, r in (("bf16", bf16), ("fp8", fp8))}
        measured = bf16.target / fp8.target
        model = step["bf16"] / step["fp8"]
        ratios.append(model / measured)
        print(f"{path.rsplit('/', 1)[-1][:18]:18} {bf16.id[:48]:48} {measured:8.2f}x "
              f"{model:6.2f}x {model / measured:6.2f}")
    print(f"{len(ratios)} pairs; median model / measured speed-up {statistics.median(ratios):.2f}; "
          f"{time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
    main()
