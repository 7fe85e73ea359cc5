"""Does `dlformula calibrate` transfer? Issue 13's test, on every shipped source that has enough
runs on one node: calibrate on half of a source's runs (every other run, in file order), then
predict the other half with the calibrated node and compare with the node as shipped.

    python bench/calibrate_transfer.py [--min-runs 6] [--files public,...] [--force]

For each split prints: the runs fitted and held, whether calibrate moved the figures, the
held runs' median |error| before (shipped node) and after (calibrated node), and how many held
runs got worse by more than 0.1 point. Two splits per source: fit on the even runs, hold the
odd ones, and the reverse. `--force` writes every fit, as calibrate did before it cross-validated
its own fit. A source whose runs come from two software stacks (MegaScale's paper times its
own system and Megatron-LM on one cluster) splits across stacks: calibrating on one stack does
not speak for the other. Asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from collections import defaultdict

import yaml

from dlformula.calibrate import _predict, calibrate
from dlformula.core import Engine
from dlformula.errors import DlfError
from dlformula.validation.fit import collect
from dlformula.validation.runsfile import load_runs
from dlformula.validation.shipped import shipped_paths


def splits(engine: Engine, files: list[str], min_runs: int):
    """(file, source, node, rows) for each group of runs of one source on one node."""
    for path in files:
        plain = {str(r.value["id"].value): r.plain() for r in load_runs(path, [])}
        groups: dict[tuple[str, str], list] = defaultdict(list)
        for run in collect(engine, [path]):
            if run.family is None:
                continue
            source = str(plain[run.id].get("source", ""))[:60]
            groups[(source, run.node)].append((run, plain[run.id]))
        for (source, node), rows in groups.items():
            if len(rows) >= min_runs:
                yield path, source, node, rows


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--min-runs", type=int, default=6)
    parser.add_argument("--files", default="")
    parser.add_argument("--force", action="store_true",
                        help="write the fitted figures even when cross-validation rejects them")
    args = parser.parse_args()
    engine = Engine()
    shipped = shipped_paths()
    files = [shipped[f] for f in args.files.split(",")] if args.files else list(shipped.values())
    worse_total = held_total = 0
    with tempfile.TemporaryDirectory() as tmp:
        for path, source, node, rows in splits(engine, files, args.min_runs):
            for half in (0, 1):
                fit = [r for i, r in enumerate(rows) if i % 2 == half]
                held = [r for i, r in enumerate(rows) if i % 2 != half]
                runs_file = os.path.join(tmp, "fit.yaml")
                with open(runs_file, "w", encoding="utf-8") as fh:
                    yaml.safe_dump([p for _, p in fit], fh, sort_keys=False)
                try:
                    cal = calibrate(engine, runs_file, node, force=args.force)
                except DlfError as exc:
                    print(f"{os.path.basename(path)} | {source[:40]} | {node}: {exc}")
                    continue
                point = cal.written()
                before = [_predict(engine, r, {}) / r.target - 1 for r, _ in held]
                after = [_predict(engine, r, point) / r.target - 1 for r, _ in held]
                worse = sum(abs(a) > abs(b) + 0.001 for a, b in zip(after, before))
                worse_total += worse
                held_total += len(held)
                moved = ", ".join(f"{n} {b:.3g}->{a:.3g}" for n, (b, a) in cal.figures.items()
                                  if abs(a / b - 1) > 1e-9) or "no figure moved"
                moved += "" if cal.accepted else " (not kept: no better left out)"
                print(f"{os.path.basename(path)} | {source[:40]} | {node} | fit {len(fit)} "
                      f"held {len(held)} | {moved} | held median "
                      f"{statistics.median(map(abs, before)):.1%} -> "
                      f"{statistics.median(map(abs, after)):.1%} | worse {worse}")
    print(f"held runs worse after calibration: {worse_total} of {held_total}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
